#!/usr/bin/env bash
# The weight-streaming gemv path (kernels/gemv.cu; WRING_CUDA_SMALL_LINEAR_MAX_T=8) on the
# device, in about 200 s. `scripts/gpu/gemv_check.sh prepare` (here, no GPU): builds the
# gpu_check example and lays out .dev/g (stripped, xz). On the device (carry .dev/g):
#   0. gpu_check quant-bench for fp8, int4 and nvfp4 (dummy 8B), one process per scheme,
#      started first: they quantise at load (CPU) while the checks run, then wait for their
#      turn to time (QUANT_BENCH_GATE), one at a time, default vs gemv (quant.json);
#   1. gpu_check qgemm alone (also warms the kernel and JIT caches), then in parallel:
#      graphs (dummy, dummy-gguf, dummy-8b) and cpu-compare (dummy-gguf), all with the gemv
#      path on: replay = eager bitwise, verify = plain greedy, gemv vs cuBLAS, vs the CPU;
#   2. the quant-bench timings, one scheme at a time, nothing else on the GPU;
#   3. gpu_check gemv alone: every format and token bucket vs a host reference, and timed
#      against the path it replaces (gemv.json);
#   4. gpu_check steps alone with STEPS_VARIANTS=default,gemv on the small-step shapes
#      (steps.json, latency.json with kernels per step; bf16 135M and 8B).
# Writes $OUT/gemv.tgz (the gemv/ folder: *.md, *.json, summary.md; the device returns few
# files) and prints a compact summary.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
if [ "${1:-}" = prepare ]; then
    gpu_check_prepare .dev/g
    exit $?
fi
OUT=${OUT:-/tmp/wring-out}
G=$OUT/gemv
mkdir -p "$G"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
xz -dc .dev/g/gpu_check.xz > /tmp/gpu_check && chmod +x /tmp/gpu_check
echo "commit $(cat .dev/g/commit 2>/dev/null)" | tee "$G/summary.md"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$G/summary.md"

GPU_CHECK=/tmp/gpu_check
run() { gpu_check_run "$@"; }

# 0. Quantized 8B loads in the background, timings gated.
GATE=/tmp/qbench
rm -f $GATE.*
SCHEMES="fp8 int4 nvfp4"
for s in $SCHEMES; do
    QUANT_BENCH_GATE=$GATE QUANT_BENCH_SCHEMES=$s QUANT_BENCH_VARIANTS=default,gemv \
        QUANT_BENCH_SHAPES=${QUANT_BENCH_SHAPES:-1x1,8x1,1x5} WRING_CUDA_MAX_TOKENS=4096 \
        timeout 190 /tmp/gpu_check quant-bench "$G/quant-$s.json" > "$G/quant-$s.md" 2> "$G/quant-$s.err" &
done

# 1. Correctness with the gemv path on.
export WRING_CUDA_SMALL_LINEAR_MAX_T=8
run 45 qgemm qgemm
checks=()
run 90 graphs-135m graphs dummy & checks+=($!)
run 90 graphs-gguf graphs dummy-gguf & checks+=($!)
run 90 cpu-135m cpu-compare dummy-gguf & checks+=($!)
run 120 graphs-8b graphs dummy-8b & checks+=($!)
# The four checks only (the quant-bench processes are waiting for their turn).
wait "${checks[@]}"
echo "checks done at $(el) s" | tee -a "$G/summary.md"
unset WRING_CUDA_SMALL_LINEAR_MAX_T

# 2. Quantized step timings, one scheme at a time (each waits for its load, up to 125 s in).
for s in $SCHEMES; do
    while [ ! -e $GATE.$s.loaded ] && [ ! -e $GATE.$s.done ] && [ "$(el)" -lt 125 ]; do sleep 1; done
    if [ -e $GATE.$s.loaded ]; then
        touch $GATE.$s.go
        while [ ! -e $GATE.$s.done ] && [ "$(el)" -lt 150 ]; do sleep 0.5; done
    fi
    echo "quant-bench $s: loaded in $(cat $GATE.$s.loaded 2>/dev/null || echo '?') s, timed by $(el) s" | tee -a "$G/summary.md"
done
for s in $SCHEMES; do touch $GATE.$s.go; done  # late loads time now (their rows may be noisy)

# 3. The kernels alone.
run 40 gemv gemv "$G"
# 4. Whole steps, bf16.
STEPS_VARIANTS=default,gemv STEPS_SHAPES=${STEPS_SHAPES:-1x1,1x5,2x1,8x1} run 60 steps steps "$G"
wait
echo "all done at $(el) s" | tee -a "$G/summary.md"
# issue-21 rows of every scheme in one file (bf16 8B rows come from steps.json), and the
# table the default is chosen from.
python3 - "$G" > "$G/quant-table.md" <<'EOF' || true
import json, sys, glob, os
g = sys.argv[1]
rows = []
for f in sorted(glob.glob(os.path.join(g, "quant-*.json"))):
    rows += json.load(open(f))
sp = os.path.join(g, "steps.json")
for r in (json.load(open(sp)) if os.path.exists(sp) else []):
    if "8b" in str(r.get("model")):
        rows.append({"model": "llama-3.1-8b", "weights": "bf16", "batch": r["batch"], "q": r["q"],
                     "ms": r["ms"], "roofline_ms": r["roofline_ms"], "variant": r.get("variant")})
json.dump(rows, open(os.path.join(g, "quant.json"), "w"), indent=1)
print("## 8B step ms (graph replay): default path vs gemv; last column: bf16 default / this gemv")
base = {(r["batch"], r["q"]): r["ms"] for r in rows if r["weights"] == "bf16" and r["variant"] == "default"}
print("| weights | batch × q | default ms | gemv ms | gemv speed-up | roofline ms | gemv % of roofline | vs bf16 default |")
print("|---|---|---|---|---|---|---|---|")
for w in ["bf16", "fp8", "int4", "nvfp4"]:
    for (b, q) in sorted({(r["batch"], r["q"]) for r in rows if r["weights"] == w}):
        pick = lambda v: next((r for r in rows if r["weights"] == w and (r["batch"], r["q"]) == (b, q) and r["variant"] == v), None)
        d, v = pick("default"), pick("gemv")
        if not d or not v:
            continue
        bb = base.get((b, q))
        vs = f"{bb / v['ms']:.2f}×" if bb else "?"
        print(f"| {w} | {b} × {q} | {d['ms']:.3f} | {v['ms']:.3f} | {d['ms'] / v['ms']:.2f}× | {v['roofline_ms']:.3f} | "
              f"{100 * v['roofline_ms'] / v['ms']:.0f} % | {vs} |")
EOF
{
    echo
    grep -h "Gemv linears vs cuBLAS\|batch 1 × q\|^| 1 | \|^| 6 | " "$G"/graphs-*.md
    echo
    cat "$G/quant-table.md"
    echo
    cat "$G/steps.md" 2>/dev/null
    echo
    for s in $SCHEMES; do grep -h "error" "$G/quant-$s.md" 2>/dev/null; tail -1 "$G/quant-$s.err" 2>/dev/null; done
    echo
    # The kernels alone: the 8B rows at T = 1 and 8 and the 135M rows at T = 1.
    grep -h "^| model\|^|---" "$G/gemv.md" 2>/dev/null | head -2
    grep -h "^| 8b .* | [18] | \|^| 135m .* | 1 | " "$G/gemv.md" 2>/dev/null
} > "$G/tables.md"
cat "$G/tables.md" >> "$G/summary.md"
cat "$G/tables.md"  # the check lines above were printed as they came
cd "$OUT" && tar czf gemv.tgz gemv && rm -rf gemv
echo "wrote $OUT/gemv.tgz at $(el) s"
