#!/usr/bin/env bash
# Regenerates everything under tests/data from scripts in this repository:
#   corpora/*          corpus fixtures written here (scripts/reference/fixtures.py)
#   gguf_tiny/*.gguf   the tiny models of hf_tiny/ as GGUF files (scripts/reference/gguf_tiny_models.py)
#   golden/*.jsonl     greedy outputs + top logits of an independent numpy float32 forward pass
#   traces/*.jsonl     a 24-request greedy trace from the same reference, and ArcticInference
#                      0.3.0's K=8 drafts on it (scripts/arctic/build.sh builds ArcticInference)
# Needs the default model (`wring pull`), Python 3, a C++20 compiler and CMake (for ArcticInference).
# Takes ~15 minutes on 2 cores. The committed files are what this wrote on 2026-12-01.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
model="${WRING_MODEL:-${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
venv="${REFERENCE_VENV:-$repo/target/reference-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r scripts/reference/requirements.txt
python3 scripts/reference/fixtures.py
"$venv/bin/python" scripts/reference/gguf_tiny_models.py
scripts/reference/gguf_vocab.sh llama-spm
"$venv/bin/python" scripts/reference/golden.py --model "$model" \
  --prompts tests/data/golden/prompts.jsonl --out tests/data/golden/smollm2_q41_f32_greedy.jsonl
"$venv/bin/python" scripts/reference/golden.py --trace --max-tokens 128 --top 2 --model "$model" \
  --prompts tests/data/traces/prompts.jsonl --out tests/data/traces/smollm2_f32_greedy_24.jsonl
scripts/arctic/build.sh
arctic_python="${ARCTIC_HOME:-$HOME/.cache/wring/arctic}/venv/bin/python"
"$arctic_python" scripts/arctic/replay.py --trace tests/data/traces/smollm2_f32_greedy_24.jsonl \
  --k 8 --orders corpus --steps-out tests/data/traces/arctic_steps_corpus_K8.jsonl > /dev/null
echo "tests/data regenerated"
