#!/usr/bin/env bash
# Fused projections (WRING_CUDA_FUSED=on: one GEMM for q|k|v and one for gate|up) on the
# device, dummy weights only (no model file): logits versus the CPU backend and graph replay
# versus eager with fusion on, then step times (135M shape and llama-3.1-8b) with fusion on
# and off. Carries .dev/p1/gpu_check (built by scripts/gpu/prepare.sh or by
# `cargo build -p wring-runtime --example gpu_check` and strip).
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$OUT"
WRING_CUDA_FUSED=on bash scripts/gpu/check.sh cpu-compare:dummy graphs:dummy bench:dummy
mv "$OUT/bench-dummy.md" "$OUT/bench-dummy-fused.md"
mv "$OUT/bench-dummy.err" "$OUT/bench-dummy-fused.err"
WRING_CUDA_FUSED=off bash scripts/gpu/check.sh bench:dummy
cd "$OUT" && tar -czf logs.tar.gz ./*.err && rm -f ./*.err
