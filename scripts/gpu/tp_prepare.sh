#!/usr/bin/env bash
# Lays out what scripts/gpu/tp_check.sh carries to the device (run here, no GPU needed):
#   .dev/tp/wring.xz      the release `wring` binary, stripped (CUDA loads at run time)
#   .dev/tp/gpu_check.xz  the gpu_check example (its `tp` subcommand), stripped
#   .dev/tp/vocab.gguf.xz the default model's tokenizer and chat template, no tensors
#                         (dummy weights take their tokenizer from it: --model)
#   .dev/tp/corpora/      the MBPP corpus for `wring bench serve`
# Then one device call (kind nvidia-h200-x2; unchanged on -x4 / -x8, N from nvidia-smi):
#   run(command="bash scripts/gpu/tp_check.sh", carry=[".dev/tp"], kind="nvidia-h200-x2")
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
nice -n 19 cargo build --release -p wring -p wring-runtime --example gpu_check
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
rm -rf .dev/tp && mkdir -p .dev/tp/corpora
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
for b in wring examples/gpu_check; do
    strip -o "$tmp/$(basename $b)" "$CARGO_TARGET_DIR/release/$b"
    xz -T2 -6 -c "$tmp/$(basename $b)" > ".dev/tp/$(basename $b).xz"
done
python3 scripts/gpu/vocab_gguf.py "$model" "$tmp/vocab.gguf" && xz -c "$tmp/vocab.gguf" > .dev/tp/vocab.gguf.xz
cp "$shared/corpora/mbpp_974.jsonl" .dev/tp/corpora/
du -sh .dev/tp
