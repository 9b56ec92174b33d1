#!/usr/bin/env bash
# Build ArcticInference 0.3.0's self-contained suffix-decoding core (csrc/suffix_decoding)
# into ~/.cache/wring/arctic, never into the repo. The PyPI sdist's own build needs torch;
# the core needs only a C++20 compiler, CMake and nanobind (from PyPI).
#
# Result: $ARCTIC_HOME/py/arctic_suffix/_C*.so plus cache.py, importable with
#   PYTHONPATH=$ARCTIC_HOME/py python3 -c 'from arctic_suffix.cache import SuffixDecodingCache'
set -euo pipefail

VERSION=0.3.0
SDIST_URL="https://files.pythonhosted.org/packages/63/c1/573fa2f00097cd9cc1167b31fd900b2482f58f3491867cebdd5516626533/arctic_inference-${VERSION}.tar.gz"
SDIST_SHA256=7f22e3e1b1071c6061c0d6951be17c0fb50b08d06d6e543144c8f52faba60a36
ARCTIC_HOME="${ARCTIC_HOME:-$HOME/.cache/wring/arctic}"
SRC="$ARCTIC_HOME/src"
VENV="$ARCTIC_HOME/venv"
PY_OUT="$ARCTIC_HOME/py/arctic_suffix"

mkdir -p "$SRC" "$PY_OUT"
tarball="$SRC/arctic_inference-${VERSION}.tar.gz"
if [[ ! -f "$tarball" ]]; then
  # The sdist is fetched by URL from PyPI's file host: `pip download` would try to build it
  # (and pull torch) just to read its metadata.
  curl -sSL -o "$tarball.part" "$SDIST_URL"
  mv "$tarball.part" "$tarball"
fi
echo "$SDIST_SHA256  $tarball" | sha256sum -c -
[[ -d "$SRC/arctic_inference-${VERSION}" ]] || tar -xzf "$tarball" -C "$SRC"
core="$SRC/arctic_inference-${VERSION}/csrc/suffix_decoding"

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "nanobind==2.9.2" numpy
fi

build="$ARCTIC_HOME/build"
cmake -S "$core" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$VENV/bin/python" >/dev/null
cmake --build "$build" -j 2 >/dev/null
cp "$build"/_C*.so "$PY_OUT/"
# cache.py imports `arctic_inference.suffix_decoding._C`; point it at our copy.
sed 's/from arctic_inference.suffix_decoding._C import/from arctic_suffix._C import/' \
  "$SRC/arctic_inference-${VERSION}/arctic_inference/suffix_decoding/cache.py" > "$PY_OUT/cache.py"
touch "$PY_OUT/__init__.py"
"$VENV/bin/python" -c "import sys; sys.path.insert(0, '$ARCTIC_HOME/py'); from arctic_suffix.cache import SuffixDecodingCache; SuffixDecodingCache(8)"
echo "built: $PY_OUT (python: $VENV/bin/python)"

# A native (no Python) replay harness around the same C++ core, for binding-free timings.
g++ -O3 -DNDEBUG -std=c++20 -I"$core" "$(dirname "$0")/native_replay.cc" "$core/suffix_tree.cc" \
  -o "$ARCTIC_HOME/native_replay"
echo "built: $ARCTIC_HOME/native_replay"
