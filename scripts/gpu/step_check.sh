#!/usr/bin/env bash
# One device call after a kernel change (dummy weights, no model file): graph replay = eager and
# verify = greedy (`gpu_check graphs`, 135M shape and llama-3.1-8b), logits vs the CPU backend,
# step times, then Nsight Compute's per-kernel times for $SPECS (scripts/gpu/profile_ncu.sh).
# Carries .dev/k1/gpu_check (`cargo build -p wring-runtime --example gpu_check`, stripped).
# Everything lands in $OUT/all.tgz; summarise the CSVs with scripts/gpu/ncu_summary.py.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT/check" "$OUT/ncu" .dev/p1
cp .dev/k1/gpu_check .dev/p1/gpu_check
OUT="$OUT/check" bash scripts/gpu/check.sh graphs:dummy cpu-compare:dummy bench:dummy \
    bench:dummy-8b graphs:dummy-8b > "$OUT/check/log.txt" 2>&1
echo "check: rc $?"
grep -h "RESULT\|DIFFERENT" "$OUT"/check/*.md
OUT="$OUT/ncu" SPECS="${SPECS:-dummy-8b:1:1:512 dummy-8b:32:1:512}" bash scripts/gpu/profile_ncu.sh
cd "$OUT" && tar -czf all.tgz check ncu/*.csv ncu/*.txt
