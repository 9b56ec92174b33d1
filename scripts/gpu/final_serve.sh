#!/usr/bin/env bash
# Serving measurements on the H200 (issues 14, 15, 20), second call of a pair: the first
# call stages the model's first half and the binaries (final_stage.sh); this one carries
# .dev/b (second half, corpora). Every core free (no peer build running):
#   1. wring tune, concurrency 32, 128 prompts per corpus (steady state: finished streams
#      are replaced, so the slowest stream of a single wave does not set the run's length),
#      all seven corpora, no-spec and padded suffix K = 2/3/4/6/8;
#   2. wring tune, concurrency 1, 8 prompts: no-spec, K = 4, adaptive;
#   3. model vs host time per engine step (no-spec, K = 4; c = 1 and 32) from /metrics;
#   4. a json_schema-constrained step's cost (structured_cost.py);
#   5. each GPU weight format with and without K = 4 (issue 21);
#   6. fair steps on this machine's quiet CPU (issue 19 item 3; FAIR=0 skips).
# PARTS (default tune32,tune1,hostsplit,structured,quant,fair) picks them; NAME the folder
# and tarball under $OUT (serve_rerun.sh and host_phases.sh are such selections).
# Flags from /tmp/wring-flags (written by the first call) apply to every server here;
# WRING_BIN picks the binary (default /tmp/wring).
set -uo pipefail
start=$(date +%s)
# Optional parts (the quantized formats, fair steps) run only while the call has time left.
left() { echo $(( ${CALL_S:-420} - ($(date +%s) - start) )); }
NAME=${NAME:-serve}
OUT=${OUT:-/tmp/wring-out}; R=$OUT/$NAME; mkdir -p "$R"
PARTS=,${PARTS:-tune32,tune1,hostsplit,structured,quant,fair},
part() { [[ $PARTS == *",$1,"* ]]; }
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home CUDA_VISIBLE_DEVICES=0
. scripts/gpu/join_model.sh || exit 1
[ -f /tmp/wring-flags ] && . /tmp/wring-flags
env | grep WRING_CUDA | tee "$R/flags.txt"
W=${WRING_BIN:-/tmp/wring}; corp=$PWD/.dev/b/corpora
tune() { # concurrency prompts configs
    local dir=$R/tune-c$1 t0=$(date +%s) warm=$1
    [ "$warm" -gt 8 ] && warm=8
    $W tune --model "$model" --configs "$3" --corpus all --corpus-dir "$corp" --concurrency "$1" \
        --max-tokens 256 --num-prompts "$2" --runs 1 --warmup "$warm" --max-prompt-chars 6000 \
        --device "NVIDIA H200" --serve-arg=--device=cuda --startup-timeout-s 120 \
        --request-timeout-s 120 --no-progress --out "$dir" > "$dir.log" 2>&1
    echo "== tune c=$1 n=$2 rc=$? in $(( $(date +%s) - t0 )) s"
    grep "warm-up:" "$dir"/logs/*.log > "$dir/warm-up.txt" 2>/dev/null
    rm -rf "$dir/logs"
    sed -n '/^| corpus/,/^$/p;/^| configuration/,/^$/p' "$dir/report.md"
}
part tune32 && tune 32 ${C32_PROMPTS:-128} ${C32_CONFIGS:-nospec,suffix-k3,suffix-k4,suffix-k6,suffix-k8}
part tune1 && tune 1 8 ${C1_CONFIGS:-nospec,suffix-k4,adaptive}
part hostsplit && for spec in "nospec" "suffix-k4 --speculative suffix --k-policy fixed:4 --pad"; do
    set -- $spec; label=$1; shift
    $W serve --device cuda --port 8200 --kv-cache-mib 4096 "$@" > "$R/$label.serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8200/v1/models > /dev/null 2>&1 && break; sleep 1; done
    for n in 1 32; do
        before=$(curl -s http://127.0.0.1:8200/metrics)
        $W bench serve --base-url http://127.0.0.1:8200 --corpus mix --corpus-dir "$corp" --concurrency $n \
            --num-prompts $((n == 1 ? 8 : ${HOST_C32_PROMPTS:-128})) --runs 1 --warmup 0 --max-tokens 256 --max-prompt-chars 6000 \
            --device H200 --label "$label" --no-progress --result-json "$R/$label-c$n.json" > "$R/$label-c$n.log" 2>&1
        after=$(curl -s http://127.0.0.1:8200/metrics)
        echo "$after" > "$R/$label-c$n.metrics"
        python3 scripts/gpu/step_split.py "$label mix c=$n" "$before" "$after" "$R/$label-c$n.log"
    done
    kill $pid; sleep 2; kill -9 $pid 2>/dev/null
done | tee "$R/hostsplit.txt"
if part structured; then
    $W serve --device cuda --port 8201 --kv-cache-mib 4096 > "$R/structured.serve.log" 2>&1 &
    spid=$!
    for _ in $(seq 120); do curl -sf http://127.0.0.1:8201/v1/models > /dev/null 2>&1 && break; sleep 1; done
    timeout 150 python3 scripts/gpu/structured_cost.py http://127.0.0.1:8201 "$R/structured.json" 1 32 2>&1 | tee "$R/structured.txt"
    kill $spid; sleep 2; kill -9 $spid 2>/dev/null
fi
# Issue 21: each GPU weight format with and without padded suffix K = 4, c=32, mix and
# humaneval (quantised at load from the GGUF; the report names each format's gate verdict).
if ! part quant; then
    :
elif [ "$(left)" -gt 150 ]; then
    t0=$(date +%s)
    $W tune --model "$model" --configs nospec,suffix-k4 --weights ${QUANT_FORMATS:-bf16,fp8,int4,nvfp4} \
        --corpus mix,humaneval --corpus-dir "$corp" --concurrency 32 --max-tokens 256 --num-prompts 64 \
        --runs 1 --warmup 8 --max-prompt-chars 6000 --device "NVIDIA H200" --serve-arg=--device=cuda \
        --startup-timeout-s 120 --request-timeout-s 120 --no-progress --out "$R/tune-quant" > "$R/tune-quant.log" 2>&1
    echo "== tune quant formats rc=$? in $(( $(date +%s) - t0 )) s"
    rm -rf "$R/tune-quant/logs"
    sed -n '/^| corpus/,/^$/p;/^| configuration/,/^$/p' "$R/tune-quant/report.md"
else
    echo "== tune quant formats skipped ($(left) s left)"
fi
# Issue 19 item 3 on a quiet CPU (this machine's, the GPU idle): fair steps with the default
# CPU weights and step-time target, server on 2 pinned cores, client on 2 others; and the
# old fixed budget for comparison.
if part fair && [ "${FAIR:-1}" = 1 ] && [ "$(left)" -gt 70 ]; then
    for target in default 0; do
        [ "$(left)" -gt 40 ] || break
        extra=""; [ "$target" = 0 ] && extra="--step-time-target-ms 0"
        RAYON_NUM_THREADS=2 taskset -c 2,3 $W serve --device cpu --port 8011 $extra > "$R/fair-$target.serve.log" 2>&1 &
        fpid=$!
        for _ in $(seq 120); do curl -sf http://127.0.0.1:8011/v1/models > /dev/null 2>&1 && break; sleep 1; done
        taskset -c 6,7 timeout 150 python3 scripts/fair_steps.py --url http://127.0.0.1:8011 --streams 3 \
            --stream-tokens 300 --label "cpu-$target" 2>&1 | tee "$R/fair-$target.txt"
        kill $fpid; sleep 2; kill -9 $fpid 2>/dev/null
    done
fi
cd "$OUT" && tar -czf "$NAME.tgz" "$NAME" && rm -rf "$NAME"
