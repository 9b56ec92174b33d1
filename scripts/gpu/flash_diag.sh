#!/usr/bin/env bash
# Issue 14, session 13, call 3: (1) the attention check's batch-invariance failures of run 2
# (head_dim 128, 2 x 200: mma+tiles and mma-staged) looked at closely: the cases with prefill
# chunks only, each kernel's alone run three times, the differing values described;
# (2) Nsight Compute per-kernel times of a 135M 1 x 1024 prefill step with attention_flash and
# with attention_mma taking the chunk (WRING_CUDA_ATTENTION=mma-only).
# Here: . scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/f2
# Device: DIR=.dev/f2 bash scripts/gpu/flash_diag.sh   (carry .dev/f2)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
export DIR=${DIR:-.dev/f2}
gpu_check_setup flash-diag
ATTENTION_CASES=${CASES:-128:2x200,128:8x24,64:3x300,64:8x20} ATTENTION_INV_REPEAT=3 \
    gpu_check_run 120 attention attention
grep -h "^| 64 ×\|^| 128 ×\|^<!--" "$G/attention.md" | tee -a "$G/summary.md"
if [ -z "${SKIP_NCU:-}" ]; then
    for v in flash mma-only; do
        if [ $v = flash ]; then e="WRING_CUDA_PREFILL=flash"; else e="WRING_CUDA_ATTENTION=mma-only"; fi
        env $e OUT=$G/ncu-$v SPECS="dummy:1:1024:16" timeout 130 bash scripts/gpu/profile_ncu.sh 2>&1 | tail -14 | tee -a "$G/summary.md"
    done
fi
cd "$OUT" && tar -czf flash-diag.tgz flash-diag
