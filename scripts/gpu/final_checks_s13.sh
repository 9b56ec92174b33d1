#!/usr/bin/env bash
# Issue 14, session 13, last call: this build's defaults (prefill chunks on attention_flash,
# host-to-device copies that wait for their DMA, silu_mul_fused on a 2-D grid)
#   1. correctness: every attention kernel vs float64, deterministic and batch-invariant
#      (the whole check, then the cases that failed in calls 2 and 3 with three alone runs
#      each), graph replay = eager and verify = greedy (135M shape, dummy 8B), CUDA vs CPU;
#   2. eager steps with prompt tokens, this build against OLD (call 1's gpu_check, same
#      flash kernel, the old silu_mul_fused and uploads), one after the other;
#   3. graph-replay decode/verify steps of the defaults -> steps.json, latency.json.
# Here: . scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/f3 (and .dev/f1 kept)
# Device: DIR=.dev/f3 OLD=.dev/f1 bash scripts/gpu/final_checks_s13.sh   (carry .dev/f3 .dev/f1)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/f3}
OLD=${OLD:-.dev/f1}
gpu_check_setup final13
gpu_check_checks "attention graphs-135m graphs-8b cpu-135m"
grep -h "no logits" "$G/cpu-135m.md" | tee -a "$G/summary.md"
ATTENTION_CASES=128:2x200,64:3x300,128:8x24 ATTENTION_INV_REPEAT=3 gpu_check_run 90 attention-again attention
grep -h "^| 64 ×\|^| 128 ×\|^<!--" "$G/attention-again.md" | tee -a "$G/summary.md"
mkdir -p "$G/prefill-new" "$G/prefill-old"
gpu_check_run 100 prefill-new prefill "$G/prefill-new"
new_bin=$GPU_CHECK
GPU_CHECK=/tmp/gpu_check_old
xz -dc "$OLD/gpu_check.xz" > $GPU_CHECK && chmod +x $GPU_CHECK
PREFILL_VARIANTS=flash,mma-only gpu_check_run 100 prefill-old prefill "$G/prefill-old"
GPU_CHECK=$new_bin
for f in prefill-new prefill-old; do echo "$f"; grep -h "^| \|^###" "$G/$f.md"; done | tee -a "$G/summary.md"
mkdir -p "$G/steps"
STEPS_VARIANTS=default STEPS_SHAPES=1x1,8x1,32x1,32x5,32x7,32x9,32x13 gpu_check_run 120 steps steps "$G/steps"
grep -h "^| [a-z]" "$G/steps.md" | grep -v "^| variant" | tee -a "$G/summary.md"
cd "$OUT" && tar -czf final13.tgz final13
