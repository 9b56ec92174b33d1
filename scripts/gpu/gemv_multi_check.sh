#!/usr/bin/env bash
# The multi-tile int4/nvfp4 gemv (kernels/gemv_multi.cu, steps of 9 to 64 tokens) on the
# device, in about 200 s. `scripts/gpu/gemv_multi_check.sh prepare` (here, no GPU): builds
# the gpu_check example and lays out .dev/m (stripped, xz). On the device (carry .dev/m):
#   0. gpu_check quant-bench on dummy llama-3.1-8b for int4, nvfp4 (variants tensor-core =
#      the old path, multi = the new, multi-fused = the new with the norm fused into its
#      gemv too, for steps of 9 to 64 tokens) and bf16 (default), one
#      process each, started first: they load (and quantise) while the checks run, then time
#      one at a time (QUANT_BENCH_GATE) at batch 1, 8, 16, 32, 64 and 32 × 5;
#   1. gpu_check multi-gemv on dummy 135M with int4 and with nvfp4 weights, and int4 with
#      WRING_CUDA_MULTI_FUSED_NORM=on (in parallel):
#      replay = eager bitwise, multi vs tensor-core logits, verify 1×5 / 12×5 = plain greedy
#      (32×5 reported: its 160-token verify step is past the multi-tile builds);
#   2. gpu_check gemv on the 8B shapes, int4 and nvfp4, T = 8, 9, 16, 32, 64: each matrix
#      vs a host f64 reference, rows 0..8 = the 8-token build bitwise, timed vs the
#      tensor-core kernel;
#   3. the quant-bench timings, one scheme at a time, nothing else on the GPU.
# Writes $OUT/gemv_multi.tgz (summary.md, every .md/.json/.err) and prints the table.
# `gemv_multi_check.sh checks` runs steps 1-2 only, `gemv_multi_check.sh bench` 0 and 3 only
# (QUANT_BENCH_SHAPES overrides the shapes).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DEV=.dev/m
. scripts/gpu/gpu_check_lib.sh
if [ "${1:-}" = prepare ]; then
    gpu_check_prepare $DEV
    exit $?
fi
MODE=${1:-all}
OUT=${OUT:-/tmp/wring-out}
G=$OUT/gemv_multi
mkdir -p "$G"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
bin=/tmp/gpu_check_m
xz -dc $DEV/gpu_check.xz > $bin && chmod +x $bin || { echo "no $DEV/gpu_check.xz: run prepare here and carry $DEV"; exit 1; }
echo "commit $(cat $DEV/commit 2>/dev/null)" | tee "$G/summary.md"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$G/summary.md"

GPU_CHECK=$bin
run() { gpu_check_run "$@"; }

# 0. The 8B loads in the background, timings gated.
GATE=/tmp/mbench
rm -f $GATE.*
SCHEMES=${BENCH_SCHEMES:-"int4 nvfp4 bf16"}  # three 8B processes at once may not fit: BENCH_SCHEMES picks
SHAPES=${QUANT_BENCH_SHAPES:-1x1,8x1,16x1,32x1,64x1,32x5}
[ "$MODE" = checks ] && SCHEMES=""
for s in $SCHEMES; do
    v=tensor-core,multi,multi-fused
    [ $s = int4 ] && v=$v,default  # default: `auto` chooses per graph key (end to end)
    [ $s = bf16 ] && v=default
    QUANT_BENCH_GATE=$GATE QUANT_BENCH_SCHEMES=$s QUANT_BENCH_VARIANTS=$v \
        QUANT_BENCH_SHAPES=$SHAPES WRING_CUDA_MAX_TOKENS=4096 \
        timeout 195 $bin quant-bench "$G/quant-$s.json" > "$G/quant-$s.md" 2> "$G/quant-$s.err" &
done

# 1. Whole steps with the multi-tile path forced, 135M, both formats.
if [ "$MODE" != bench ]; then
checks=()
WRING_CUDA_WEIGHTS=int4 run 100 multi-int4 multi-gemv dummy & checks+=($!)
WRING_CUDA_WEIGHTS=nvfp4 run 100 multi-nvfp4 multi-gemv dummy & checks+=($!)
WRING_CUDA_WEIGHTS=int4 WRING_CUDA_MULTI_FUSED_NORM=on run 100 multi-int4-fused multi-gemv dummy & checks+=($!)
wait "${checks[@]}"
echo "step checks done at $(el) s" | tee -a "$G/summary.md"
# 2. The kernels alone on the 8B shapes.
GEMV_MODELS=8b GEMV_SCHEMES=int4,nvfp4 GEMV_TOKENS=8,9,16,32,64 run 60 gemv gemv "$G"
echo "kernel checks done at $(el) s" | tee -a "$G/summary.md"
fi

# 3. Step timings, one scheme at a time (each waits for its load, up to 150 s in).
for s in $SCHEMES; do
    while [ ! -e $GATE.$s.loaded ] && [ ! -e $GATE.$s.done ] && [ "$(el)" -lt 150 ]; do sleep 1; done
    if [ -e $GATE.$s.loaded ]; then
        touch $GATE.$s.go
        while [ ! -e $GATE.$s.done ] && [ "$(el)" -lt 190 ]; do sleep 0.5; done
    fi
    echo "quant-bench $s: loaded in $(cat $GATE.$s.loaded 2>/dev/null || echo '?') s, timed by $(el) s" | tee -a "$G/summary.md"
done
for s in $SCHEMES; do touch $GATE.$s.go; done
wait
echo "all done at $(el) s" | tee -a "$G/summary.md"

python3 - "$G" > "$G/table.md" <<'EOF' || true
import json, sys, glob, os
g = sys.argv[1]
rows = []
for f in sorted(glob.glob(os.path.join(g, "quant-*.json"))):
    try:
        rows += json.load(open(f))
    except Exception as e:
        print(f"{f}: {e}")
json.dump(rows, open(os.path.join(g, "quant.json"), "w"), indent=1)
bf = {(r["batch"], r["q"]): r["ms"] for r in rows if r["weights"] == "bf16"}
print("## Dummy 8B whole step ms (graph replay): old path (tensor-core kernel above 8 tokens) vs multi-tile gemv")
print("| weights | batch × q | tokens | old ms | multi ms | multi speed-up | multi-fused ms | auto ms | bf16 ms | multi vs bf16 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for w in ["int4", "nvfp4"]:
    for (b, q) in sorted({(r["batch"], r["q"]) for r in rows if r["weights"] == w}):
        pick = lambda v: next((r["ms"] for r in rows if r["weights"] == w and (r["batch"], r["q"]) == (b, q) and r["variant"] == v), None)
        old, new, fused, auto, base = pick("tensor-core"), pick("multi"), pick("multi-fused"), pick("default"), bf.get((b, q))
        f = lambda v: f"{v:.3f}" if v else "?"
        up = f"{old / new:.2f}×" if old and new else "?"
        vs = f"{base / new:.2f}×" if base and new else "?"
        print(f"| {w} | {b} × {q} | {b * q} | {f(old)} | {f(new)} | {up} | {f(fused)} | {f(auto)} | {f(base)} | {vs} |")
EOF
{
    echo
    cat "$G/table.md"
    echo
    echo "## Kernels alone (8B shapes): gemv µs vs the tensor-core kernel"
    grep -h "^| model\|^|---" "$G/gemv.md" 2>/dev/null | head -2
    grep -h "^| 8b " "$G/gemv.md" 2>/dev/null
    echo
    for s in int4 nvfp4 int4-fused; do grep -h "^| \|RESULT" "$G/multi-$s.md" 2>/dev/null; echo; done
    for s in $SCHEMES; do grep -h "error" "$G/quant-$s.md" 2>/dev/null; tail -2 "$G/quant-$s.err" 2>/dev/null; done
} > "$G/tables.md"
cat "$G/tables.md" >> "$G/summary.md"
cat "$G/tables.md"
cd "$OUT" && tar czf gemv_multi.tgz gemv_multi && rm -rf gemv_multi
echo "wrote $OUT/gemv_multi.tgz at $(el) s"
