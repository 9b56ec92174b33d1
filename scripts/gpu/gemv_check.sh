#!/usr/bin/env bash
# The weight-streaming gemv path (kernels/gemv.cu; WRING_CUDA_SMALL_LINEAR_MAX_T=8) on the
# device, in under 240 s. `scripts/gpu/gemv_check.sh prepare` (here, no GPU): builds the
# gpu_check example and lays out .dev/g (stripped, xz). On the device (carry .dev/g):
#   1. gpu_check qgemm alone (also warms the kernel and JIT caches), then in parallel:
#      graphs (dummy, dummy-gguf, dummy-8b) and cpu-compare (dummy-gguf), all with the gemv
#      path on: replay = eager bitwise, verify = plain greedy, gemv vs cuBLAS, vs the CPU;
#   2. gpu_check gemv alone: every format and token bucket vs a host reference, and timed
#      against the path it replaces (gemv.json);
#   3. gpu_check steps alone with STEPS_VARIANTS=default,gemv on the small-step shapes
#      (steps.json, latency.json with kernels per step).
# Writes $OUT/gemv/*.md, *.json and summary.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ "${1:-}" = prepare ]; then
    set -e
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
    cargo build -p wring-runtime --example gpu_check
    rm -rf .dev/g && mkdir -p .dev/g
    strip -o .dev/g/gpu_check "$CARGO_TARGET_DIR/debug/examples/gpu_check"
    xz -T2 -6 -f .dev/g/gpu_check
    git rev-parse HEAD > .dev/g/commit
    du -sh .dev/g/*
    exit 0
fi
OUT=${OUT:-/tmp/wring-out}
G=$OUT/gemv
mkdir -p "$G"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
start=$(date +%s)
xz -dc .dev/g/gpu_check.xz > /tmp/gpu_check && chmod +x /tmp/gpu_check
echo "commit $(cat .dev/g/commit 2>/dev/null)" | tee "$G/summary.md"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$G/summary.md"

run() { # LIMIT TAG ARGS...: one gpu_check, its RESULT line and any failure lines
    local limit=$1 tag=$2
    shift 2
    local t0=$(date +%s)
    timeout "$limit" /tmp/gpu_check "$@" > "$G/$tag.md" 2> "$G/$tag.err"
    local rc=$?
    {
        echo "== $tag rc=$rc in $(( $(date +%s) - t0 )) s: $(grep -h RESULT "$G/$tag.md" | tr '\n' ' ')"
        grep -h "DIFFERENT\|FAIL\|error" "$G/$tag.md" | head -8
        [ $rc -ne 0 ] && tail -3 "$G/$tag.err"
    } | tee -a "$G/summary.md"
}

export WRING_CUDA_SMALL_LINEAR_MAX_T=8
run 45 qgemm qgemm
run 90 graphs-135m graphs dummy &
run 90 graphs-gguf graphs dummy-gguf &
run 90 cpu-135m cpu-compare dummy-gguf &
run 120 graphs-8b graphs dummy-8b &
wait
echo "checks done at $(( $(date +%s) - start )) s" | tee -a "$G/summary.md"
run 60 gemv gemv "$G"
unset WRING_CUDA_SMALL_LINEAR_MAX_T
STEPS_VARIANTS=default,gemv STEPS_SHAPES=${STEPS_SHAPES:-1x1,1x5,1x7,2x1,8x1} run 80 steps steps "$G"
echo "all done at $(( $(date +%s) - start )) s" | tee -a "$G/summary.md"
{
    echo
    grep -h "Gemv linears vs cuBLAS\|batch 1 × q\|^| 1 | \|^| 6 | " "$G"/graphs-*.md
    echo
    cat "$G/steps.md" 2>/dev/null
    echo
    cat "$G/gemv.md" 2>/dev/null
} >> "$G/summary.md"
cat "$G/summary.md"
