#!/usr/bin/env bash
# Serving on the device through wring's HTTP server (and the llama.cpp peer's), from the
# repository root; the call after stage.sh (carry .dev/b: the model's other part, corpora).
# Each ARM is NAME=ASSIGNMENTS: environment assignments separated by spaces (none for the
# defaults; WRING_BIN=/tmp/wring_old picks the previous build stage.sh kept), so one call
# serves A against B with one binary or two:
#
#   bash scripts/gpu/serve.sh base= lt=WRING_CUDA_GEMM_LT=on            # tune32 then tune1 per arm
#   PARTS=hostsplit bash scripts/gpu/serve.sh new= old=WRING_BIN=/tmp/wring_old
#   ROUNDS=2 PARTS=tune32 bash scripts/gpu/serve.sh "old=WRING_CUDA_ATTENTION=mma-serial WRING_CUDA_PDL=off" new=
#   PARTS=peer bash scripts/gpu/serve.sh                                # wring vs llama-server
#
# PARTS (default tune32,tune1), each run for every round (ROUNDS, default 1) and arm in turn:
#   tune<C>     `wring tune` at concurrency C over all seven corpora, max_tokens 256, greedy,
#               prompts ≤ 6,000 characters; C<C>_PROMPTS prompts a corpus (default 128, 8 at
#               c=1), C<C>_CONFIGS (default nospec,suffix-k4,suffix-k6,suffix-k8; nospec,suffix-k4
#               at c=1); WEIGHTS=fp8|int4|nvfp4 serves quantised weights
#   hostsplit   model vs host time per engine step from /metrics (no-spec and padded K=4, mix,
#               c=1: 8 prompts and c=32: HOST_C32_PROMPTS, default 128)
#   steplog     one server (padded K=4, --step-log) serves mix at c=32 twice; where the step
#               time went, by how each step ran (scripts/gpu/tables.py steplog)
#   structured  what json_schema and forced tool calls cost against plain requests
#               (scripts/gpu/structured_cost.py); DUMMY=<shape> VOCAB=<gguf> serves dummy
#               weights instead of the real model, STRUCT_SPEC=suffix speculates
#   quant       each GPU weight format with and without padded K=4 (QUANT_FORMATS), c=32
#   fair        fair steps on this machine's CPU (scripts/fair_steps.py), default target and 0
#   peer        wring (no-spec, then padded K=4, with step logs) and llama.cpp's llama-server
#               (built by stage.sh) through the same client: mix and humaneval at c=32 (128
#               prompts) and c=1 (8); then llama-batched-bench, llama.cpp without HTTP
# Results: $OUT/<arm>[-<round>].tgz per arm and round (<arm> is "serve" without arms), and the
# summary rows printed. Parts start only while the call has time left (CALL_S, default 560).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
. scripts/gpu/lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
DEVICE=${DEVICE:-cuda} # cpu: the same runs on the CPU backend (a quick try of this script)
# DUMMY=<shape> VOCAB=<tokenizer gguf>: the structured part serves dummy weights of that shape
# (a grammar binds every token of random weights too), no model parts needed.
if [ -n "${DUMMY:-}" ]; then
    MODEL_ARGS=(--load-format dummy --model-shape "$DUMMY" --model "${VOCAB:?DUMMY needs VOCAB}")
else
    join_model || exit 1
    MODEL_ARGS=()
fi
corp=$PWD/$B/corpora
GPU_NAME=$(device_line 2>/dev/null | cut -d, -f1)
GPU_NAME=${GPU_NAME:-$DEVICE}
CALL_S=${CALL_S:-560}
left() { echo $(( CALL_S - $(elapsed) )); }
[ $# -gt 0 ] || set -- "serve="

# tune C DIR: one `wring tune` at concurrency C into DIR.
tune() {
    local c=$1 dir=$2 warm=$1 np_var=C$1_PROMPTS cfg_var=C$1_CONFIGS np cfg extra=()
    [ "$warm" -gt 8 ] && warm=8
    np=${!np_var:-$([ "$c" = 1 ] && echo 8 || echo 128)}
    cfg=${!cfg_var:-$([ "$c" = 1 ] && echo nospec,suffix-k4 || echo nospec,suffix-k4,suffix-k6,suffix-k8)}
    [ -n "${WEIGHTS:-}" ] && extra=(--serve-arg=--gpu-weights="$WEIGHTS")
    local t0
    t0=$(date +%s)
    "$W" tune --model "$model" --configs "$cfg" --corpus all --corpus-dir "$corp" --concurrency "$c" \
        --max-tokens 256 --num-prompts "$np" --runs 1 --warmup "$warm" --max-prompt-chars 6000 \
        --device "$GPU_NAME" --serve-arg=--device="$DEVICE" "${extra[@]}" --startup-timeout-s 120 \
        --request-timeout-s 120 --no-progress --out "$dir" > "$dir.log" 2>&1
    echo "== tune c=$c n=$np rc=$? in $(( $(date +%s) - t0 )) s"
    grep -h "warm-up:" "$dir"/logs/*.log > "$dir/warm-up.txt" 2>/dev/null
    rm -rf "$dir/logs"
    sed -n '/^| corpus/,/^$/p;/^| configuration/,/^$/p' "$dir/report.md" 2>/dev/null
}

# bench_one LABEL PORT CORPUS C PROMPTS OUT_PREFIX: one `wring bench serve` run.
bench_one() {
    local w=$4
    [ "$w" -gt 8 ] && w=8
    timeout 240 "$W" bench serve --base-url "http://127.0.0.1:$2" --corpus "$3" --corpus-dir "$corp" \
        --concurrency "$4" --num-prompts "$5" --runs 1 --warmup "$w" --max-tokens 256 \
        --max-prompt-chars 6000 --device "$GPU_NAME" --label "$1" --no-progress \
        --result-json "$6.json" > "$6.log" 2>&1
    echo "$1 $3 c=$4 rc=$? $(python3 -c "import json;r=json.load(open('$6.json'))['results'][0];print(round(r['output_throughput_median']), 'tok/s', r['completed'], 'ok', r['failed'], 'failed')" 2>/dev/null)"
}

hostsplit() {
    local spec label pid n before after
    for spec in "nospec" "suffix-k4 --speculative suffix --k-policy fixed:4 --pad"; do
        # shellcheck disable=SC2086 # the flags split on purpose
        set -- $spec
        label=$1
        shift
        "$W" serve --device "$DEVICE" --port 8200 --kv-cache-mib 4096 "$@" > "$R/$label.serve.log" 2>&1 &
        pid=$!
        wait_http http://127.0.0.1:8200/v1/models
        for n in 1 32; do
            before=$(curl -s http://127.0.0.1:8200/metrics)
            bench_one "$label" 8200 mix $n $((n == 1 ? 8 : ${HOST_C32_PROMPTS:-128})) "$R/$label-c$n" > /dev/null
            after=$(curl -s http://127.0.0.1:8200/metrics)
            echo "$after" > "$R/$label-c$n.metrics"
            python3 scripts/gpu/tables.py split "$label mix c=$n" "$before" "$after" "$R/$label-c$n.log"
        done
        stop $pid
    done | tee "$R/hostsplit.txt"
}

steplog() {
    local pid run
    "$W" serve --device "$DEVICE" --port 8200 --kv-cache-mib 4096 --speculative suffix --k-policy fixed:4 --pad \
        --step-log "$R/steps.jsonl" > "$R/steplog.serve.log" 2>&1 &
    pid=$!
    wait_http http://127.0.0.1:8200/v1/models
    for run in 1 2; do bench_one "k4-run$run" 8200 mix 32 128 "$R/steplog-run$run"; done
    stop $pid
    # Each run's own steps: the log split at its longest pause between two steps.
    python3 - "$R/steps" <<'PY'
import json, sys
base = sys.argv[1]
lines = [l for l in open(base + ".jsonl") if l.strip()]
t = [json.loads(l)["t_ms"] for l in lines]
cut = max(range(1, len(t)), key=lambda i: t[i] - t[i - 1]) if len(t) > 1 else len(t)
open(base + "-run1.jsonl", "w").writelines(lines[:cut])
open(base + "-run2.jsonl", "w").writelines(lines[cut:])
PY
    python3 scripts/gpu/tables.py steplog "$R"/steps-run?.jsonl | tee "$R/steps-summary.txt"
    rm -f "$R/steps.jsonl"
}

structured() {
    local pid spec=${STRUCT_SPEC:-off} extra=()
    [ "$spec" != off ] && extra=(--speculative "$spec")
    "$W" serve --device "$DEVICE" --port 8201 --kv-cache-mib 4096 "${MODEL_ARGS[@]}" "${extra[@]}" \
        > "$R/structured.serve.log" 2>&1 &
    pid=$!
    wait_http http://127.0.0.1:8201/v1/models
    timeout "${STRUCT_S:-150}" python3 scripts/gpu/structured_cost.py http://127.0.0.1:8201 "$R/structured.json" \
        --model "${DUMMY:-default}" --speculative "$spec" 1 32 2>&1 | tee "$R/structured.txt"
    stop $pid
}

quant() {
    local t0
    t0=$(date +%s)
    "$W" tune --model "$model" --configs nospec,suffix-k4 --weights "${QUANT_FORMATS:-bf16,fp8,int4,nvfp4}" \
        --corpus mix,humaneval --corpus-dir "$corp" --concurrency 32 --max-tokens 256 --num-prompts 64 \
        --runs 1 --warmup 8 --max-prompt-chars 6000 --device "$GPU_NAME" --serve-arg=--device="$DEVICE" \
        --startup-timeout-s 120 --request-timeout-s 120 --no-progress --out "$R/tune-quant" > "$R/tune-quant.log" 2>&1
    echo "== tune quant formats rc=$? in $(( $(date +%s) - t0 )) s"
    rm -rf "$R/tune-quant/logs"
    sed -n '/^| corpus/,/^$/p;/^| configuration/,/^$/p' "$R/tune-quant/report.md" 2>/dev/null
}

# Fair steps on a quiet CPU (the GPU idle): server on 2 pinned cores, client on 2 others.
fair() {
    local target extra fpid
    for target in default 0; do
        extra=()
        [ "$target" = 0 ] && extra=(--step-time-target-ms 0)
        RAYON_NUM_THREADS=2 taskset -c 2,3 "$W" serve --device cpu --port 8011 "${extra[@]}" > "$R/fair-$target.serve.log" 2>&1 &
        fpid=$!
        wait_http http://127.0.0.1:8011/v1/models
        taskset -c 6,7 timeout 150 python3 scripts/fair_steps.py --url http://127.0.0.1:8011 --streams 3 \
            --stream-tokens 300 --label "cpu-$target" 2>&1 | tee "$R/fair-$target.txt"
        stop $fpid
    done
}

peer() {
    local spec label pid c n L=/tmp/lcpp/build/bin
    for spec in "wring-nospec" "wring-k4 --speculative suffix --k-policy fixed:4 --pad"; do
        # shellcheck disable=SC2086 # the flags split on purpose
        set -- $spec
        label=$1
        shift
        "$W" serve --device "$DEVICE" --port 8200 --kv-cache-mib 4096 --step-log "$R/$label.steps.jsonl" "$@" \
            > "$R/$label.serve.log" 2>&1 &
        pid=$!
        if wait_http http://127.0.0.1:8200/v1/models; then
            for c in mix humaneval; do for n in 32 1; do
                bench_one "$label" 8200 $c $n $((n == 1 ? 8 : 128)) "$R/$label-$c-c$n"
            done; done
        fi
        stop $pid
    done | tee "$R/summary.txt"
    for _ in $(seq 60); do [ -f /tmp/lcpp/build.rc ] && break; sleep 5; done
    echo "llama.cpp build: $(cat /tmp/lcpp/build.rc 2>/dev/null || echo 'not finished')" | tee -a "$R/summary.txt"
    if [ -x $L/llama-server ]; then
        $L/llama-server -m "$model" --host 127.0.0.1 --port 8100 -ngl 99 --parallel 32 -fa on \
            -c $((32 * 4096)) -b 2048 -ub 512 > "$R/llamacpp.serve.log" 2>&1 &
        pid=$!
        if wait_http http://127.0.0.1:8100/health; then
            for c in mix humaneval; do for n in 32 1; do
                bench_one llama-server 8100 $c $n $((n == 1 ? 8 : 128)) "$R/llama-server-$c-c$n"
            done; done | tee -a "$R/summary.txt"
        fi
        stop $pid
        timeout 120 $L/llama-batched-bench -m "$model" -ngl 99 -fa on -c 20000 -b 2048 -ub 512 \
            -npp 128 -ntg 256 -npl 1,8,32 > "$R/llamacpp-batched-bench.log" 2>&1
        grep "^|" "$R/llamacpp-batched-bench.log" | tee -a "$R/summary.txt"
    fi
    python3 scripts/gpu/tables.py steplog "$R"/wring-*.steps.jsonl | tee "$R/steps-summary.txt"
    gzip -f "$R"/wring-*.steps.jsonl
}

PARTS=${PARTS:-tune32,tune1}
# shellcheck disable=SC1091 # written by the first call of a session
[ -f /tmp/wring-flags ] && . /tmp/wring-flags
for part in ${PARTS//,/ }; do
    for round in $(seq "${ROUNDS:-1}"); do
        for arm in "$@"; do
            name=${arm%%=*}
            [ "${ROUNDS:-1}" -gt 1 ] && name=$name-$round
            R=$OUT/$name
            mkdir -p "$R"
            if [ "$(left)" -lt 40 ]; then echo "== $name $part skipped ($(left) s left)"; continue; fi
            echo "== $name: $part (${arm#*=})"
            (
                # shellcheck disable=SC2163,SC2086 # the assignments split on purpose
                [ -n "${arm#*=}" ] && export ${arm#*=}
                W=${WRING_BIN:-/tmp/wring}
                env | grep '^WRING_' | sort > "$R/flags-$part.txt"
                case $part in
                    tune[0-9]*) tune "${part#tune}" "$R/tune-c${part#tune}" ;;
                    hostsplit | steplog | structured | quant | fair | peer) $part ;;
                    *) echo "unknown part $part" ;;
                esac
            )
        done
    done
done
for arm in "$@"; do
    name=${arm%%=*}
    if [ "${ROUNDS:-1}" -gt 1 ]; then
        for round in $(seq "$ROUNDS"); do [ -d "$OUT/$name-$round" ] && pack "$name-$round"; done
    else
        [ -d "$OUT/$name" ] && pack "$name"
    fi
done
echo "call took $(elapsed) s"
