#!/usr/bin/env bash
# The defaults after the gemv run (carry .dev/g: gpu_check from scripts/gpu/gemv_check.sh
# prepare): int4/nvfp4 weights on the gemv kernels by default, fp8 routed to them when asked.
# Checks (qgemm; graph replay = eager and verify = greedy with int4 and fp8 weights; quant vs
# CPU for int4) and dummy-8B step times for default / gemv / off. One tarball back.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}; D=$OUT/defaults; mkdir -p "$D"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
xz -dc .dev/g/gpu_check.xz > /tmp/gpu_check && chmod +x /tmp/gpu_check
start=$(date +%s)
for s in int4 fp8; do
    QUANT_BENCH_SCHEMES=$s QUANT_BENCH_VARIANTS=default,gemv,off QUANT_BENCH_SHAPES=1x1,8x1,1x5 \
        timeout 200 /tmp/gpu_check quant-bench "$D/quant-$s.json" > "$D/quant-$s.md" 2> "$D/quant-$s.err" &
done
run() { local tag=$1; shift; timeout 90 env "$@" > "$D/$tag.md" 2> "$D/$tag.err"
    echo "== $tag rc=$?: $(grep -h RESULT "$D/$tag.md" | tr '\n' ' ')"; }
run qgemm /tmp/gpu_check qgemm
run graphs-int4 WRING_CUDA_WEIGHTS=int4 /tmp/gpu_check graphs dummy-gguf
run graphs-fp8-gemv WRING_CUDA_WEIGHTS=fp8 WRING_CUDA_SMALL_LINEAR_MAX_T=8 /tmp/gpu_check graphs dummy-gguf
run quant-int4 QUANT_SCHEMES=int4,nvfp4 /tmp/gpu_check quant dummy-gguf
grep -h "identical\|DIFFERENT\|token match\|^| [0-9]* | [0-9]* |" "$D"/graphs-*.md | head -30
grep -h "^| int4\|^| nvfp4" "$D/quant-int4.md"
wait
grep -h "^| " "$D"/quant-int4.md "$D"/quant-fp8.md | grep -v "^| weights\|^|---"
echo "done in $(( $(date +%s) - start )) s"
cd "$OUT" && tar czf defaults.tgz defaults && rm -rf defaults
