#!/usr/bin/env bash
# Issue 14, session 12: attention_mma with each warp's K/V tiles copied by cp.async into a
# ring in shared memory (WRING_CUDA_ATTENTION=mma-staged) against the defaults, and the
# keys per split per query token (per_q), in graph replay, one call (as run at 23fb5a6,
# where the default per_q was 128; the variants below keep that comparison):
#   1. `gpu_check steps` at the native contexts (135M 256, 8B 512) and at 1024: defaults
#      (twice: the noise), staged, per_q=512, staged + per_q=512, staged + per_q=256;
#   2. correctness: every attention kernel vs float64 (staged deterministic and batch-
#      invariant), and with staged as the default: graph replay = eager, verify = greedy,
#      CUDA vs CPU logits.
# Here: . scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/s12a
# Device: DIR=.dev/s12a bash scripts/gpu/staged_check.sh   (carry .dev/s12a)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/s12a}
gpu_check_setup staged
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$G/summary.md"
export STEPS_SHAPES=${STEPS_SHAPES:-1x1,8x1,32x1,32x5,32x9,32x13}
for ctx in ${CTXS:-native 1024}; do
    if [ "$ctx" = native ]; then unset STEPS_CTX; else export STEPS_CTX=$ctx; fi
    mkdir -p "$G/ctx-$ctx-a" "$G/ctx-$ctx-b"
    STEPS_VARIANTS=${VARIANTS_A:-splits=per_q=128,staged,default,splits=per_q=128} \
        gpu_check_run 280 "steps-$ctx-a" steps "$G/ctx-$ctx-a"
    WRING_CUDA_ATTENTION=${ATTENTION_B:-mma-staged} STEPS_VARIANTS=${VARIANTS_B:-splits=per_q=512,splits=per_q=256} \
        gpu_check_run 200 "steps-$ctx-b" steps "$G/ctx-$ctx-b"
    grep -h "^| [a-z]" "$G/steps-$ctx-a.md" "$G/steps-$ctx-b.md" | grep -v "^| variant" | tee -a "$G/summary.md"
done
if [ -z "${SKIP_CHECKS:-}" ]; then
    ( gpu_check_run 200 attention attention ) &
    a=$!
    gpu_check_checks "graphs-135m graphs-8b cpu-135m"
    wait $a
    grep -h "^| 64 ×\|^| 128 ×" "$G/attention.md" | tee -a "$G/summary.md"
fi
cd "$OUT" && tar -czf staged.tgz staged
