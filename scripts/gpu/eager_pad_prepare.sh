#!/usr/bin/env bash
# Issue 14, session 15: lays out the two back-to-back device calls of the eager-padding A/B
# (run here after `cargo build --release -p wring` and
# `cargo build --release -p wring-runtime --example gpu_check`):
#   .dev/pa: the first 43 MB of the default model's xz stream, release `wring` and
#            `gpu_check` (stripped, xz), the commit  -> scripts/gpu/eager_pad.sh
#   .dev/b:  the rest of the xz stream, the model's sha256, the corpora (ShareGPT cut to its
#            first 1 MB; the loader keeps every complete record) -> scripts/gpu/eager_pad_serve.sh
# The model goes as xz (90 of 98 MB) so that each call stays under the 64 MiB it may carry
# beside the repository (~15 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${CARGO_TARGET_DIR:-$PWD/target}
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
rm -rf .dev/pa .dev/b && mkdir -p .dev/pa .dev/b/corpora
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
xz -T2 -6 -c "$model" > "$tmp/model.xz"
head -c 43000000 "$tmp/model.xz" > .dev/pa/model.part00
tail -c +43000001 "$tmp/model.xz" > .dev/b/model.part01
: > .dev/b/model.xz # tells final_serve.sh the parts are an xz stream
sha256sum "$model" | cut -c1-64 > .dev/b/model.sha256
strip -o "$tmp/wring" "$T/release/wring" && xz -T2 -6 -c "$tmp/wring" > .dev/pa/wring.xz
strip -o "$tmp/gpu_check" "$T/release/examples/gpu_check" && xz -T2 -6 -c "$tmp/gpu_check" > .dev/pa/gpu_check.xz
git rev-parse HEAD > .dev/pa/commit
cp "$shared"/corpora/*.json* .dev/b/corpora/
cp "$HOME/.cache/wring/corpora/HumanEval.jsonl.gz" .dev/b/corpora/
head -c 1000000 "$HOME/.cache/wring/corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
    > .dev/b/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
du -sh .dev/pa .dev/b
