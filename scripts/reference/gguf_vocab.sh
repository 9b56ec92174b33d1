#!/usr/bin/env bash
# tests/data/gguf_vocab: llama.cpp's tokenizer test set for a vocabulary (the GGUF vocabulary,
# its `.inp` texts and the ids llama.cpp gives them in `.out`), from the llama.cpp sources in
# the llama-cpp-python sdist on PyPI. Usage: gguf_vocab.sh [NAME ...] (default llama-spm; any
# `ggml-vocab-NAME.gguf` of llama.cpp's models/ folder).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ $# -gt 0 ] || set -- llama-spm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The index may answer with a path relative to its files host.
url=$(curl -fsS https://pypi.org/pypi/llama-cpp-python/json | python3 -c "
import json, sys
url = [u['url'] for u in json.load(sys.stdin)['urls'] if u['packagetype'] == 'sdist'][0]
print(url if '://' in url else 'https://files.pythonhosted.org/' + url.lstrip('./'))")
curl -fsSL -o "$tmp/sdist.tgz" "$url"
tar xzf "$tmp/sdist.tgz" -C "$tmp" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
mkdir -p tests/data/gguf_vocab
for name in "$@"; do
    src=$(echo "$tmp"/*/vendor/llama.cpp/models/ggml-vocab-"$name".gguf)
    gzip -9 -n -c "$src" > "tests/data/gguf_vocab/$name.gguf.gz"
    cp "$src.inp" "tests/data/gguf_vocab/$name.inp"
    cp "$src.out" "tests/data/gguf_vocab/$name.out"
done
echo "from $(basename "$url"): $*"
