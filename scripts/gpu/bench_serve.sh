#!/usr/bin/env bash
# Serving benchmark on the device (calls 2 and 3, see bench_prepare.sh), from the repo root:
#   scripts/gpu/bench_serve.sh small   # SmolLM2-135M: wring (nospec, suffix K=4, K=8, adaptive),
#                                      # llama.cpp llama-server (+ llama-batched-bench), transformers
#   scripts/gpu/bench_serve.sh 8b      # dummy llama-3.1-8b weights: wring, same four configurations
# Every server gets the same client (`wring bench serve`), the same prompts (corpus, seed,
# --max-prompt-chars) and max_tokens 256, greedy. Results: $OUT/<part>-summary.md and
# $OUT/<part>-results.tar.gz (raw JSON, server logs).
set -uo pipefail
part=${1:?small or 8b}
OUT=${OUT:-/tmp/wring-out}
STAGE=/tmp/wring-stage
D=/tmp/bench-$part
mkdir -p "$OUT" "$D"
export WRING_HOME=/tmp/wring-home
mkdir -p "$WRING_HOME/models"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"

model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then
    cat "$STAGE/model.part00" .dev/b2/model.part01 > "$model" || exit 1
    echo "$(cat .dev/b2/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
fi
W=/tmp/wring
[ -x $W ] || { xz -dc .dev/b2/wring.xz > $W && chmod +x $W; } || exit 1
corp=$PWD/.dev/b2/corpora
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$D/device.txt"
# While the llama.cpp build of call 1 still runs (on all cores but the last 4), the servers
# and the client keep to the last 4 cores.
PIN=""
if [ -f /tmp/lcpp/build.sh ] && [ ! -f /tmp/lcpp/build.rc ]; then
    PIN="taskset -c $(( $(nproc) - 4 ))-$(( $(nproc) - 1 ))"
    echo "llama.cpp build running: servers and client on cores ${PIN#taskset -c }" | tee -a "$D/device.txt"
fi
PORT=8100
URL=http://127.0.0.1:$PORT

wait_ready() { # pid path seconds
    local t=0
    while ! curl -sf "$URL$2" > /dev/null 2>&1; do
        kill -0 "$1" 2>/dev/null || { echo "server exited"; return 1; }
        sleep 1; t=$((t + 1))
        [ $t -ge "$3" ] && { echo "server not ready after $3 s"; return 1; }
    done
    echo "ready after ${t}s"
}

stop_server() {
    kill "$1" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done
    kill -9 "$1" 2>/dev/null
}

# bench LABEL [extra bench flags]: every corpus × concurrency of this part.
bench() {
    local label=$1; shift
    for c in $CORPORA; do
        for n in $CONCS; do
            local np=$((n * PER_SLOT)); [ $np -lt $MIN_PROMPTS ] && np=$MIN_PROMPTS
            local w=$n; [ $w -gt 8 ] && w=8
            local t0=$(date +%s.%N)
            timeout 240 $PIN $W bench serve --base-url $URL --corpus $c --corpus-dir "$corp" \
                --concurrency $n --num-prompts $np --runs 1 --warmup $w --max-tokens 256 \
                --max-prompt-chars 6000 --device H200 --label "$label" --no-progress $BENCH_EXTRA "$@" \
                --result-json "$D/$label-$c-c$n.json" > "$D/$label-$c-c$n.log" 2>&1
            local rc=$?
            echo "  $label $c c=$n prompts=$np rc=$rc $(python3 -c "import time;print(round(time.time()-$t0,1))")s $(python3 - "$D/$label-$c-c$n.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(f"{r['output_throughput_median']:.0f} tok/s, {r['completed']} ok {r['failed']} failed, "
      f"accept len {r.get('spec_mean_acceptance_length')}")
PY
)"
        done
    done
}

wring_config() { # label, serve flags...
    local label=$1; shift
    local t0=$(date +%s)
    $PIN $W serve --device cuda --port $PORT $SERVE_COMMON "$@" > "$D/$label.serve.log" 2>&1 &
    local pid=$!
    local ok=0
    if wait_ready $pid /v1/models 240; then
        echo "$label: started in $(( $(date +%s) - t0 )) s"
        bench "$label"
    else
        tail -20 "$D/$label.serve.log"
        ok=1
    fi
    stop_server $pid
    return $ok
}

if [ "$part" = small ]; then
    CORPORA="mix humaneval"; CONCS="1 8 32"; PER_SLOT=3; MIN_PROMPTS=8; BENCH_EXTRA=""
    SERVE_COMMON="--kv-cache-mib 4096"
    # The llama.cpp build from call 1 (detached): wait for it at most 5 minutes.
    for _ in $(seq 60); do [ -f /tmp/lcpp/build.rc ] || [ "${PEERS:-1}" = 0 ] && break; sleep 5; done
    echo "llama.cpp build: $(cat /tmp/lcpp/build.rc 2>/dev/null || echo 'not finished')"
else
    CORPORA="mix"; CONCS="1 8 32"; PER_SLOT=1; MIN_PROMPTS=4; BENCH_EXTRA="--ignore-eos"
    SERVE_COMMON="--load-format dummy --model-shape llama-3.1-8b --kv-cache-mib 16384 --max-model-len 4096"
fi

# CONFIGS: which wring configurations run (default all four); PEERS=0 skips llama.cpp and
# transformers. If the plain server does not start, the others would not either: skip them.
CONFIGS=${CONFIGS:-nospec k4 k8 adaptive}
if wring_config wring-nospec; then
    for c in $CONFIGS; do
        case $c in
            k4) wring_config wring-k4 --speculative suffix --k-policy fixed:4 ;;
            k8) wring_config wring-k8 --speculative suffix --k-policy fixed:8 ;;
            adaptive) wring_config wring-adaptive --speculative suffix --k-policy adaptive ;;
        esac
    done
fi

if [ "$part" = small ] && [ "${PEERS:-1}" = 1 ]; then
    L=/tmp/lcpp/build/bin
    if [ -x $L/llama-server ]; then
        $L/llama-server -m "$model" --host 127.0.0.1 --port $PORT -ngl 99 --parallel 32 -fa on \
            -c $((32 * 4096)) -b 2048 -ub 512 > "$D/llamacpp.serve.log" 2>&1 &
        pid=$!
        if wait_ready $pid /health 120; then bench llamacpp; else tail -20 "$D/llamacpp.serve.log"; fi
        stop_server $pid
        timeout 120 $L/llama-batched-bench -m "$model" -ngl 99 -fa on -c 20000 -b 2048 -ub 512 \
            -npp 128 -ntg 256 -npl 1,8,32 > "$D/llamacpp-batched-bench.log" 2>&1
        tail -8 "$D/llamacpp-batched-bench.log"
    else
        echo "no llama-server binary: $(tail -5 /tmp/lcpp/build.log 2>/dev/null)"
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev/b2/gguf-*.whl
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 scripts/gpu/hf_generate.py \
        --gguf "$model" --corpus-dir "$corp" --batches 1,8,32 --out "$D/hf.json" 2>&1 | tee "$D/hf.log" | tail -8
fi

python3 scripts/gpu/bench_summary.py "$D" "$part" > "$OUT/$part-summary.md"
cat "$OUT/$part-summary.md"
tar -czf "$OUT/$part-results.tar.gz" -C /tmp "bench-$part"
