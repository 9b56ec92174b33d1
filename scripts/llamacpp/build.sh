#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (the peer server for benchmarks) and `llama-bench` (the peer for
# prefill/decode throughput, scripts/bench_prefill_cpu.sh) from the llama.cpp copy vendored
# in the llama-cpp-python sdist on PyPI (the only registry reachable from our machines).
#
#   scripts/llamacpp/build.sh                 # CPU build into ~/.cache/wring/llama.cpp
#   WRING_LLAMACPP_CUDA=1 scripts/llamacpp/build.sh   # adds -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#
# Env: WRING_LLAMACPP_DIR (install prefix), WRING_LLAMACPP_CUDA (1 = CUDA), CUDA_ARCHS (default 90),
#      JOBS (parallel build jobs, default: nproc). Prints the paths of llama-server and llama-bench
#      (both also linked into the prefix) at the end.
set -euo pipefail

version="0.3.36"
prefix="${WRING_LLAMACPP_DIR:-$HOME/.cache/wring/llama.cpp}"
jobs="${JOBS:-$(nproc)}"
src="$prefix/src"
build="$prefix/build${WRING_LLAMACPP_CUDA:+-cuda}"

if ! command -v cmake >/dev/null; then
  echo "cmake missing: installing it with apt-get" >&2
  apt-get update -qq && apt-get install -y -qq cmake >/dev/null
fi

if [[ ! -f "$src/CMakeLists.txt" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" "llama-cpp-python==$version"
  tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  vendored="$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)"
  mkdir -p "$src"
  # Only what the server build needs; everything else in the sdist is Python bindings.
  for part in CMakeLists.txt cmake ggml src include common tools vendor licenses LICENSE app scripts; do
    if [[ -e "$vendored/$part" ]]; then cp -r "$vendored/$part" "$src/"; fi
  done
fi

cmake_flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF)
if [[ -n "${WRING_LLAMACPP_CUDA:-}" ]]; then
  cmake_flags+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}")
fi

cmake -S "$src" -B "$build" "${cmake_flags[@]}" >"$prefix/cmake-configure.log"
cmake --build "$build" --target llama-server llama-bench -j "$jobs" >"$prefix/cmake-build.log"
for tool in llama-server llama-bench; do
  bin="$build/bin/$tool"
  test -x "$bin" || { echo "build finished but $bin is missing; see $prefix/cmake-build.log" >&2; exit 1; }
  ln -sf "$bin" "$prefix/$tool"
  echo "$prefix/$tool"
done
