#!/usr/bin/env bash
# K/V written by the fused q/k/v split (session 5, WRING_CUDA_FUSED_KV_STORE): on the device,
# dummy weights only: bitwise equal to kv_store (inside `gpu_check graphs`), graph replay = eager,
# logits vs the CPU backend, then step times with the fused store on and off (135M shape and
# llama-3.1-8b). Carries .dev/k1/gpu_check (`cargo build -p wring-runtime --example gpu_check`,
# stripped). Everything lands in $OUT/all.tgz.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT" .dev/p1
cp .dev/k1/gpu_check .dev/p1/gpu_check
run() { # name store parts...
    local name=$1 store=$2; shift 2
    mkdir -p "$OUT/$name"
    OUT="$OUT/$name" WRING_CUDA_FUSED_KV_STORE=$store bash scripts/gpu/check.sh "$@" > "$OUT/$name/log.txt" 2>&1
    echo "$name: rc $?"
}
run on on graphs:dummy cpu-compare:dummy bench:dummy
run off off bench:dummy
run on8b on bench:dummy-8b graphs:dummy-8b
run off8b off bench:dummy-8b
cd "$OUT" && tar -czf all.tgz on off on8b off8b
grep -h "identical\|DIFFERENT\|rc=" ./*/log.txt | sort | uniq -c
