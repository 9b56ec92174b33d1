#!/usr/bin/env bash
# Issue 14, session 13: the FlashAttention-style prefill kernel (attention_flash) and the
# lane-private staged decode kernel (mma-staged), in two back-to-back calls on one machine:
#   PART=times  1. eager steps with prompt tokens per prefill kernel (`gpu_check prefill`:
#                  flash, tiles, mma-only, staged), both models;
#               2. graph-replay decode/verify steps, defaults vs staged, at the native
#                  contexts and at 1024.
#   PART=checks every attention kernel vs float64 (deterministic, batch-invariant), graph
#               replay = eager and verify = greedy (135M shape, dummy 8B), CUDA vs CPU
#               logits, with the defaults (prefill chunks on attention_flash); then the
#               attention check again if there is time (the staged kernel failed once in
#               three runs in session 12).
# Here: . scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/f1
# Device: PART=times DIR=.dev/f1 bash scripts/gpu/flash_check.sh, then PART=checks (carry .dev/f1)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/f1}
PART=${PART:-times}
gpu_check_setup "flash-$PART"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$G/summary.md"
if [ "$PART" = times ]; then
    mkdir -p "$G/prefill"
    PREFILL_VARIANTS=${PREFILL_VARIANTS:-flash,tiles,mma-only,staged} gpu_check_run 200 prefill prefill "$G/prefill"
    grep -h "^| \|^###" "$G/prefill.md" | tee -a "$G/summary.md"
    export STEPS_SHAPES=${STEPS_SHAPES:-1x1,8x1,32x1,32x5,32x9,32x13}
    for ctx in ${CTXS:-native 1024}; do
        if [ "$ctx" = native ]; then unset STEPS_CTX; else export STEPS_CTX=$ctx; fi
        mkdir -p "$G/steps-$ctx"
        STEPS_VARIANTS=${VARIANTS:-default,staged} gpu_check_run 170 "steps-$ctx" steps "$G/steps-$ctx"
        grep -h "^| [a-z]" "$G/steps-$ctx.md" | grep -v "^| variant" | tee -a "$G/summary.md"
    done
else
    gpu_check_checks "attention graphs-135m graphs-8b cpu-135m"
    grep -h "no logits" "$G/cpu-135m.md" | tee -a "$G/summary.md"
fi
cd "$OUT" && tar -czf "flash-$PART.tgz" "flash-$PART"
