#!/usr/bin/env bash
# Makes the tiny transformers-made reference models under tests/data/hf_tiny
# (scripts/reference/hf_tiny_models.py): a venv with the torch and transformers the
# committed references were made with (under target/, or $REFERENCE_VENV), then the script.
# Arguments go to the script: `--only deepseek_v3` remakes one model and leaves the
# others' files as they are. Then writes the GGUF files of qwen3, qwen3_moe, mixtral and
# deepseek_v3 (scripts/reference/gguf_tiny_models.py). Runs on the CPU in a few minutes.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
venv="${REFERENCE_VENV:-$repo/target/hf-reference-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check torch==2.15.0 transformers==5.23.0 gguf==0.19.0
"$venv/bin/python" scripts/reference/hf_tiny_models.py "$@"
# Their GGUF files (tests/data/gguf_tiny) follow them.
"$venv/bin/python" scripts/reference/gguf_tiny_models.py
