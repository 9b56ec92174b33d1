#!/usr/bin/env bash
# Issue 14, session 17, second call of a pair (carry .dev/b; the first staged the model's first
# part and /tmp/wring: scripts/gpu/stage.sh .dev/pa): where chunk graphs' serving time goes.
# For chunk graphs on (1024) and off, one server (padded suffix K = 4, --step-log) serves mix
# at concurrency 32 twice (128 prompts each): the first run meets and captures the graph keys,
# the second mostly replays them. Then scripts/gpu/step_log_summary.py on each server's log:
# steps by how they ran (eager, capture, replay) and with or without prompt tokens.
# Results: $OUT/chunk-steplog.tgz and the table printed last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/wring-out}; R=$OUT/chunk-steplog; mkdir -p "$R"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home CUDA_VISIBLE_DEVICES=0
. scripts/gpu/join_model.sh || exit 1
W=${WRING_BIN:-/tmp/wring} corp=$PWD/.dev/b/corpora
for arm in "on 1024" "off off"; do
    set -- $arm; label=chunk-$1
    WRING_CUDA_CHUNK_GRAPHS=$2 $W serve --device cuda --port 8200 --kv-cache-mib 4096 \
        --speculative suffix --k-policy fixed:4 --pad --step-log "$R/$label.steps.jsonl" \
        > "$R/$label.serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8200/v1/models > /dev/null 2>&1 && break; sleep 1; done
    for run in 1 2; do
        timeout 120 $W bench serve --base-url http://127.0.0.1:8200 --corpus mix --corpus-dir "$corp" \
            --concurrency 32 --num-prompts 128 --runs 1 --warmup 0 --max-tokens 256 \
            --max-prompt-chars 6000 --device H200 --label "$label-run$run" --no-progress \
            --result-json "$R/$label-run$run.json" > "$R/$label-run$run.log" 2>&1
        echo "$label run $run rc=$? $(python3 -c "import json;r=json.load(open('$R/$label-run$run.json'))['results'][0];print(round(r['output_throughput_median']), 'tok/s', r['completed'], 'ok', r['failed'], 'failed')" 2>/dev/null)"
    done
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
done | tee "$R/summary.txt"
# Each run's own steps: the log split at its longest pause between two steps.
for label in chunk-on chunk-off; do
    python3 - "$R/$label" <<'PY'
import json, sys
base = sys.argv[1]
lines = [l for l in open(base + ".steps.jsonl") if l.strip()]
t = [json.loads(l)["t_ms"] for l in lines]
cut = max(range(1, len(t)), key=lambda i: t[i] - t[i - 1]) if len(t) > 1 else len(t)
open(base + "-run1.steps.jsonl", "w").writelines(lines[:cut])
open(base + "-run2.steps.jsonl", "w").writelines(lines[cut:])
PY
done
python3 scripts/gpu/step_log_summary.py "$R"/chunk-*-run?.steps.jsonl | tee "$R/steps-summary.txt"
rm -f "$R"/chunk-on.steps.jsonl "$R"/chunk-off.steps.jsonl
cd "$OUT" && tar -czf chunk-steplog.tgz chunk-steplog && rm -rf chunk-steplog
