#!/usr/bin/env bash
# Re-run of final_b.sh's serving part on a machine still warm from it (/tmp/wring,
# /tmp/wring-home's model, /tmp/lcpp's llama-server), every core free: wring tune at c=32
# with small K, and the host time per step for no-spec and suffix K=4 at c=1 and c=32.
set -uo pipefail
OUT=${OUT:-/tmp/wring-out}; R=$OUT/rerun; mkdir -p "$R"
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home CUDA_VISIBLE_DEVICES=0
model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ] && [ -f /tmp/wring-stage/model.part00 ] && [ -f .dev/b/model.part01 ]; then
    mkdir -p "$WRING_HOME/models"
    cat /tmp/wring-stage/model.part00 .dev/b/model.part01 > "$model"
    echo "$(cat .dev/b/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
fi
[ -f "$model" ] || { echo "no staged model (run final_a.sh's staging first)"; exit 1; }
W=/tmp/wring; corp=$PWD/.dev/c/corpora
[ -d "$corp" ] || corp=/tmp/wring-corpora
t0=$(date +%s)
$W tune --model "$model" --configs ${CONFIGS:-nospec,suffix-k2,suffix-k3,suffix-k4,suffix-k6} --corpus all \
    --corpus-dir "$corp" --concurrency 32 --max-tokens 256 --num-prompts 32 --runs 1 --warmup 8 \
    --max-prompt-chars 6000 --device "NVIDIA H200" --serve-arg=--device=cuda --startup-timeout-s 120 \
    --request-timeout-s 120 --no-progress --out "$R/tune-c32" > "$R/tune-c32.log" 2>&1
echo "== tune c=32 rc=$? in $(( $(date +%s) - t0 )) s"
sed -n '/^| corpus/,/^$/p;/Geometric mean/,/^$/p' "$R/tune-c32/report.md"
for spec in "nospec" "suffix-k4 --speculative suffix --k-policy fixed:4 --pad"; do
    set -- $spec; label=$1; shift
    $W serve --device cuda --port 8200 --kv-cache-mib 4096 "$@" > "$R/$label.serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8200/v1/models > /dev/null 2>&1 && break; sleep 1; done
    for n in 1 32; do
        before=$(curl -s http://127.0.0.1:8200/metrics)
        $W bench serve --base-url http://127.0.0.1:8200 --corpus mix --corpus-dir "$corp" --concurrency $n \
            --num-prompts $((n == 1 ? 8 : 32)) --runs 1 --warmup 0 --max-tokens 256 --max-prompt-chars 6000 \
            --device H200 --label "$label" --no-progress --result-json "$R/$label-c$n.json" > "$R/$label-c$n.log" 2>&1
        after=$(curl -s http://127.0.0.1:8200/metrics)
        python3 scripts/gpu/step_split.py "$label mix c=$n" "$before" "$after" "$R/$label-c$n.log"
    done
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
done | tee "$R/hostsplit.txt"
cd "$OUT" && tar -czf rerun.tgz rerun && rm -rf rerun
