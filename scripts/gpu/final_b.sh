#!/usr/bin/env bash
# Device call B of the session's final pair (carry .dev/b; right after final_a.sh, whose /tmp
# it uses). On GPU 0 with the settings call A chose (/tmp/wring-flags), real SmolLM2-135M:
#   1. golden logits vs the f32 reference and verify = greedy on the real model (gpu_check),
#   2. `wring tune` through wring's HTTP server, all seven corpora, concurrency 32 and 1
#      (no-spec, suffix padded K = 4/6/8/12, adaptive), greedy, max_tokens 256,
#   3. llama.cpp's llama-server (built in call A) through the same client on mix and humaneval
#      at concurrency 1 and 32, and llama-batched-bench (its engine without HTTP).
# Results: $OUT/b.tgz and a summary printed last.
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/wring-out}
B=$OUT/b
mkdir -p "$B"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home CUDA_VISIBLE_DEVICES=0
mkdir -p "$WRING_HOME/models"
model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
cat /tmp/wring-stage/model.part00 .dev/b/model.part01 > "$model" || exit 1
echo "$(cat .dev/b/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
[ -f /tmp/wring-flags ] && . /tmp/wring-flags
env | grep WRING_CUDA | tee "$B/flags.txt"
W=/tmp/wring
corp=$PWD/.dev/b/corpora
# While llama.cpp still builds (call A started it), wring keeps to the last 4 cores.
PIN=""
if [ ! -f /tmp/lcpp/build.rc ]; then
    n=$(nproc); PIN="taskset -c $((n - 4))-$((n - 1))"
    echo "llama.cpp still building: wring on cores ${PIN#taskset -c }" | tee -a "$B/flags.txt"
fi

for spec in "golden golden $model .dev/b/smollm2_q41_f32_greedy.jsonl" "graphs-real graphs $model"; do
    set -- $spec; tag=$1; shift
    t0=$(date +%s)
    timeout 180 $PIN /tmp/gpu_check "$@" > "$B/$tag.md" 2> "$B/$tag.err"
    echo "== $tag rc=$? in $(( $(date +%s) - t0 )) s: $(grep -h RESULT "$B/$tag.md" | tr '\n' ' ')"
    grep -h "token match\|^| [0-9]* | [0-9]*/\|DIFFERENT" "$B/$tag.md" | head -6
done

tune() { # concurrency prompts configs
    local dir=$B/tune-c$1 t0=$(date +%s)
    local warm=$1; [ "$warm" -gt 8 ] && warm=8
    $PIN $W tune --model "$model" --configs "$3" --corpus all --corpus-dir "$corp" \
        --concurrency "$1" --max-tokens 256 --num-prompts "$2" --runs 1 --warmup "$warm" \
        --max-prompt-chars 6000 --device "NVIDIA H200" --serve-arg=--device=cuda \
        --startup-timeout-s 120 --request-timeout-s 120 --no-progress --out "$dir" > "$dir.log" 2>&1
    echo "== tune c=$1 rc=$? in $(( $(date +%s) - t0 )) s"
    [ -f "$dir/report.md" ] && sed -n '/Geometric mean/,/^$/p' "$dir/report.md" | head -14
}
tune 32 32 ${C32_CONFIGS:-nospec,suffix-k4,suffix-k8,suffix-k12,adaptive}
tune 1 8 ${C1_CONFIGS:-nospec,suffix-k8,adaptive}

# Host time per engine step around the forward (issue 15): no-spec and suffix K=8 on mix,
# concurrency 1 and 32, from the server's step counters.
hostsplit() { # label serve-flags...
    local label=$1; shift
    $PIN $W serve --device cuda --port 8200 --kv-cache-mib 4096 "$@" > "$B/$label.serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8200/v1/models > /dev/null 2>&1 && break; sleep 1; done
    for n in 1 32; do
        local before=$(curl -s http://127.0.0.1:8200/metrics)
        $PIN $W bench serve --base-url http://127.0.0.1:8200 --corpus mix --corpus-dir "$corp" \
            --concurrency $n --num-prompts $((n == 1 ? 8 : 32)) --runs 1 --warmup 0 --max-tokens 256 \
            --max-prompt-chars 6000 --device H200 --label "$label" --no-progress \
            --result-json "$B/$label-mix-c$n.json" > "$B/$label-mix-c$n.log" 2>&1
        local after=$(curl -s http://127.0.0.1:8200/metrics)
        python3 scripts/gpu/step_split.py "$label mix c=$n" "$before" "$after" "$B/$label-mix-c$n.log"
    done
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
}
hostsplit hostsplit-nospec | tee -a "$B/hostsplit.txt"

# What a grammar-constrained step costs on CUDA (issue 20): json_schema vs plain, c=1 and 32.
$PIN $W serve --device cuda --port 8201 --kv-cache-mib 4096 > "$B/structured.serve.log" 2>&1 &
spid=$!
for _ in $(seq 120); do curl -sf http://127.0.0.1:8201/v1/models > /dev/null 2>&1 && break; sleep 1; done
timeout 150 python3 scripts/gpu/structured_cost.py http://127.0.0.1:8201 "$B/structured.json" 1 32 2>&1 | tee "$B/structured.txt"
kill $spid; sleep 2; kill -9 $spid 2>/dev/null

# The peer, through the same client and prompts.
for _ in $(seq 60); do [ -f /tmp/lcpp/build.rc ] && break; sleep 5; done
echo "llama.cpp build: $(cat /tmp/lcpp/build.rc 2>/dev/null || echo 'not finished')"
L=/tmp/lcpp/build/bin
PORT=8100
if [ -x $L/llama-server ]; then
    $L/llama-server -m "$model" --host 127.0.0.1 --port $PORT -ngl 99 --parallel 32 -fa on \
        -c $((32 * 4096)) -b 2048 -ub 512 > "$B/llamacpp.serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:$PORT/health > /dev/null 2>&1 && break; sleep 1; done
    for c in mix humaneval; do
        for n in 1 32; do
            np=$((n == 1 ? 8 : 32)); w=$((n > 8 ? 8 : n))
            timeout 240 $W bench serve --base-url http://127.0.0.1:$PORT --corpus $c --corpus-dir "$corp" \
                --concurrency $n --num-prompts $np --runs 1 --warmup $w --max-tokens 256 \
                --max-prompt-chars 6000 --device H200 --label llamacpp --no-progress \
                --result-json "$B/llamacpp-$c-c$n.json" > "$B/llamacpp-$c-c$n.log" 2>&1
            echo "llama-server $c c=$n rc=$? $(python3 -c "import json;r=json.load(open('$B/llamacpp-$c-c$n.json'))['results'][0];print(round(r['output_throughput_median']), 'tok/s', r['completed'], 'ok', r['failed'], 'failed')" 2>/dev/null)"
        done
    done
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
    timeout 120 $L/llama-batched-bench -m "$model" -ngl 99 -fa on -c 20000 -b 2048 -ub 512 \
        -npp 128 -ntg 256 -npl 1,8,32 > "$B/llamacpp-batched-bench.log" 2>&1
    tail -6 "$B/llamacpp-batched-bench.log"
else
    echo "no llama-server: $(tail -3 /tmp/lcpp/build.log 2>/dev/null)"
fi
cp /tmp/lcpp/build.rc "$B/" 2>/dev/null

# Tensor parallelism through the HTTP server (70B shape, every GPU), with the time left.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && [ -f scripts/gpu/tp_check.sh ] && [ -d .dev/tp ]; then
    t0=$(date +%s)
    CUDA_VISIBLE_DEVICES= OUT=$B/tp TP_PARTS=serve BUDGET_S=$(( ${CALL_S:-570} - (t0 - start) )) \
        bash scripts/gpu/tp_check.sh > "$B/tp.log" 2>&1
    echo "== tp serve rc=$? in $(( $(date +%s) - t0 )) s"
    grep "^==" "$B/tp.log" | head
fi
cd "$OUT" && tar -czf b.tgz b
for c in 32 1; do echo "### c=$c"; sed -n '/Output tokens\/s/,/^$/p' "$B/tune-c$c/report.md" 2>/dev/null | head -14; done
