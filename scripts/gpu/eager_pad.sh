#!/usr/bin/env bash
# Issue 14, session 15, first call of a pair: eager steps padded to a token bucket
# (WRING_CUDA_EAGER_PAD). Stages the model's first part and /tmp/wring for the second call
# (scripts/gpu/eager_pad_serve.sh), then: the checks an eager step's shape touches (replay =
# eager bitwise and verify = plain greedy on the 135M shape, CUDA vs the f32 CPU backend with
# prefill), and `gpu_check prefill-cold` with the padding off and on, 135M and dummy 8B, over
# prompt lengths that share buckets (as a server's prompts do).
# Here: bash scripts/gpu/pair_prepare.sh.  Device: bash scripts/gpu/eager_pad.sh (carry .dev/pa)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
export DIR=.dev/pa
bash scripts/gpu/stage.sh .dev/pa > /dev/null
gpu_check_setup eager-pad
gpu_check_checks "graphs-135m cpu-135m"
lens=97,104,113,122,131,140,150,166,181,190,203,215,228,240,259,270,301,344
for pad in off on; do
    WRING_CUDA_EAGER_PAD=$pad PREFILL_COLD_TOKENS=$lens PREFILL_COLD_MODELS=smollm2-135m,llama-3.1-8b \
        gpu_check_run 200 cold-$pad prefill-cold "$G/$pad"
done
for f in cold-off cold-on; do echo "### $f"; sed -n '/^|/p' "$G/$f.md"; done >> "$G/summary.md"
python3 - "$G" <<'PY' | tee -a "$G/summary.md"
import json, statistics, sys
g = sys.argv[1]
for model in ("smollm2-135m", "llama-3.1-8b"):
    for pad in ("off", "on"):
        try:
            rows = [r for r in json.load(open(f"{g}/{pad}/prefill_cold.json")) if r["model"] == model]
        except (OSError, ValueError):
            continue
        extra = [r["cold_ms"] - r["warm_ms"] for r in rows]
        warm = [r["warm_ms"] for r in rows]
        print(f"{model} pad {pad}: cold - warm median {statistics.median(extra):.2f} ms, "
              f"max {max(extra):.2f}, sum {sum(extra):.1f} over {len(rows)} steps; "
              f"warm median {statistics.median(warm):.2f} ms")
PY
cd "$OUT" && tar -czf eager-pad.tgz eager-pad
