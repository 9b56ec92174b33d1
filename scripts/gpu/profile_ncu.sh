#!/usr/bin/env bash
# Where a step's time goes, per kernel: `gpu_check profile` runs three eager steps of one
# shape (dummy weights) between cuProfilerStart/Stop, and Nsight Compute records each kernel's
# duration (`--clock-control none`: the clocks stay as they are). Also the eager step time
# without the profiler. Carries .dev/k1/gpu_check. Results in $OUT/all.tgz; summarise here
# with scripts/gpu/ncu_summary.py.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
bin=/tmp/gpu_check
cp .dev/k1/gpu_check $bin && chmod +x $bin
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
for spec in ${SPECS:-"dummy:1:1:256" "dummy-8b:32:1:512" "dummy:32:1:256" "dummy-8b:1:1:512"}; do
    IFS=: read -r model batch q ctx <<<"$spec"
    tag="$model-b$batch-q$q"
    timeout 120 $bin profile "$model" "$batch" "$q" "$ctx" > "$OUT/$tag-plain.txt" 2>&1
    echo "$tag plain rc=$? $(tail -1 "$OUT/$tag-plain.txt")"
    start=$(date +%s)
    timeout 180 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
        --csv --print-units base --log-file "$OUT/$tag-ncu.csv" \
        $bin profile "$model" "$batch" "$q" "$ctx" > "$OUT/$tag-ncu.out" 2>&1
    echo "$tag ncu rc=$? in $(( $(date +%s) - start )) s, $(grep -c gpu__time_duration "$OUT/$tag-ncu.csv" 2>/dev/null) kernel rows"
done
cd "$OUT" && tar -czf all.tgz ./*.txt ./*.csv ./*.out 2>/dev/null; true
