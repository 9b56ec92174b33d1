#!/usr/bin/env bash
# Where a step's time goes, per kernel, on the device: `gpu_check profile` runs eager steps of
# one shape (dummy weights) between cuProfilerStart/Stop and Nsight Compute records them. For
# each SPEC (model:batch:q:ctx[:chunk], chunk: a prompt chunk of that many tokens beside the
# rows, GPU_CHECK_CHUNK), the eager step time without the profiler, then the per-kernel times
# (`--clock-control none`: the clocks stay as they are; scripts/gpu/tables.py ncu). With
# KERNEL=<regex>, instead Nsight Compute's occupancy, warp-state, scheduler, instruction, launch
# and memory sections of one launch of the kernels it matches.
#
#   DIR=.dev/k1 SPECS="dummy-8b:32:5:512 dummy:32:1:256:55" bash scripts/gpu/profile.sh
#   KERNEL=attention_mma SPECS="dummy:32:1:1024 dummy-8b:32:1:512" bash scripts/gpu/profile.sh
#
# gpu_check as in check.sh (DIR, else /tmp/gpu_check). Results: $OUT/$NAME.tgz (NAME default
# profile) holding the CSVs, the section reports and each summary.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
. scripts/gpu/lib.sh
NAME=${NAME:-profile}
G=$OUT/$NAME
mkdir -p "$G"
if [ -z "${GPU_CHECK:-}" ]; then
    GPU_CHECK=/tmp/gpu_check
    if [ -n "${DIR:-}" ]; then unpack "$DIR/gpu_check" $GPU_CHECK || { echo "no gpu_check in $DIR"; exit 1; }; fi
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}; $(device_line)" | tee "$G/summary.md"
for spec in ${SPECS:-dummy:1:1:256 dummy-8b:32:1:512 dummy:32:1:256 dummy-8b:1:1:512}; do
    IFS=: read -r model batch q ctx chunk <<<"$spec"
    export GPU_CHECK_CHUNK=${chunk:-0}
    tag="$model-b$batch-q$q${chunk:+-c$chunk}"
    t0=$(date +%s)
    if [ -n "${KERNEL:-}" ]; then
        timeout 150 "$NCU" --clock-control none --profile-from-start off -k "regex:$KERNEL" \
            --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
            --section WarpStateStats --section SchedulerStats --section InstructionStats \
            --section LaunchStats --section MemoryWorkloadAnalysis \
            "$GPU_CHECK" profile "$model" "$batch" "$q" "$ctx" > "$G/$tag-sections.txt" 2>&1
        echo "== $tag sections rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$G/summary.md"
        grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Memory Throughput|Compute \(SM\)|Executed Ipc A|Stall" \
            "$G/$tag-sections.txt" | head -30 | tee -a "$G/summary.md"
        continue
    fi
    timeout 120 "$GPU_CHECK" profile "$model" "$batch" "$q" "$ctx" > "$G/$tag-plain.txt" 2>&1
    echo "== $tag plain rc=$? $(tail -1 "$G/$tag-plain.txt")" | tee -a "$G/summary.md"
    timeout 180 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
        --csv --print-units base --log-file "$G/$tag-ncu.csv" \
        "$GPU_CHECK" profile "$model" "$batch" "$q" "$ctx" > "$G/$tag-ncu.out" 2>&1
    echo "== $tag ncu rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$G/summary.md"
    python3 scripts/gpu/tables.py ncu "$G/$tag-ncu.csv" > "$G/$tag-summary.md" 2>&1
    head -14 "$G/$tag-summary.md" | tee -a "$G/summary.md"
done
pack "$NAME"
