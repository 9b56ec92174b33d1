#!/usr/bin/env bash
# Why attention_mma runs far below the tensor-core and HBM ceilings (issue 14, session 11):
# Nsight Compute's occupancy, warp-state (stall reasons), scheduler, instruction and memory
# sections for its launches in eager steps of the 135M shape (prefill 1 x 1024 at context
# 1024, decode 32 x 1 and verify 32 x 5 at context 1024) and of dummy llama-3.1-8b (decode
# 32 x 1 at 512), plus the 8B decode step's per-kernel times. Carry DIR (default .dev/s11c)
# with gpu_check.xz (scripts/gpu/gpu_check_lib.sh gpu_check_prepare). Writes $OUT/ncu.tgz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/wring-out}
G=$OUT/ncu
mkdir -p "$G"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
xz -dc "${DIR:-.dev/s11c}/gpu_check.xz" > /tmp/gpu_check && chmod +x /tmp/gpu_check
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
start=$(date +%s)
for spec in "dummy 1 1024 1024" "dummy 32 1 1024" "dummy 32 5 1024" "dummy-8b 32 1 512"; do
    set -- $spec
    tag="$1-b$2-q$3"
    timeout 150 "$NCU" --clock-control none --profile-from-start off -k regex:attention_mma \
        --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section InstructionStats \
        --section LaunchStats --section MemoryWorkloadAnalysis \
        /tmp/gpu_check profile "$@" > "$G/$tag-sections.txt" 2>&1
    echo "== $tag rc=$? at $(( $(date +%s) - start )) s"
    grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Memory Throughput|Compute \(SM\)|Executed Ipc A|Stall" "$G/$tag-sections.txt" | head -30
done
timeout 150 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
    --csv --print-units base --log-file "$G/8b-b32-q1-ncu.csv" /tmp/gpu_check profile dummy-8b 32 1 512 > /dev/null 2>&1
python3 scripts/gpu/ncu_summary.py "$G/8b-b32-q1-ncu.csv" | tee "$G/8b-b32-q1-summary.md" | head -14
echo "done at $(( $(date +%s) - start )) s"
cd "$OUT" && tar czf ncu.tgz ncu && rm -rf ncu
