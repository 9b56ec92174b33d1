#!/usr/bin/env bash
# Issue 14 in one device call (dummy weights, no model file needed):
#   1. every attention kernel vs a float64 host reference (`gpu_check attention`),
#   2. graph replay = eager, kernels vs the reference kernel, verify = greedy (`graphs`,
#      135M shape and llama-3.1-8b), CUDA vs CPU logits (135M shape),
#   3. graph step times per attention kernel vs the HBM roofline -> $OUT/steps.json and
#      $OUT/latency.json (`gpu_check steps`),
#   4. Nsight Compute per-kernel times of the 8B 32 x 5 verify step with each kernel.
# Here: cargo build -p wring-runtime --example gpu_check && mkdir -p .dev/v1 &&
#       strip -o .dev/v1/gpu_check target/debug/examples/gpu_check
# Device: scripts/gpu/verify_steps.sh   (carry .dev/v1). Results: $OUT/verify.tgz + tables.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT/log" "$OUT/ncu"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
bin=/tmp/gpu_check
cp .dev/v1/gpu_check $bin && chmod +x $bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/log/device.txt"
run() {
    local tag=$1; shift
    local start=$(date +%s)
    timeout "${LIMIT:-300}" "$bin" "$@" > "$OUT/log/$tag.md" 2> "$OUT/log/$tag.err"
    echo "== $tag rc=$? in $(( $(date +%s) - start )) s: $(grep -h RESULT "$OUT/log/$tag.md" | tr '\n' ' ')"
    tail -3 "$OUT/log/$tag.err"
}
run attention attention
run graphs-135m graphs dummy
run graphs-135m-gguf graphs dummy-gguf
run graphs-8b graphs dummy-8b
run cpu-135m cpu-compare dummy
run steps steps "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for spec in ${NCU_SPECS:-dummy-8b:32:5:512 dummy-8b:32:13:512 dummy-8b:1:1:512 dummy-8b:32:1:512 dummy:1:1:256}; do
    IFS=: read -r model batch q ctx <<<"$spec"
    tag="$model-b$batch-q$q"
    start=$(date +%s)
    timeout 200 "$NCU" --clock-control none --profile-from-start off \
        --metrics gpu__time_duration.sum --csv --print-units base --log-file "$OUT/ncu/$tag.csv" \
        $bin profile "$model" "$batch" "$q" "$ctx" > "$OUT/ncu/$tag.out" 2>&1
    echo "== ncu $tag rc=$? in $(( $(date +%s) - start )) s"
done
for f in "$OUT"/ncu/*.csv; do
    echo "### $(basename "$f" .csv)"; python3 scripts/gpu/ncu_summary.py "$f" 2>&1; echo
done > "$OUT/ncu/summary.md"
cd "$OUT" && tar -czf verify.tgz log ncu steps.json latency.json 2>/dev/null
echo; cat log/attention.md; echo; grep -h -A3 "vs per-head\|RESULT\|verify" log/graphs-*.md | head -60
echo; cat log/steps.md; echo; head -60 ncu/summary.md
