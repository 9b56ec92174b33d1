#!/usr/bin/env bash
# On the device, second call of a pair: joins the default model under $WRING_HOME/models from
# /tmp/wring-stage/model.part00 (staged by the first call) and .dev/b/model.part01 — parts of
# the raw file, or of its xz stream when .dev/b/model.xz exists — and checks its sha256.
# Sourced (final_serve.sh, peer_b.sh): sets `model`; returns 1 when the file cannot be made.
mkdir -p "$WRING_HOME/models"
model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then
    if [ -f .dev/b/model.xz ]; then
        cat /tmp/wring-stage/model.part00 .dev/b/model.part01 | xz -dc > "$model" || return 1
    else
        cat /tmp/wring-stage/model.part00 .dev/b/model.part01 > "$model" || return 1
    fi
    echo "$(cat .dev/b/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; return 1; }
fi
