#!/usr/bin/env bash
# Lays out what a device session carries (run here; no GPU needed). A call may carry 64 MiB
# beside the tracked files, and the default model is ~98 MB, so it travels as an xz stream cut
# in two: the first part with the binaries (carry $A to scripts/gpu/stage.sh, which keeps them
# under /tmp), the rest with the data (carry .dev/b to check.sh / serve.sh, the next call).
#
#   $A (default .dev/pa): model.part00 (the first SPLIT bytes of the model's xz stream; MODEL=0:
#        none), wring.xz (release build; WRING=0: none), gpu_check.xz (the check harness,
#        crates/gpu-check: `cargo build --release -p wring-gpu-check`; GPU_CHECK=0: none;
#        PROFILE=debug for a debug build, quicker to make, slower host work), the commit,
#        wring_old.xz / gpu_check_old.xz from OLD=DIR (a previous build's binaries, for A/B
#        runs in one call), llamacpp-src.tar.xz from LLAMACPP_SDIST=<llama-cpp-python sdist or
#        llama.cpp source dir> (the peer, built by stage.sh), and with TP=1 what tp_check.sh
#        needs besides the binaries: vocab.gguf.xz (the model's tokenizer, no tensors: dummy
#        weights of any shape take it) and corpora/mbpp_974.jsonl.
#   .dev/b: model.part01, model.xz (a marker: the parts are an xz stream), model.sha256, the
#        corpora (ShareGPT cut to SHAREGPT_BYTES, default 300 KB: its loader keeps every complete
#        record) and the golden greedy file.
#
#   BUILD=1 scripts/gpu/prepare.sh                      # build, then lay out .dev/pa and .dev/b
#   A=.dev/tp MODEL=0 TP=1 scripts/gpu/prepare.sh       # tensor parallelism: one carry, no model
#   A=.dev/k1 MODEL=0 WRING=0 scripts/gpu/prepare.sh    # gpu_check alone (dummy weights only)
#
# SPLIT (bytes of the xz stream in $A) defaults to what leaves .dev/b just under the limit.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${CARGO_TARGET_DIR:-$PWD/target}
A=${A:-.dev/pa} PROFILE=${PROFILE:-release}
MODEL=${MODEL:-1} WRING=${WRING:-1} GPU_CHECK=${GPU_CHECK:-1} TP=${TP:-0}
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
corpora=${WRING_CORPORA_CACHE:-$HOME/.cache/wring/corpora}
if [ "${BUILD:-0}" = 1 ]; then
    [ "$WRING" = 1 ] && nice -n 19 cargo build --release -p wring
    if [ "$GPU_CHECK" = 1 ]; then
        if [ "$PROFILE" = release ]; then
            nice -n 19 cargo build --release -p wring-gpu-check
        else
            nice -n 19 cargo build -p wring-gpu-check
        fi
    fi
fi
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
rm -rf "$A" && mkdir -p "$A"
pack_bin() { # BINARY NAME
    strip -o "$tmp/$2" "$1" && xz -T2 -6 -c "$tmp/$2" > "$A/$2.xz"
}
[ "$WRING" = 1 ] && pack_bin "$T/release/wring" wring
[ "$GPU_CHECK" = 1 ] && pack_bin "$T/$PROFILE/gpu_check" gpu_check
if [ -n "${OLD:-}" ]; then
    [ -f "$OLD/wring" ] && pack_bin "$OLD/wring" wring_old
    [ -f "$OLD/gpu_check" ] && pack_bin "$OLD/gpu_check" gpu_check_old
fi
[ -n "${LLAMACPP_SDIST:-}" ] && bash scripts/gpu/llamacpp_src.sh "$LLAMACPP_SDIST" "$A/llamacpp-src.tar.xz"
git rev-parse HEAD > "$A/commit"
if [ "$TP" = 1 ]; then
    mkdir -p "$A/corpora"
    python3 scripts/gpu/vocab_gguf.py "$model" "$tmp/vocab.gguf" > /dev/null && xz -c "$tmp/vocab.gguf" > "$A/vocab.gguf.xz"
    cp "$shared/corpora/mbpp_974.jsonl" "$A/corpora/"
fi
tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
size() { find "$@" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
if [ "$MODEL" = 1 ]; then
    rm -rf .dev/b && mkdir -p .dev/b/corpora
    cp "$shared"/corpora/*.json* .dev/b/corpora/
    cp "$corpora/HumanEval.jsonl.gz" .dev/b/corpora/
    head -c "${SHAREGPT_BYTES:-300000}" "$corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
        > .dev/b/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
    cp "$shared/golden/smollm2_q41_f32_greedy.jsonl" .dev/b/
    xz -T2 -6 -c "$model" > "$tmp/model.xz"
    # SPLIT: the model's first part as small as .dev/b allows, so $A keeps room for binaries.
    budget=$(( 64 * 1048576 - tracked - 1048576 ))
    total=$(stat -c %s "$tmp/model.xz")
    SPLIT=${SPLIT:-$(( total - (budget - $(size .dev/b)) ))}
    [ "$SPLIT" -lt 0 ] && SPLIT=0
    head -c "$SPLIT" "$tmp/model.xz" > "$A/model.part00"
    tail -c +"$((SPLIT + 1))" "$tmp/model.xz" > .dev/b/model.part01
    : > .dev/b/model.xz
    sha256sum "$model" | cut -c1-64 > .dev/b/model.sha256
fi
over=0
for d in "$A" .dev/b; do
    [ -d "$d" ] || continue
    mib=$(( ($(size "$d") + tracked) / 1048576 ))
    echo "$d: $mib MiB with the tracked files (64 at most)"
    [ "$mib" -lt 64 ] || over=1
done
if [ "$over" = 1 ]; then
    results=$(git ls-files -z results | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print int(s / 1048576)}')
    echo "over the limit: move results/ ($results MiB, data the device does not need) out of the checkout"
    echo "for the device calls, and set SPLIT by hand if the parts still do not fit"
fi
