# shellcheck shell=bash
# Sourced by the device scripts (stage.sh, check.sh, serve.sh, profile.sh, tp_check.sh), from
# the repository root on the device machine. What a device call carries was laid out here by
# scripts/gpu/prepare.sh: a first carry (default .dev/pa: the model's first part, the binaries)
# staged by stage.sh under /tmp, and a second (.dev/b: the model's other part, corpora, golden
# file) that check.sh and serve.sh join it with. /tmp outlives a call while the machine is warm.
#
# Everything lands under $OUT (the folder the device returns; it returns few files, so each
# script tars its folder into one file at the end).

OUT=${OUT:-/tmp/wring-out}
STAGE=/tmp/wring-stage
export WRING_HOME=/tmp/wring-home
B=${CARRY_B:-.dev/b}
mkdir -p "$OUT" "$STAGE" "$WRING_HOME/models"

# The driver's libcuda and nvrtc/cublas/nccl on LD_LIBRARY_PATH.
. scripts/gpu/cuda_env.sh

start_s=$(date +%s)
# Seconds since the script started.
elapsed() { echo $(( $(date +%s) - start_s )); }

device_line() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
}

# unpack SRC DEST: a binary from the carry (SRC or SRC.xz) to DEST, executable.
unpack() {
    if [ -f "$1.xz" ]; then xz -dc "$1.xz" > "$2"; elif [ -f "$1" ]; then cp "$1" "$2"; else return 1; fi
    chmod +x "$2"
}

# join_model: the default model under $WRING_HOME/models from the staged first part and
# $B/model.part01 (parts of its xz stream when $B/model.xz exists), sha256-checked; sets `model`.
join_model() {
    model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$model" ] && return 0
    [ -f "$STAGE/model.part00" ] || { echo "no staged model part: run stage.sh first (the machine must stay warm)"; return 1; }
    if [ -f "$B/model.xz" ]; then
        cat "$STAGE/model.part00" "$B/model.part01" | xz -dc > "$model" || return 1
    else
        cat "$STAGE/model.part00" "$B/model.part01" > "$model" || return 1
    fi
    echo "$(cat "$B/model.sha256")  $model" | sha256sum -c - || { rm -f "$model"; return 1; }
}

# wait_http URL [SECONDS]: until URL answers.
wait_http() {
    for _ in $(seq "${2:-120}"); do curl -sf "$1" > /dev/null 2>&1 && return 0; sleep 1; done
    return 1
}

# stop PID: TERM, then KILL after 2 s.
stop() { kill "$1" 2>/dev/null; sleep 2; kill -9 "$1" 2>/dev/null; true; }

# pack NAME: $OUT/NAME -> $OUT/NAME.tgz (KEEP=1 leaves the folder).
pack() {
    (cd "$OUT" && tar -czf "$1.tgz" "$1" && { [ "${KEEP:-0}" = 1 ] || rm -rf "$1"; })
    echo "wrote $OUT/$1.tgz at $(elapsed) s"
}

# gpu_check_run LIMIT TAG ARGS...: one `$GPU_CHECK ARGS` under a time limit, its output in
# $G/TAG.md and .err; prints and appends to $G/summary.md its RESULT line, any failure
# lines, and the tail of stderr when it failed.
gpu_check_run() {
    local limit=$1 tag=$2
    shift 2
    local t0 rc
    t0=$(date +%s)
    timeout "$limit" "$GPU_CHECK" "$@" > "$G/$tag.md" 2> "$G/$tag.err"
    rc=$?
    {
        echo "== $tag rc=$rc in $(( $(date +%s) - t0 )) s: $(grep -h RESULT "$G/$tag.md" | tr '\n' ' ')"
        grep -h "DIFFERENT\|FAIL\|error\|UNEXPECTED" "$G/$tag.md" | head -8
        [ $rc -ne 0 ] && tail -3 "$G/$tag.err"
    } | tee -a "$G/summary.md"
    return $rc
}

# llamacpp_build DIR [all]: the llama.cpp peer's llama-server and llama-batched-bench (CUDA,
# sm_90) from DIR/llamacpp-src.tar.xz, built under /tmp/lcpp in a detached session (it outlives
# the call) on all cores but the last 4, or on every core with `all`; /tmp/lcpp/build.rc holds
# "rc seconds" when done.
llamacpp_build() {
    mkdir -p /tmp/lcpp && tar -xJf "$1/llamacpp-src.tar.xz" -C /tmp/lcpp || return 1
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
    local n cpus jobs
    n=$(nproc)
    cpus=0-$((n - 5)) jobs=$((n - 4))
    [ "${2:-}" = all ] && cpus=0-$((n - 1)) jobs=$n
    BUILD_CPUS=$cpus BUILD_JOBS=$jobs setsid nohup bash /tmp/lcpp/build.sh > /dev/null 2>&1 < /dev/null &
}
