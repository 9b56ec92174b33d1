#!/usr/bin/env bash
# Lays out what the serving benchmark on the H200 carries (run here, no GPU needed):
#   .dev/b1: first 56 MB of the default model + llama.cpp source trimmed to the CPU and CUDA
#            backends, llama-server and llama-batched-bench (tar.xz, ~3 MB)
#   .dev/b2: the rest of the model, its sha256, the release `wring` binary (xz), the corpora
#            (ShareGPT cut to its first 2 MB: the loader stops at the first incomplete record),
#            the `gguf` wheel for transformers' GGUF loader, and scripts/gpu/hf_generate.py's deps.
# Then on the device, calls back to back (the machine keeps /tmp for 30 s after a call):
#   call 1: scripts/gpu/bench_stage.sh        (carry .dev/b1)  stages, starts the llama.cpp CUDA build
#   call 2: scripts/gpu/bench_serve.sh 8b     (carry .dev/b2)  dummy llama-3.1-8b: wring × 4 configs,
#                                                             on the 4 cores the build leaves free
#   call 3: scripts/gpu/bench_serve.sh small  (carry .dev/b2)  SmolLM2-135M: wring × 4 configs, llama.cpp, HF
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
# WRING_BIN: a wring binary built elsewhere (default: build the release one here).
bin=${WRING_BIN:-$CARGO_TARGET_DIR/release/wring}
[ -n "${WRING_BIN:-}" ] || nice -n 19 cargo build --release -p wring
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
lcpp=${WRING_LLAMACPP_DIR:-$HOME/.cache/wring/llama.cpp}/src
rm -rf .dev/b1 .dev/b2 && mkdir -p .dev/b1 .dev/b2/corpora
head -c 56000000 "$model" > .dev/b1/model.part00
tail -c +56000001 "$model" > .dev/b2/model.part01
sha256sum "$model" | cut -c1-64 > .dev/b2/model.sha256

# llama.cpp: keep the CPU and CUDA backends and the tools the benchmark runs.
bash scripts/gpu/llamacpp_src.sh "$lcpp" .dev/b1/llamacpp-src.tar.xz
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT

strip -o "$tmp/wring" "$bin"
xz -T2 -6 -c "$tmp/wring" > .dev/b2/wring.xz
cp "$shared"/corpora/*.json* .dev/b2/corpora/
cp "$HOME/.cache/wring/corpora/HumanEval.jsonl.gz" .dev/b2/corpora/
head -c 2000000 "$HOME/.cache/wring/corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
  > .dev/b2/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
python3 -m pip download -q --no-deps --only-binary=:all: -d .dev/b2 gguf==0.19.0
du -sh .dev/b1 .dev/b2
