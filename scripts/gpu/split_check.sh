#!/usr/bin/env bash
# Issue 14, session 11: attention_mma with one block per key split and split prefill chunks,
# against the previous build, in one call. First call of three:
#   `scripts/gpu/split_check.sh prepare` (here): .dev/s11 gets this build's gpu_check and wring
#   (xz) beside the previous build's (gpu_check_old.xz, wring_old.xz, put there by hand).
# On the device (carry .dev/s11):
#   0. stages wring and wring_old under /tmp for scripts/gpu/split_serve.sh (calls 2 and 3);
#   1. in parallel, this build: gpu_check attention (every kernel vs float64, deterministic,
#      batch-invariant, mma-only = mma-serial bitwise), graphs for the 135M shape and dummy
#      llama-3.1-8b (replay = eager bitwise, verify = plain greedy at every K), cpu-compare;
#   2. graph-replay step times (gpu_check steps, default variant), this build then the old one
#      (steps.json of each);
#   3. eager step times (GPU_CHECK_STEPS=4, profiler off), new / old / new / old, at context
#      1024: decode and verify at batch 32, and prefill 1 x 1024 and 2 x 700;
#   4. Nsight Compute per-kernel times of this build's 1 x 1024 prefill and 32 x 1 decode step.
# Writes $OUT/split.tgz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
if [ "${1:-}" = prepare ]; then
    gpu_check_prepare .dev/s11new || exit 1
    mv .dev/s11new/gpu_check.xz .dev/s11new/commit .dev/s11/ && rm -rf .dev/s11new
    nice -n 19 cargo build --release -p wring || exit 1
    strip -o .dev/s11/wring target/release/wring && xz -T2 -6 -f .dev/s11/wring
    du -sh .dev/s11/*
    exit 0
fi
OUT=${OUT:-/tmp/wring-out}
G=$OUT/split
mkdir -p "$G"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
D=.dev/s11
mkdir -p /tmp/wring-stage
xz -dc $D/wring.xz > /tmp/wring && chmod +x /tmp/wring && : > /tmp/wring-flags
xz -dc $D/wring_old.xz > /tmp/wring_old && chmod +x /tmp/wring_old
xz -dc $D/gpu_check.xz > /tmp/gpu_check && chmod +x /tmp/gpu_check
xz -dc $D/gpu_check_old.xz > /tmp/gpu_check_old && chmod +x /tmp/gpu_check_old
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
echo "commit $(cat $D/commit 2>/dev/null)" | tee "$G/summary.md"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$G/summary.md"
GPU_CHECK=/tmp/gpu_check

# 1. Checks in parallel (CHECKS picks them).
gpu_check_checks "${CHECKS:-attention graphs-135m graphs-8b cpu-135m}"
echo "checks done at $(el) s" | tee -a "$G/summary.md"
[ "${CHECKS_ONLY:-0}" = 1 ] && { cd "$OUT" && tar czf split.tgz split && rm -rf split; exit 0; }

# 2. Graph-replay step times, this build then the old one.
STEPS_VARIANTS=default STEPS_SHAPES=${STEPS_SHAPES:-1x1,8x1,32x1,32x5,32x7,32x9,32x13} \
    gpu_check_run 150 steps steps "$G/new"
GPU_CHECK=/tmp/gpu_check_old STEPS_VARIANTS=default STEPS_SHAPES=${STEPS_SHAPES:-1x1,8x1,32x1,32x5,32x7,32x9,32x13} \
    gpu_check_run 150 steps-old steps "$G/old"
echo "new:" | tee -a "$G/summary.md"
grep -h "^| default |\|^### " "$G/steps.md" | tee -a "$G/summary.md"
echo "old:" | tee -a "$G/summary.md"
grep -h "^| default |\|^### " "$G/steps-old.md" | tee -a "$G/summary.md"
echo "steps done at $(el) s" | tee -a "$G/summary.md"

# 3. Eager steps, new / old / new / old.
step_ms() { # binary model batch q ctx
    local b=$1; shift
    GPU_CHECK_STEPS=4 timeout 90 "$b" profile "$@" 2>> "$G/profile.err" \
        | grep -o "eager step [0-9.]*" | grep -o "[0-9.]*$"
}
echo "| model | batch × q, ctx | new ms | old ms | new ms | old ms |" | tee -a "$G/summary.md"
echo "|---|---|---:|---:|---:|---:|" | tee -a "$G/summary.md"
for shape in ${PROFILE_SHAPES:-"32 1 1024" "32 5 1024" "32 13 1024" "1 1024 1024" "2 700 700"}; do
    set -- $shape
    a=$(step_ms /tmp/gpu_check dummy "$@"); b=$(step_ms /tmp/gpu_check_old dummy "$@")
    c=$(step_ms /tmp/gpu_check dummy "$@"); d=$(step_ms /tmp/gpu_check_old dummy "$@")
    echo "| dummy | $1 × $2, $3 | ${a:-?} | ${b:-?} | ${c:-?} | ${d:-?} |" | tee -a "$G/summary.md"
done
echo "eager done at $(el) s" | tee -a "$G/summary.md"

# 4. Per-kernel times of this build (Nsight Compute), if time is left.
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "$(el)" -lt "${NCU_BEFORE_S:-420}" ]; then
    for spec in "1 1024 1024" "32 1 1024"; do
        set -- $spec
        tag="ncu-b$1-q$2"
        timeout 60 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
            --csv --print-units base --log-file "$G/$tag.csv" /tmp/gpu_check profile dummy "$@" > /dev/null 2>&1
        python3 scripts/gpu/ncu_summary.py "$G/$tag.csv" > "$G/$tag.md" 2>&1
        head -8 "$G/$tag.md" | tee -a "$G/summary.md"
    done
fi
echo "done at $(el) s" | tee -a "$G/summary.md"
cd "$OUT" && tar czf split.tgz split && rm -rf split
