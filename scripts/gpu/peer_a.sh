#!/usr/bin/env bash
# First call of the peer pair (carry .dev/pc; laid out here by
# `A=.dev/pc SPLIT=42300000 GPU_CHECK=0 LLAMACPP_SDIST=… bash scripts/gpu/pair_prepare.sh`):
# stages the model's first part and /tmp/wring for peer_b.sh, and builds llama.cpp's CUDA
# llama-server and llama-batched-bench on every core (~5 min) under /tmp/lcpp.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
D=.dev/pc
mkdir -p /tmp/wring-stage /tmp/lcpp && cp "$D/model.part00" /tmp/wring-stage/
xz -dc "$D/wring.xz" > /tmp/wring && chmod +x /tmp/wring && : > /tmp/wring-flags
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
tar -xJf "$D/llamacpp-src.tar.xz" -C /tmp/lcpp
cd /tmp/lcpp && t0=$(date +%s)
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON > configure.log 2>&1 &&
cmake --build build --target llama-server llama-batched-bench -j "$(nproc)" > build.log 2>&1
echo "$? $(( $(date +%s) - t0 ))" | tee build.rc
tail -3 build.log
