#!/usr/bin/env bash
# Call 1 of the serving benchmark on the device (see bench_prepare.sh): keeps the first model
# part under /tmp and starts the llama.cpp build (CUDA, sm_90) there in a detached session on
# all cores but the last 4, so it outlives this call; waits for it up to $WAIT_S seconds.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
STAGE=/tmp/wring-stage
mkdir -p "$STAGE" "$OUT" /tmp/lcpp
cp .dev/b1/model.part00 "$STAGE/"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"
nvcc --version | tail -2 | tee -a "$OUT/device.txt"
nproc | tee -a "$OUT/device.txt"
tar -xJf .dev/b1/llamacpp-src.tar.xz -C /tmp/lcpp
cat > /tmp/lcpp/build.sh <<'EOF'
cd /tmp/lcpp
start=$(date +%s)
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON > configure.log 2>&1 &&
taskset -c "$BUILD_CPUS" cmake --build build --target llama-server llama-batched-bench -j "$BUILD_JOBS" > build.log 2>&1
rc=$?
echo "$rc $(( $(date +%s) - start ))" > build.rc
EOF
# The build keeps to the first cores (all but 4) so that call 2 can measure on the last 4.
n=$(nproc)
export BUILD_CPUS=0-$((n - 5)) BUILD_JOBS=$((n - 4))
setsid nohup bash /tmp/lcpp/build.sh > /dev/null 2>&1 < /dev/null &
waited=0
while [ ! -f /tmp/lcpp/build.rc ] && [ $waited -lt "${WAIT_S:-20}" ]; do
    sleep 10; waited=$((waited + 10))
    [ $((waited % 60)) -eq 0 ] && echo "build: ${waited}s, $(grep -c 'Building' /tmp/lcpp/build.log 2>/dev/null) objects"
done
if [ -f /tmp/lcpp/build.rc ]; then
    echo "llama.cpp build rc / seconds: $(cat /tmp/lcpp/build.rc)" | tee -a "$OUT/device.txt"
    tail -5 /tmp/lcpp/configure.log; tail -20 /tmp/lcpp/build.log
    cp /tmp/lcpp/build.log /tmp/lcpp/configure.log "$OUT/" 2>/dev/null
else
    echo "llama.cpp build still running after ${waited}s"
fi
ls -la "$STAGE" /tmp/lcpp/build/bin 2>/dev/null
