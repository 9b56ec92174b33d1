#!/usr/bin/env bash
# Where a step's time goes, per kernel: `gpu_check profile` runs three eager steps of one
# shape (dummy weights) between cuProfilerStart/Stop, and Nsight Compute records each kernel's
# duration (`--clock-control none`: the clocks stay as they are). Also the eager step time
# without the profiler. Carries DIR (default .dev/k1) holding gpu_check, or gpu_check.xz from
# `gpu_check_prepare DIR` (scripts/gpu/gpu_check_lib.sh). SPECS: model:batch:q:ctx[:chunk] ...
# (chunk: each step also carries a prompt chunk of that many tokens, GPU_CHECK_CHUNK).
# Results in $OUT/all.tgz, with each CSV's per-kernel summary (scripts/gpu/ncu_summary.py).
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
bin=/tmp/gpu_check
DIR=${DIR:-.dev/k1}
if [ -f "$DIR/gpu_check.xz" ]; then xz -dc "$DIR/gpu_check.xz" > $bin; else cp "$DIR/gpu_check" $bin; fi
chmod +x $bin
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
for spec in ${SPECS:-"dummy:1:1:256" "dummy-8b:32:1:512" "dummy:32:1:256" "dummy-8b:1:1:512"}; do
    IFS=: read -r model batch q ctx chunk <<<"$spec"
    export GPU_CHECK_CHUNK=${chunk:-0}
    tag="$model-b$batch-q$q${chunk:+-c$chunk}"
    timeout 120 $bin profile "$model" "$batch" "$q" "$ctx" > "$OUT/$tag-plain.txt" 2>&1
    echo "$tag plain rc=$? $(tail -1 "$OUT/$tag-plain.txt")"
    start=$(date +%s)
    timeout 180 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
        --csv --print-units base --log-file "$OUT/$tag-ncu.csv" \
        $bin profile "$model" "$batch" "$q" "$ctx" > "$OUT/$tag-ncu.out" 2>&1
    echo "$tag ncu rc=$? in $(( $(date +%s) - start )) s, $(grep -c gpu__time_duration "$OUT/$tag-ncu.csv" 2>/dev/null) kernel rows"
    python3 "$(dirname "${BASH_SOURCE[0]}")/ncu_summary.py" "$OUT/$tag-ncu.csv" > "$OUT/$tag-summary.md" 2>&1
    head -14 "$OUT/$tag-summary.md"
done
cd "$OUT" && tar -czf all.tgz ./*.txt ./*.csv ./*.out ./*.md 2>/dev/null; true
