#!/usr/bin/env bash
# Device call A of the session's final pair (carry .dev/a, laid out by final_prepare.sh; call B,
# final_b.sh, must follow within the machine's 30 s idle window). Stages the model's first
# part and the binaries under /tmp, starts llama.cpp's CUDA build detached on all cores but
# the last 4, and meanwhile, on GPU 0 and the last 4 cores: graph replay = eager and verify =
# greedy (135M shape with both RoPE layouts, llama-3.1-8b), CUDA vs CPU logits, step times per
# configuration (steps.json, latency.json; issue 14 and 15 formats); with two or more GPUs,
# scripts/gpu/tp_check.sh. Writes /tmp/wring-flags, the CUDA settings call B serves with:
# the fused small-step linears only if they beat cuBLAS on the 135M decode step here.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}
A=$OUT/a
mkdir -p "$A" /tmp/wring-stage /tmp/lcpp
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
start=$(date +%s)
cp .dev/a/model.part00 /tmp/wring-stage/
xz -dc .dev/a/wring.xz > /tmp/wring && chmod +x /tmp/wring
xz -dc .dev/a/gpu_check.xz > /tmp/gpu_check && chmod +x /tmp/gpu_check
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$A/device.txt"
nproc | tee -a "$A/device.txt"

# llama.cpp (the peer) builds while wring is measured: cores 0..n-5.
tar -xJf .dev/a/llamacpp-src.tar.xz -C /tmp/lcpp
cat > /tmp/lcpp/build.sh <<'EOF'
cd /tmp/lcpp
start=$(date +%s)
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON > configure.log 2>&1 &&
taskset -c "$BUILD_CPUS" cmake --build build --target llama-server llama-batched-bench -j "$BUILD_JOBS" > build.log 2>&1
echo "$? $(( $(date +%s) - start ))" > build.rc
EOF
n=$(nproc)
BUILD_CPUS=0-$((n - 5)) BUILD_JOBS=$((n - 4)) setsid nohup bash /tmp/lcpp/build.sh > /dev/null 2>&1 < /dev/null &
PIN="taskset -c $((n - 4))-$((n - 1))"

run() {
    local tag=$1; shift
    local t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=0 timeout "${LIMIT:-240}" $PIN /tmp/gpu_check "$@" > "$A/$tag.md" 2> "$A/$tag.err"
    echo "== $tag rc=$? in $(( $(date +%s) - t0 )) s: $(grep -h RESULT "$A/$tag.md" | tr '\n' ' ')"
    grep -h "DIFFERENT\|FAIL" "$A/$tag.md" | head -5
}
run graphs-135m graphs dummy
run graphs-gguf graphs dummy-gguf
run graphs-8b graphs dummy-8b
run cpu-135m cpu-compare dummy-gguf
STEPS_VARIANTS=${STEPS_VARIANTS:-default,small,before} LIMIT=300 run steps steps "$A"

# Serve with the small-step linears only where they measured faster (135M decode, batch 1).
python3 - "$A/steps.json" > /tmp/wring-flags <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
ms = {(r["variant"], r["model"], r["batch"], r["q"]): r["ms"] for r in rows}
d, s = ms.get(("default", "smollm2-135m", 1, 1)), ms.get(("small", "smollm2-135m", 1, 1))
if d and s and s < 0.98 * d:
    print("export WRING_CUDA_SMALL_LINEAR_MAX_T=32")
PY
echo "flags for call B: $(cat /tmp/wring-flags)"

# Tensor parallelism with what is left of the call (tp_check.sh skips parts past its budget).
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && [ -f scripts/gpu/tp_check.sh ] && [ -d .dev/tp ]; then
    t0=$(date +%s)
    OUT=$A/tp TP_PARTS=checks,steps BUDGET_S=$(( ${CALL_S:-560} - (t0 - start) )) \
        bash scripts/gpu/tp_check.sh > "$A/tp.log" 2>&1
    echo "== tp_check rc=$? in $(( $(date +%s) - t0 )) s"
    grep "^==" "$A/tp.log" | head -30
fi

# Wait for the peer's build while the call has time left (call B waits for the rest).
while [ ! -f /tmp/lcpp/build.rc ] && [ $(( $(date +%s) - start )) -lt "${WAIT_S:-500}" ]; do sleep 5; done
echo "llama.cpp build: $(cat /tmp/lcpp/build.rc 2>/dev/null || echo "still running after $(( $(date +%s) - start )) s")"
cd "$OUT" && tar -czf a.tgz a
echo; cat "$A/steps.md"
