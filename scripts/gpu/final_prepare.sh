#!/usr/bin/env bash
# Lays out what the session's two back-to-back device calls carry (run here, no GPU needed):
#   .dev/a: the first 45 MB of the default model, llama.cpp's source trimmed to the CPU and CUDA
#           backends and the two tools measured (tar.xz), gpu_check (debug build, xz), the
#           release `wring` (xz)                               -> scripts/gpu/final_a.sh
#   .dev/tp: what scripts/gpu/tp_check.sh needs besides the binaries (call A runs it with
#           the binaries of .dev/a): a vocab-only GGUF for the dummy shapes, the MBPP corpus
#   .dev/b: the rest of the model and its sha256, the corpora (ShareGPT cut to its first 1 MB:
#           the loader keeps every complete record), the golden file -> scripts/gpu/final_b.sh
# Each stays under the 64 MiB a call may carry (with the repository itself, ~5 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
nice -n 10 cargo build --release -p wring
nice -n 10 cargo build -p wring-runtime --example gpu_check
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
lcpp=${LLAMACPP_SDIST:?LLAMACPP_SDIST=path of llama_cpp_python-0.3.36.tar.gz (pip download --no-binary :all:)}
rm -rf .dev/a .dev/b .dev/tp && mkdir -p .dev/a .dev/b/corpora .dev/tp/corpora
head -c 45000000 "$model" > .dev/a/model.part00
tail -c +45000001 "$model" > .dev/b/model.part01
sha256sum "$model" | cut -c1-64 > .dev/b/model.sha256
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
strip -o "$tmp/wring" "$CARGO_TARGET_DIR/release/wring" && xz -T2 -6 -c "$tmp/wring" > .dev/a/wring.xz
strip -o "$tmp/gpu_check" "$CARGO_TARGET_DIR/debug/examples/gpu_check" && xz -T2 -6 -c "$tmp/gpu_check" > .dev/a/gpu_check.xz
bash scripts/gpu/llamacpp_src.sh "$lcpp" .dev/a/llamacpp-src.tar.xz
cp "$shared"/corpora/*.json* .dev/b/corpora/
cp "$shared/golden/smollm2_q41_f32_greedy.jsonl" .dev/b/
cp "$HOME/.cache/wring/corpora/HumanEval.jsonl.gz" .dev/b/corpora/
head -c 1000000 "$HOME/.cache/wring/corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
    > .dev/b/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
python3 scripts/gpu/vocab_gguf.py "$model" "$tmp/vocab.gguf" > /dev/null && xz -c "$tmp/vocab.gguf" > .dev/tp/vocab.gguf.xz
cp "$shared/corpora/mbpp_974.jsonl" .dev/tp/corpora/
du -sh .dev/a .dev/b .dev/tp
