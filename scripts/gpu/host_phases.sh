#!/usr/bin/env bash
# Where a step's host time goes on the H200 (issues 14 and 15): no-spec and padded suffix K=4,
# mix, c=1 (8 prompts) and c=32 (128 prompts), with the engine's per-phase host counters
# (draft, schedule, verify_emit, end) and admission/finish time outside steps. Second call of
# a pair (the first stages the model half and /tmp/wring: final_stage.sh or the staging lines
# of final_a.sh); carry .dev/b.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}; R=$OUT/phases; mkdir -p "$R"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home CUDA_VISIBLE_DEVICES=0
model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$WRING_HOME/models"
if [ ! -f "$model" ]; then
    cat /tmp/wring-stage/model.part00 .dev/b/model.part01 > "$model" || exit 1
    echo "$(cat .dev/b/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
fi
W=/tmp/wring; corp=$PWD/.dev/b/corpora
for spec in "nospec" "suffix-k4 --speculative suffix --k-policy fixed:4 --pad"; do
    set -- $spec; label=$1; shift
    $W serve --device cuda --port 8200 --kv-cache-mib 4096 "$@" > "$R/$label.serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8200/v1/models > /dev/null 2>&1 && break; sleep 1; done
    for n in 1 32; do
        before=$(curl -s http://127.0.0.1:8200/metrics)
        $W bench serve --base-url http://127.0.0.1:8200 --corpus mix --corpus-dir "$corp" --concurrency $n \
            --num-prompts $((n == 1 ? 8 : 128)) --runs 1 --warmup 0 --max-tokens 256 --max-prompt-chars 6000 \
            --device H200 --label "$label" --no-progress --result-json "$R/$label-c$n.json" > "$R/$label-c$n.log" 2>&1
        after=$(curl -s http://127.0.0.1:8200/metrics)
        echo "$after" > "$R/$label-c$n.metrics"
        python3 scripts/gpu/step_split.py "$label mix c=$n" "$before" "$after" "$R/$label-c$n.log"
    done
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
done | tee "$R/phases.txt"
cd "$OUT" && tar -czf phases.tgz phases && rm -rf phases
