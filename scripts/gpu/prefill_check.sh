#!/usr/bin/env bash
# Issue 14: the staged prefill attention kernel (kernels/attention/prefill.cu) on the device,
# first call of a pair. `scripts/gpu/prefill_check.sh prepare` (here, no GPU): builds the
# gpu_check example and a release wring into .dev/pf with the model's first half (hard link
# of .dev/a/model.part00). On the device (carry .dev/pf):
#   0. stages the model half and wring under /tmp for scripts/gpu/final_serve.sh (call 2);
#   1. in parallel: gpu_check attention (every kernel vs float64, prefill chunks mixed with
#      short sequences, deterministic, batch-invariant), graphs dummy (replay = eager,
#      verify = plain greedy, each kernel vs the per-head reference at q 1/5/13/40) and
#      cpu-compare dummy-gguf (vs the f32 CPU backend, prefill included);
#   2. graph-replay decode/verify step times, default vs `serial` (no K/V prefetch), both
#      models, roofline in the same call (gpu_check steps -> steps.json);
#   3. eager prefill step times, default vs `mma-serial` (session 9's attention),
#      interleaved: the 135M shape (and the 8B one with PROFILE_8B=1).
# Writes $OUT/prefill.tgz (*.md, *.err, summary.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
if [ "${1:-}" = prepare ]; then
    gpu_check_prepare .dev/pf || exit 1
    nice -n 19 cargo build --release -p wring || exit 1
    strip -o .dev/pf/wring target/release/wring && xz -T2 -6 -f .dev/pf/wring
    ln -f .dev/a/model.part00 .dev/pf/model.part00
    du -sh .dev/pf
    exit 0
fi
OUT=${OUT:-/tmp/wring-out}
G=$OUT/prefill
mkdir -p "$G"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
# DIR: what was carried (.dev/pf; `DIR=.dev/pfc CHECKS_ONLY=1`: a gpu_check alone, from
# `gpu_check_prepare .dev/pfc`, for the correctness checks without timings or staging).
DIR=${DIR:-.dev/pf}
if [ -f "$DIR/model.part00" ]; then
    mkdir -p /tmp/wring-stage && cp "$DIR/model.part00" /tmp/wring-stage/
    xz -dc "$DIR/wring.xz" > /tmp/wring && chmod +x /tmp/wring && : > /tmp/wring-flags
fi
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
xz -dc "$DIR/gpu_check.xz" > /tmp/gpu_check && chmod +x /tmp/gpu_check
echo "commit $(cat "$DIR/commit" 2>/dev/null)" | tee "$G/summary.md"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$G/summary.md"
GPU_CHECK=/tmp/gpu_check

# 1. Checks in parallel; CHECKS picks them (default: attention, graphs-135m, cpu-135m;
#    graphs-8b: the llama-3.1-8b shape, where the prefill kernel runs).
gpu_check_checks "${CHECKS:-attention graphs-135m cpu-135m}"
echo "checks done at $(el) s" | tee -a "$G/summary.md"
if [ "${CHECKS_ONLY:-0}" = 1 ]; then
    cd "$OUT" && tar czf prefill.tgz prefill && rm -rf prefill
    exit 0
fi

# 2. Graph-replay decode/verify step times, prefetching (default) vs serial loads, HBM
#    roofline measured in the same call (steps.json; both models).
STEPS_VARIANTS=default,serial STEPS_SHAPES=${STEPS_SHAPES:-1x1,8x1,32x1,32x5,32x7,32x9,32x13} \
    gpu_check_run 200 steps steps "$G"
grep -h "^| \(default\|serial\) |\|^### " "$G/steps.md" | tee -a "$G/summary.md"
# 3. Eager prefill steps, profiler off, GPU_CHECK_STEPS=4 (steps at ctx + 2q and ctx + 3q,
#    mean): default vs mma-serial (session 9's attention), each twice, interleaved.
echo "| model | batch × q, ctx | mma ms | mma-serial ms | mma ms | mma-serial ms |" | tee -a "$G/summary.md"
echo "|---|---|---:|---:|---:|---:|" | tee -a "$G/summary.md"
step_ms() { # attention-kernel model batch q ctx
    local k=$1; shift
    WRING_CUDA_ATTENTION=$k GPU_CHECK_STEPS=4 timeout 90 /tmp/gpu_check profile "$@" 2>> "$G/profile.err" \
        | grep -o "eager step [0-9.]*" | grep -o "[0-9.]*$"
}
profile() { # model batch q ctx
    local a b c d
    a=$(step_ms mma "$@"); b=$(step_ms mma-serial "$@"); c=$(step_ms mma "$@"); d=$(step_ms mma-serial "$@")
    echo "| $1 | $2 × $3, $4 | ${a:-?} | ${b:-?} | ${c:-?} | ${d:-?} |" | tee -a "$G/summary.md"
}
for shape in ${PROFILE_SHAPES:-"1 1024 1024" "2 700 700"}; do
    profile dummy $shape
done
if [ "${PROFILE_8B:-0}" = 1 ]; then
    export WRING_CUDA_MAX_TOKENS=4096
    profile dummy-8b 1 1024 1024
fi
echo "done at $(el) s" | tee -a "$G/summary.md"
cd "$OUT" && tar czf prefill.tgz prefill && rm -rf prefill
