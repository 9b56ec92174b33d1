#!/usr/bin/env bash
# Lays out a pair of back-to-back device calls (run here after `cargo build --release -p wring`
# and, unless GPU_CHECK=0, `cargo build --release -p wring-runtime --example gpu_check`):
#   $A (default .dev/pa): the first SPLIT bytes of the default model's xz stream, release
#        `wring` (and `gpu_check`) stripped and xz'd, the commit, and with LLAMACPP_SDIST set
#        llama.cpp's trimmed source (scripts/gpu/llamacpp_src.sh)
#   .dev/b: the rest of the xz stream, the model's sha256, the corpora (ShareGPT cut to its
#        first 300 KB; the loader keeps every complete record)
# The model goes as xz (90 of 98 MB) so that each call stays under the 64 MiB it may carry
# beside the repository (~15 MB): SPLIT 43 MB with gpu_check, 42.3 MB with llama.cpp instead.
# Used by eager_pad.sh + eager_pad_serve.sh and peer_a.sh + peer_b.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${CARGO_TARGET_DIR:-$PWD/target}
A=${A:-.dev/pa} SPLIT=${SPLIT:-43000000}
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
rm -rf "$A" .dev/b && mkdir -p "$A" .dev/b/corpora
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
xz -T2 -6 -c "$model" > "$tmp/model.xz"
head -c "$SPLIT" "$tmp/model.xz" > "$A/model.part00"
tail -c +"$((SPLIT + 1))" "$tmp/model.xz" > .dev/b/model.part01
: > .dev/b/model.xz # tells final_serve.sh the parts are an xz stream
sha256sum "$model" | cut -c1-64 > .dev/b/model.sha256
strip -o "$tmp/wring" "$T/release/wring" && xz -T2 -6 -c "$tmp/wring" > "$A/wring.xz"
if [ "${GPU_CHECK:-1}" = 1 ]; then
    strip -o "$tmp/gpu_check" "$T/release/examples/gpu_check" && xz -T2 -6 -c "$tmp/gpu_check" > "$A/gpu_check.xz"
fi
[ -n "${LLAMACPP_SDIST:-}" ] && bash scripts/gpu/llamacpp_src.sh "$LLAMACPP_SDIST" "$A/llamacpp-src.tar.xz"
git rev-parse HEAD > "$A/commit"
cp "$shared"/corpora/*.json* .dev/b/corpora/
cp "$HOME/.cache/wring/corpora/HumanEval.jsonl.gz" .dev/b/corpora/
head -c 300000 "$HOME/.cache/wring/corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
    > .dev/b/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
for d in "$A" .dev/b; do
    find "$d" -type f -printf '%s\n' | awk -v d="$d" -v t="$tracked" \
        '{s += $1} END {printf "%s: %.1f MiB with the tracked files (64 at most)\n", d, (s + t) / 1048576}'
done
