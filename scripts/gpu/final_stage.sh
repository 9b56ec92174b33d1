#!/usr/bin/env bash
# First call of the session's closing pair (carry .dev/a, laid out by final_prepare.sh): stages
# the model's first half and the binaries under /tmp for final_serve.sh (the second call,
# within the machine's idle window), then runs the kernel checks and step timings of the
# gemv path (scripts/gpu/gemv_check.sh) and of the quantized formats
# (scripts/gpu/quant_speed.sh checks; the formats' step times come from gemv_check's
# quant-bench, batch 1/8/32 and verify 1x5/32x5) with the gpu_check of .dev/a. One tarball back.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
start=$(date +%s)
mkdir -p /tmp/wring-stage .dev/g .dev/q
cp .dev/a/model.part00 /tmp/wring-stage/
xz -dc .dev/a/wring.xz > /tmp/wring && chmod +x /tmp/wring
cp .dev/a/gpu_check.xz .dev/g/ && cp .dev/a/gpu_check.xz .dev/q/
git rev-parse HEAD 2>/dev/null | tee .dev/g/commit > .dev/q/commit
: > /tmp/wring-flags
T=/tmp/final-stage && rm -rf $T && mkdir -p $T/q
OUT=$T QUANT_BENCH_SHAPES=1x1,8x1,1x5,32x1,32x5 STEPS_SHAPES=1x1,1x5,2x1,8x1,32x1,32x5 \
    timeout ${GEMV_S:-260} bash scripts/gpu/gemv_check.sh > $T/gemv.log 2>&1
echo "== gemv_check rc=$? at $(( $(date +%s) - start )) s"
grep -v "^| 8b\|^| 135m" $T/gemv.log | head -90
OUT=$T/q BUDGET_S=${QUANT_S:-150} bash scripts/gpu/quant_speed.sh checks > $T/quant.log 2>&1
echo "== quant_speed rc=$? at $(( $(date +%s) - start )) s"
cat $T/quant.log | grep -v "^| " | head -60
cd $T && for f in gemv.tgz; do [ -f "$OUT/$f" ] && mv "$OUT/$f" .; done
tar -czf "$OUT/stage.tgz" -C $T . && echo "tarball $(du -h "$OUT/stage.tgz" | cut -f1)"
