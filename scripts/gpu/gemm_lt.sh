#!/usr/bin/env bash
# Issue 14, session 15: bf16 GEMMs on cuBLASLt's first heuristic algorithm, planned once per
# shape (WRING_CUDA_GEMM_LT=on), against cublasGemmEx (off). One call, gpu_check only:
# the checks with it on (replay = eager bitwise and verify = plain greedy, 135M shape and
# dummy 8B; CUDA vs the f32 CPU backend), then off/on interleaved: `gpu_check prefill-cold`
# (eager steps with prompt tokens, with the host's enqueue time) and `gpu_check steps`
# (graph replay, decode and verify shapes), 135M shape and dummy 8B.
# Here: PROFILE=release bash -c '. scripts/gpu/gpu_check_lib.sh && gpu_check_prepare .dev/lt'
# Device: bash scripts/gpu/gemm_lt.sh   (carry .dev/lt)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
export DIR=${DIR:-.dev/lt}
gpu_check_setup gemm-lt
WRING_CUDA_GEMM_LT=on gpu_check_checks "graphs-135m graphs-8b cpu-135m"
lens=97,113,131,150,181,203,228,259,301,344
for lt in off on; do
    WRING_CUDA_GEMM_LT=$lt PREFILL_COLD_TOKENS=$lens PREFILL_COLD_MODELS=smollm2-135m,llama-3.1-8b \
        gpu_check_run 200 cold-$lt prefill-cold "$G/cold-$lt"
done
for lt in off on; do
    WRING_CUDA_GEMM_LT=$lt STEPS_VARIANTS=default STEPS_SHAPES=1x1,8x1,32x1,32x5,32x13 \
        gpu_check_run 200 steps-$lt steps "$G/steps-$lt"
done
python3 - "$G" <<'PY' | tee -a "$G/summary.md"
import json, statistics, sys
g = sys.argv[1]
def load(name):
    try:
        return json.load(open(f"{g}/{name}"))
    except (OSError, ValueError):
        return []
print("| model | eager steps: warm ms off / on | enqueue ms off / on | cold - warm ms off / on |")
print("|---|---|---|---|")
for model in ("smollm2-135m", "llama-3.1-8b"):
    cols = []
    for key in ("warm_ms", "warm_enqueue_ms", None):
        v = []
        for lt in ("off", "on"):
            rows = [r for r in load(f"cold-{lt}/prefill_cold.json") if r["model"] == model]
            xs = [r[key] if key else r["cold_ms"] - r["warm_ms"] for r in rows]
            v.append(f"{statistics.median(xs):.3f}" if xs else "-")
        cols.append(" / ".join(v))
    print(f"| {model} (median) | " + " | ".join(cols) + " |")
print()
print("| model | batch × q | graph ms off | graph ms on |")
print("|---|---|---:|---:|")
off = {(r["model"], r["batch"], r["q"]): r["ms"] for r in load("steps-off/steps.json")}
on = {(r["model"], r["batch"], r["q"]): r["ms"] for r in load("steps-on/steps.json")}
for k in off:
    print(f"| {k[0]} | {k[1]} × {k[2]} | {off[k]:.3f} | {on.get(k, float('nan')):.3f} |")
PY
cd "$OUT" && tar -czf gemm-lt.tgz gemm-lt
