#!/usr/bin/env bash
# Writes tests/data/gguf_tiny/*.gguf: the tiny transformers-made models of tests/data/hf_tiny
# as llama.cpp lays them out in GGUF (scripts/reference/gguf_tiny_models.py). Needs Python 3;
# installs numpy and gguf into the reference venv (target/reference-venv, or $REFERENCE_VENV).
# Takes a few seconds. The output is a pure function of tests/data/hf_tiny.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
venv="${REFERENCE_VENV:-$repo/target/reference-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r scripts/reference/requirements.txt
"$venv/bin/python" scripts/reference/gguf_tiny_models.py "$@"
