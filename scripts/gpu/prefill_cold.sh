#!/usr/bin/env bash
# Issue 14, session 14: why a serving step with prompt tokens costs 4.6 ms (c=32) to 13 ms
# (c=1) of model time when `gpu_check prefill` times a 512-token step at ~1.8 ms.
# (1) `gpu_check prefill-cold`: prompts of lengths not seen before, cold vs warm, with the
# host's enqueue time, 135M shape and dummy 8B; again with CUDA_MODULE_LOADING=EAGER (is the
# cold cost lazy module loading?); (2) `gpu_check prefill` with a release build, against
# session 13's debug-build table (were those eager 135M steps host-bound?).
# Here: PROFILE=release bash -c '. scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/c1'
# Device: DIR=.dev/c1 bash scripts/gpu/prefill_cold.sh   (carry .dev/c1)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
export DIR=${DIR:-.dev/c1}
gpu_check_setup prefill-cold
PREFILL_COLD_MODELS=smollm2-135m,llama-3.1-8b gpu_check_run 200 cold-lazy prefill-cold "$G/lazy"
CUDA_MODULE_LOADING=EAGER gpu_check_run 120 cold-eager prefill-cold "$G/eager"
PREFILL_VARIANTS=flash PREFILL_ROUNDS=3 gpu_check_run 150 prefill-release prefill "$G/release"
for f in cold-lazy cold-eager prefill-release; do echo "### $f"; sed -n '/^|/p' "$G/$f.md"; done | tee -a "$G/summary.md"
cd "$OUT" && tar -czf prefill-cold.tgz prefill-cold
