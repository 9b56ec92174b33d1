#!/usr/bin/env bash
# Issue 21 on the device: FP8 W8A8 with the fused activation path, checked, then every weight
# format timed on dummy llama-3.1-8b (quant.json in the issue's format).
#
#   scripts/gpu/quant_speed.sh prepare      # here: build the gpu_check example, lay out .dev/q
#   scripts/gpu/quant_speed.sh [all]        # device, carry .dev/q: checks, then quant-bench
#   scripts/gpu/quant_speed.sh checks       # device: the checks only
#   scripts/gpu/quant_speed.sh bench        # device: quant-bench only (QUANT_BENCH_SCHEMES=...)
#
# Checks (each under its own timeout, all inside BUDGET_S, default 235 s):
#   qgemm                one GEMM per scheme and token count vs a host reference
#   fp8-fused dummy(-gguf)  fused activation path vs quantise + GEMM + rescale, logits
#   graphs (fp8)         graph replay = eager with fp8 weights (WRING_CUDA_WEIGHTS=fp8)
#   quant dummy-gguf     fp8 on CUDA vs the same fp8 weights on the CPU backend
# Then quant-bench with what is left; quant.json is rewritten after each scheme, so a cut
# call keeps the schemes that finished (run `bench` with QUANT_BENCH_SCHEMES for the rest).
# Everything lands under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEV=.dev/q
. scripts/gpu/gpu_check_lib.sh
if [ "${1:-}" = prepare ]; then
    gpu_check_prepare $DEV
    exit $?
fi

mode=${1:-all}
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
start=$(date +%s)
BUDGET_S=${BUDGET_S:-235}
bin=/tmp/gpu_check_q21
xz -dc $DEV/gpu_check.xz > $bin && chmod +x $bin || { echo "no $DEV/gpu_check.xz: run prepare here and carry $DEV"; exit 1; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader; cat $DEV/commit; } | tee "$OUT/device.txt"

status=0
# run TAG CAP_S [ENV=V ...] -- ARGS: one gpu_check call, capped by CAP_S and the budget left.
run() {
    local tag=$1 cap=$2; shift 2
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local left=$(( BUDGET_S - ($(date +%s) - start) ))
    [ "$left" -lt "$cap" ] && cap=$left
    if [ "$cap" -lt 10 ]; then echo "== $tag skipped: budget spent"; status=1; return; fi
    local t0=$(date +%s)
    env "${envs[@]}" timeout "$cap" $bin "$@" > "$OUT/$tag.md" 2> "$OUT/$tag.err"
    local rc=$?
    echo "== $tag rc=$rc in $(( $(date +%s) - t0 )) s: $(grep -h RESULT "$OUT/$tag.md" | tr '\n' ' ')"
    grep -h "^| \|FAIL\|DIFFERENT" "$OUT/$tag.md" | head -24
    tail -3 "$OUT/$tag.err"
    if [ $rc -ne 0 ] || grep -q "RESULT.*FAIL" "$OUT/$tag.md"; then status=1; fi
}

if [ "$mode" = all ] || [ "$mode" = checks ]; then
    run qgemm 40 -- qgemm
    run fp8-fused-135m 40 -- fp8-fused dummy
    run fp8-fused-gguf 40 -- fp8-fused dummy-gguf
    run graphs-fp8 40 WRING_CUDA_WEIGHTS=fp8 -- graphs dummy
    run quant-fp8 60 QUANT_SCHEMES=fp8 -- quant dummy-gguf
fi
if [ "$mode" = all ] || [ "$mode" = bench ]; then
    run quant-bench 600 -- quant-bench "$OUT"
    [ -f "$OUT/quant.json" ] && python3 - "$OUT/quant.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
base = {(r["batch"], r["q"]): r["ms"] for r in rows if r["weights"] == "bf16"}
for r in rows:
    b = base.get((r["batch"], r["q"]))
    ratio = f"{b / r['ms']:.2f}x vs bf16" if b else ""
    print(f'{r["weights"]:6} {r["batch"]:3} x {r["q"]}: {r["ms"]:7.3f} ms (roofline {r["roofline_ms"]:.3f}) {ratio}')
PY
fi
echo "total $(( $(date +%s) - start )) s, status $status"
exit $status
