#!/usr/bin/env bash
# Second call of the peer pair (carry .dev/b; right after peer_a.sh): wring's HTTP server
# (no-spec, then padded suffix K = 4) and llama.cpp's llama-server, one after the other,
# through the same client and prompts: mix and humaneval at concurrency 32 (128 prompts) and
# 1 (8 prompts), greedy, max_tokens 256; wring's servers write --step-log (one line per
# engine step); then llama-batched-bench (llama.cpp's engine without HTTP).
# Results: $OUT/peer.tgz, a table printed last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/wring-out}; R=$OUT/peer; mkdir -p "$R"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home CUDA_VISIBLE_DEVICES=0
. scripts/gpu/join_model.sh || exit 1
W=/tmp/wring corp=$PWD/.dev/b/corpora L=/tmp/lcpp/build/bin
up() { for _ in $(seq 120); do curl -sf "$1" > /dev/null 2>&1 && return 0; sleep 1; done; return 1; }
bench() { # label port
    for c in mix humaneval; do
        for n in 32 1; do
            np=$((n == 1 ? 8 : 128)); w=$((n > 8 ? 8 : n))
            timeout 200 $W bench serve --base-url "http://127.0.0.1:$2" --corpus $c --corpus-dir "$corp" \
                --concurrency $n --num-prompts $np --runs 1 --warmup $w --max-tokens 256 \
                --max-prompt-chars 6000 --device H200 --label "$1" --no-progress \
                --result-json "$R/$1-$c-c$n.json" > "$R/$1-$c-c$n.log" 2>&1
            echo "$1 $c c=$n rc=$? $(python3 -c "import json;r=json.load(open('$R/$1-$c-c$n.json'))['results'][0];print(round(r['output_throughput_median']), 'tok/s', r['completed'], 'ok', r['failed'], 'failed')" 2>/dev/null)"
        done
    done
}
for spec in "wring-nospec" "wring-k4 --speculative suffix --k-policy fixed:4 --pad"; do
    set -- $spec; label=$1; shift
    $W serve --device cuda --port 8200 --kv-cache-mib 4096 --step-log "$R/$label.steps.jsonl" "$@" \
        > "$R/$label.serve.log" 2>&1 &
    pid=$!
    up http://127.0.0.1:8200/v1/models && bench "$label" 8200
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
done | tee "$R/summary.txt"
echo "llama.cpp build: $(cat /tmp/lcpp/build.rc 2>/dev/null || echo none)" | tee -a "$R/summary.txt"
if [ -x $L/llama-server ]; then
    $L/llama-server -m "$model" --host 127.0.0.1 --port 8100 -ngl 99 --parallel 32 -fa on \
        -c $((32 * 4096)) -b 2048 -ub 512 > "$R/llamacpp.serve.log" 2>&1 &
    pid=$!
    up http://127.0.0.1:8100/health && bench llama-server 8100 | tee -a "$R/summary.txt"
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
    timeout 120 $L/llama-batched-bench -m "$model" -ngl 99 -fa on -c 20000 -b 2048 -ub 512 \
        -npp 128 -ntg 256 -npl 1,8,32 > "$R/llamacpp-batched-bench.log" 2>&1
    grep "^|" "$R/llamacpp-batched-bench.log" | tee -a "$R/summary.txt"
fi
python3 scripts/gpu/step_log_summary.py "$R"/wring-*.steps.jsonl | tee "$R/steps-summary.txt"
cd "$OUT" && tar -czf peer.tgz peer && rm -rf peer
