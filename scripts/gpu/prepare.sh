#!/usr/bin/env bash
# Builds the GPU check binary here (no CUDA needed) and lays out what the device calls
# carry: .dev/p1 (first model half) and .dev/p2 (second half, checksum, binary, golden).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-cuda}
cargo build -p wring-runtime --example gpu_check
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
rm -rf .dev/p1 .dev/p2 && mkdir -p .dev/p1 .dev/p2
split -b 52M -d "$model" .dev/model.part
mv .dev/model.part00 .dev/p1/ && mv .dev/model.part01 .dev/p2/
sha256sum "$model" | cut -c1-64 > .dev/p2/model.sha256
cp "$shared/golden/smollm2_q41_f32_greedy.jsonl" .dev/p2/
strip -o .dev/p1/gpu_check "$CARGO_TARGET_DIR/debug/examples/gpu_check"
du -sh .dev/p1 .dev/p2
