#!/usr/bin/env bash
# Issue 14, session 12, last calls: this build's defaults
#   1. graph-replay step times, default, `staged` and per_q=128, both models at their
#      native contexts -> $G/steps/steps.json, latency.json;
#   2. correctness: every attention kernel vs float64 (deterministic, batch-invariant;
#      SKIP_ATTENTION=1 leaves it out), graph replay = eager and verify = greedy (135M
#      shape, dummy 8B), CUDA vs CPU logits (with a step whose tokens need no logits).
# Here: . scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/s12c
# Device: DIR=.dev/s12c bash scripts/gpu/final_checks_s12.sh   (carry .dev/s12c)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/s12c}
gpu_check_setup final
mkdir -p "$G/steps"
STEPS_VARIANTS=default,staged,splits=per_q=128 STEPS_SHAPES=1x1,8x1,32x1,32x5,32x7,32x9,32x13 \
    gpu_check_run 200 steps steps "$G/steps"
grep -h "^| [a-z]" "$G/steps.md" | grep -v "^| variant" | tee -a "$G/summary.md"
a=
if [ -z "${SKIP_ATTENTION:-}" ]; then ( gpu_check_run 220 attention attention ) & a=$!; fi
gpu_check_checks "graphs-135m graphs-8b cpu-135m"
[ -n "$a" ] && wait $a && grep -h "^| 64 ×\|^| 128 ×" "$G/attention.md" | tee -a "$G/summary.md"
grep -h "no logits" "$G/cpu-135m.md" | tee -a "$G/summary.md"
cd "$OUT" && tar -czf final.tgz final
