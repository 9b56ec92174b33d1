#!/usr/bin/env bash
# Issue 15: the RMSNorm in the gemv prologue and the residual add in the gemv epilogue
# (WRING_CUDA_FUSED_NORM), and the per-graph-key choice between gemv and cuBLAS
# (WRING_CUDA_SMALL_STEP_PATH=auto), on the device in under 200 s.
# `scripts/gpu/fused_norm_check.sh prepare` (here, no GPU): builds the gpu_check example into
# .dev/g (stripped, xz). On the device (carry .dev/g):
#   0. gpu_check fused-norm dummy-8b starts first and loads (CPU) while 1 runs, then waits
#      for its turn (FUSED_NORM_GATE);
#   1. in parallel, with the gemv path forced and the norm fused: graphs dummy, graphs
#      dummy-gguf (replay = eager bitwise, verify = plain greedy, gemv vs cuBLAS, PDL and K/V
#      store identical) and cpu-compare dummy-gguf (vs the f32 CPU backend);
#   2. gpu_check fused-norm dummy alone: fused vs unfused gemv vs cuBLAS, replay = eager,
#      verify K=4 = plain, then step times and kernels per step at batch 1/2/4/8 for cublas,
#      gemv, gemv+fused and auto;
#   3. the same for dummy-8b, alone.
# Prints a compact summary and writes $OUT/fused_norm.tgz (*.md, *.err, *.json, summary.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
if [ "${1:-}" = prepare ]; then
    gpu_check_prepare .dev/g
    exit $?
fi
OUT=${OUT:-/tmp/wring-out}
G=$OUT/fused_norm
mkdir -p "$G"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
xz -dc .dev/g/gpu_check.xz > /tmp/gpu_check && chmod +x /tmp/gpu_check
echo "commit $(cat .dev/g/commit 2>/dev/null)" | tee "$G/summary.md"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$G/summary.md"

GPU_CHECK=/tmp/gpu_check
run() { gpu_check_run "$@"; }

# 0. The 8B load in the background, its GPU work gated.
GATE=/tmp/fngate
rm -f $GATE.*
FUSED_NORM_GATE=$GATE FUSED_NORM_MODELS=dummy-8b WRING_CUDA_MAX_TOKENS=4096 \
    timeout 195 /tmp/gpu_check fused-norm "$G/8b" > "$G/fused-8b.md" 2> "$G/fused-8b.err" &
bg=$!

# 1. The existing checks on the forced gemv path with the norm fused.
checks=()
( export WRING_CUDA_SMALL_STEP_PATH=gemv WRING_CUDA_FUSED_NORM=on
  run 70 graphs-135m graphs dummy ) & checks+=($!)
( export WRING_CUDA_SMALL_STEP_PATH=gemv WRING_CUDA_FUSED_NORM=on
  run 70 graphs-gguf graphs dummy-gguf ) & checks+=($!)
( export WRING_CUDA_SMALL_STEP_PATH=gemv WRING_CUDA_FUSED_NORM=on
  run 70 cpu-135m cpu-compare dummy-gguf ) & checks+=($!)
wait "${checks[@]}"
echo "checks done at $(el) s" | tee -a "$G/summary.md"

# 2. 135M alone (fused-norm sets each path itself).
FUSED_NORM_MODELS=dummy run 45 fused-135m fused-norm "$G/135m"

# 3. 8B alone.
while [ ! -e $GATE.dummy-8b.loaded ] && kill -0 $bg 2>/dev/null && [ "$(el)" -lt 150 ]; do sleep 1; done
echo "8B loaded in $(cat $GATE.dummy-8b.loaded 2>/dev/null || echo '?') s, timing from $(el) s" | tee -a "$G/summary.md"
touch $GATE.dummy-8b.go
wait $bg
echo "== fused-8b rc=$? at $(el) s: $(grep -h RESULT "$G/fused-8b.md" | tr '\n' ' ')" | tee -a "$G/summary.md"
grep -h "DIFFERENT\|FAIL\|error\|UNEXPECTED" "$G/fused-8b.md" | head -8 | tee -a "$G/summary.md"
tail -2 "$G/fused-8b.err" | tee -a "$G/summary.md"

{
    echo
    for f in fused-135m fused-8b; do
        echo "### $f"
        # The comparison and timing tables (step times, kernels per step, auto's choice).
        grep -h "^| batch × q\|^| [0-9] × [0-9] |\|^| path | batch\|^| \(cublas\|gemv\|gemv+fused\|auto\) | [0-9] |\|verify K" "$G/$f.md" 2>/dev/null
        echo
    done
    grep -h "Gemv linears vs cuBLAS\|^| 1 | 4 \|^| 1 | 6 " "$G"/graphs-*.md 2>/dev/null
    grep -h "small step" "$G"/*.err 2>/dev/null | head -16
} > "$G/tables.md"
cat "$G/tables.md" >> "$G/summary.md"
cat "$G/tables.md"
cd "$OUT" && tar czf fused_norm.tgz fused_norm && rm -rf fused_norm
echo "wrote $OUT/fused_norm.tgz at $(el) s"
