#!/usr/bin/env bash
# Issue 14, session 12: attention_mma's keys per split per query token (WRING_CUDA_MMA_SPLITS
# per_q) in graph replay, one call: `gpu_check steps` with the defaults (twice: the noise),
# per_q=256 and per_q=512, at the native contexts (135M 256, 8B 512) and at 1024.
# Here: . scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/s12a
# Device: DIR=.dev/s12a bash scripts/gpu/perq_steps.sh   (carry .dev/s12a)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
OUT=${OUT:-/tmp/wring-out}
G=$OUT/perq
mkdir -p "$G"
DIR=${DIR:-.dev/s12a}
GPU_CHECK=/tmp/gpu_check
xz -dc "$DIR/gpu_check.xz" > $GPU_CHECK && chmod +x $GPU_CHECK
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
echo "commit $(cat "$DIR/commit")" | tee "$G/summary.md"
export STEPS_VARIANTS=${STEPS_VARIANTS:-default,splits=per_q=512,splits=per_q=256,default}
export STEPS_SHAPES=${STEPS_SHAPES:-1x1,8x1,32x1,32x5,32x9,32x13}
for ctx in ${CTXS:-native 1024}; do
    mkdir -p "$G/ctx-$ctx"
    if [ "$ctx" = native ]; then unset STEPS_CTX; else export STEPS_CTX=$ctx; fi
    gpu_check_run 280 "steps-$ctx" steps "$G/ctx-$ctx"
    grep "^|\|^###" "$G/steps-$ctx.md" | tee -a "$G/summary.md"
done
