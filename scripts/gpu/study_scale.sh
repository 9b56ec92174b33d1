#!/usr/bin/env bash
# bestKpad at the study's scale: serving runs with replayed outputs (`wring serve
# --replay-outputs`, `wring tune --replay`) on dummy Llama-3.1-8B, and the default model's own
# outputs and live/replay check, one device call each. Results go to $OUT/<step>/ (tune
# output: one JSON per configuration, report.md, logs) and are turned into
# results/<date>-study-scale/serving.json by scripts/study_scale_table.py.
#
# Here (no GPU needed):
#   scripts/gpu/study_scale.sh prepare      # .dev/ss1: release binary, vocab GGUF, corpora, model part 1
#                                           # .dev/ss2, .dev/ss3: model parts 2 and 3 (a call carries
#                                           # what fits beside the repository: 64 MiB in all)
# On the device, back to back (the machine keeps /tmp for 30 s after a call); every call
# stages what it carries, so the default model is whole from the third call on:
#   call 1 (carry .dev/ss1): scripts/gpu/study_scale.sh stage tune8b:1:256:reference:humaneval,swebench
#   call 2 (carry .dev/ss2): scripts/gpu/study_scale.sh stage tune8b:32:256:reference
#   call 3 (carry .dev/ss3): scripts/gpu/study_scale.sh stage own tunesmall:32
# tune8b:C:MAX_TOKENS:SOURCE[:CORPORA[:CONFIGS]] (SOURCE reference, own = reference then the
# default model's own outputs, ownonly; SHAPE=qwen3-30b-a3b serves that dummy shape instead);
# tunesmall:C[:CORPORA] (SMALL_MODEL=dummy: its shape, dummy weights, the recorded own outputs).
# Each step checks the time left
# (STEP_DEADLINE seconds after the call started, default 540). RUNS=N: each configuration N times
# (wring tune reports the median).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
S=/tmp/ss
# The device tool's $OUT (what comes back: 8 files at most) gets a tarball; the work stays in
# /tmp, which outlives a call while the machine is warm.
DEV_OUT=${OUT:-}
OUT=/tmp/ss-out
T0=${T0:-$(date +%s)}
DEADLINE=${STEP_DEADLINE:-540}
SHARED=${WRING_SHARED:-$ROOT/../shared}
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }

prepare() {
    set -e
    bin=${WRING_BIN:-$ROOT/target/release/wring}
    model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
    cache=${WRING_HOME:-$HOME/.cache/wring}/corpora
    rm -rf .dev/ss1 .dev/ss2 .dev/ss3 && mkdir -p .dev/ss1 .dev/ss2 .dev/ss3
    local tmp
    tmp=$(mktemp -d)
    strip -o .dev/ss1/wring "$bin" && xz -T2 -6 -f .dev/ss1/wring
    python3 scripts/gpu/vocab_gguf.py "$model" .dev/ss1/vocab.gguf
    mkdir -p "$tmp/corpora"
    cp "$SHARED"/corpora/*.json* "$cache/HumanEval.jsonl.gz" "$tmp/corpora/"
    # The ShareGPT loader keeps every complete record of a cut file.
    head -c 4000000 "$cache/ShareGPT_V3_unfiltered_cleaned_split.json" \
        > "$tmp/corpora/ShareGPT_V3_unfiltered_cleaned_split.json"
    tar -C "$tmp" -cJf .dev/ss1/corpora.tar.xz corpora
    rm -rf "$tmp"
    dd if="$model" of=.dev/ss1/model.part0 bs=1M count=32 status=none
    dd if="$model" of=.dev/ss2/model.part1 bs=1M skip=32 count=34 status=none
    dd if="$model" of=.dev/ss3/model.part2 bs=1M skip=66 status=none
    sha256sum "$model" | cut -c1-64 > .dev/ss3/model.sha256
    # The device's copy of the repository may not know the commit the binary was built from.
    git rev-parse --short=12 HEAD > .dev/ss1/commit
    du -sh .dev/ss1 .dev/ss2 .dev/ss3
}

# Copies whatever this call carries into /tmp/ss (it outlives the call while the machine is warm).
stage() {
    mkdir -p $S
    for d in .dev/ss1 .dev/ss2 .dev/ss3; do
        [ -d $d ] && cp $d/model.part* $d/*.sha256 $S/ 2>/dev/null
    done
    if [ -f .dev/ss1/wring.xz ]; then
        xz -dc .dev/ss1/wring.xz > $S/wring && chmod +x $S/wring || return 1
        cp .dev/ss1/vocab.gguf .dev/ss1/commit $S/ && tar -C $S -xJf .dev/ss1/corpora.tar.xz || return 1
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv,noheader | tee $S/device.txt
    ls $S
    log "staged"
}

setup() {
    export WRING_HOME=$S/home
    mkdir -p "$WRING_HOME/models" "$OUT"
    . scripts/gpu/cuda_env.sh
    W=$S/wring
    [ -x $W ] || { echo "not staged: the first call carries .dev/ss1"; exit 1; }
    MODEL=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
    if [ ! -f "$MODEL" ] && [ -f $S/model.part2 ]; then
        cat $S/model.part0 $S/model.part1 $S/model.part2 > "$MODEL"
        echo "$(cat $S/model.sha256)  $MODEL" | sha256sum -c - || { rm -f "$MODEL"; exit 1; }
    fi
    CORPORA=$S/corpora
    [ -f $S/commit ] && export WRING_COMMIT=$(cat $S/commit)
    DEVICE="$(cut -d, -f1 $S/device.txt 2>/dev/null | head -1)"
}

# A server on PORT until `ready` or its deadline; prints its start-up lines.
PORT=8100
start_server() { # log file, serve args...
    local logf=$1; shift
    $W serve --port $PORT --device cuda "$@" > "$logf" 2>&1 &
    SERVER=$!
    local t=0
    until curl -sf http://127.0.0.1:$PORT/health > /dev/null 2>&1; do
        if ! kill -0 $SERVER 2>/dev/null; then
            log "server exited:"; tail -5 "$logf"; return 1
        fi
        sleep 1; t=$((t + 1))
        [ $t -ge 240 ] && { log "server not ready after 240 s"; return 1; }
    done
    log "server ready after ${t}s"
}
stop_server() {
    kill $SERVER 2>/dev/null
    for _ in $(seq 30); do kill -0 $SERVER 2>/dev/null || return 0; sleep 1; done
    kill -9 $SERVER 2>/dev/null
}

# An 8B model starts on this GPU with default flags and answers.
start8b() {
    setup
    local d=$OUT/start8b && mkdir -p $d
    start_server $d/serve.log --load-format dummy --model-shape llama-3.1-8b --model $S/vocab.gguf \
        --speculative suffix || { cp $d/serve.log $OUT/; return 1; }
    curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \
        -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":16,"temperature":0}' > $d/answer.json
    curl -s http://127.0.0.1:$PORT/metrics | grep -E "^(vllm:cache_config_info|wring:kv_blocks_total)" > $d/metrics.txt
    stop_server
    grep -E "KV cache|engine ready|warm-up|speculation|activations|ready" $d/serve.log | cut -c1-400
    python3 -c "import json;r=json.load(open('$d/answer.json'));print('answer tokens:',r['usage'])"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
}

# tune MODEL_ARGS... : `wring tune` with the step's corpora, concurrency, max_tokens, source.
# Env: CONFIGS, NP (prompts per corpus), WARMUP, CORPUS, C, MAXT, SRC, NAME, EXTRA_SERVE.
run_tune() {
    local d=$OUT/$NAME
    mkdir -p $d
    local replay=()
    [ "$SRC" = live ] || replay=(--replay "$SRC")
    log "tune $NAME: corpus $CORPUS c=$C max_tokens $MAXT source $SRC configs $CONFIGS ($(left) s left)"
    timeout $(( $(left) - 10 )) $W tune "$@" --configs "$CONFIGS" --corpus "$CORPUS" --corpus-dir "$CORPORA" \
        --concurrency $C --max-tokens $MAXT --num-prompts $NP --runs ${RUNS:-1} --warmup $WARMUP \
        --max-prompt-chars 6000 --device "$DEVICE" --serve-arg=--device=cuda ${EXTRA_SERVE:-} \
        "${replay[@]}" --share-servers --startup-timeout-s 240 --request-timeout-s 600 --no-progress \
        --out $d > $d.log 2>&1
    log "tune $NAME rc=$?"
    python3 scripts/study_scale_table.py --quiet-missing $d 2>/dev/null | tail -25
}

# Default model: its own greedy outputs for every corpus (the `own` source), and replaying
# them against the live run (same tokens, same tokens a step, tok/s within noise).
own() {
    setup
    local d=$OUT/own && mkdir -p $d
    start_server $d/serve.log --model "$MODEL" --trace-out $d/own-trace.jsonl || return 1
    log "recording own outputs: 7 corpora x ${OWN_NP:-128} prompts, greedy, max_tokens ${OWN_MAXT:-2048}"
    timeout $(( $(left) - 200 )) $W bench serve --base-url http://127.0.0.1:$PORT --corpus all \
        --corpus-dir "$CORPORA" --concurrency 32 --num-prompts ${OWN_NP:-128} --runs 1 --warmup 0 \
        --max-tokens ${OWN_MAXT:-2048} --max-prompt-chars 6000 --device "$DEVICE" --label own-trace \
        --no-progress --result-json $d/own-trace-bench.json > $d/own-trace-bench.log 2>&1
    log "own trace rc=$?: $(wc -l < $d/own-trace.jsonl) requests"
    stop_server
    xz -T0 -k -f $d/own-trace.jsonl
    # Live against replay of the same outputs, suffix padded K=8, three corpora; both runs
    # record what they emitted.
    NAME=own-live CONFIGS=suffix-k8 CORPUS=humaneval,swebench,lmsys C=32 MAXT=${OWN_MAXT:-2048} SRC=live \
        NP=${OWN_NP:-128} WARMUP=0 run_tune --model "$MODEL" --serve-arg=--trace-out=$d/live-k8.jsonl
    NAME=own-replay CONFIGS=suffix-k8 CORPUS=humaneval,swebench,lmsys C=32 MAXT=${OWN_MAXT:-2048} \
        SRC=own:$d/own-trace.jsonl NP=${OWN_NP:-128} WARMUP=0 run_tune --model "$MODEL" \
        --serve-arg=--trace-out=$d/replay-k8.jsonl
    python3 - $d/own-trace.jsonl $d/live-k8.jsonl $d/replay-k8.jsonl <<'PY' | tee $d/compare.txt
import json, sys
def load(p):
    # The first line of an id, as `--replay own:FILE` takes it (a prompt of a corpus is
    # recorded again in the mix run, and a GPU's greedy output may differ there).
    out = {}
    try:
        for r in map(json.loads, open(p)):
            out.setdefault(r["source_id"], r["output_ids"])
    except OSError:
        pass
    return out
own, live, replay = map(load, sys.argv[1:4])
for name, run in (("live suffix-k8", live), ("replayed suffix-k8", replay)):
    ids = [i for i in run if i in own]
    same = sum(run[i] == own[i] for i in ids)
    tok = sum(len(own[i]) for i in ids)
    agree = sum(next((j for j, (a, b) in enumerate(zip(run[i], own[i])) if a != b),
                     min(len(run[i]), len(own[i]))) for i in ids)
    print(f"{name}: {same}/{len(ids)} requests token-identical to the recorded greedy outputs; "
          f"{agree}/{tok} tokens before the first difference")
PY
}

# Dummy Llama-3.1-8B (bf16): no-spec against suffix K in {4,6,8,12} padded and adaptive.
# SHAPE=<dummy shape> serves another (qwen3-30b-a3b: a mixture of experts, with
# WRING_CUDA_MOE=on while that path is opt-in); its folders are named after it.
tune8b() { # concurrency max_tokens source [corpora] [configs]
    setup
    local src=$3 shape=${SHAPE:-llama-3.1-8b} prefix=8b
    [ "$shape" = llama-3.1-8b ] || prefix=$shape
    [ "$src" = own ] && src=reference,own:$OUT/own/own-trace.jsonl
    [ "$src" = ownonly ] && src=own:$OUT/own/own-trace.jsonl
    local np=${NP:-128}; [ $1 -eq 1 ] && np=${NP1:-12}
    NAME=$prefix-c$1-t$2-${3%%:*} CONFIGS=${5:-nospec,suffix-k4,suffix-k6,suffix-k8,suffix-k12,adaptive} \
        CORPUS=${4:-all} C=$1 MAXT=$2 SRC=$src NP=$np WARMUP=${WARMUP:-4} \
        run_tune --model $S/vocab.gguf --serve-arg=--load-format=dummy --serve-arg=--model-shape="$shape"
}

# The default model at concurrency 32 and 1: adaptive K against the fixed padded Ks, own
# outputs replayed (every configuration sees the same tokens).
# SMALL_MODEL=dummy: the default model's shape with dummy weights and the outputs recorded in
# results/2026-12-06-study-scale/own (a replay emits them whatever the weights say, so every
# cost is the real model's and the model need not travel).
tunesmall() { # concurrency [corpora]
    setup
    local np=${NP:-128} src=${SRC:-own:$OUT/own/own-trace.jsonl} model=(--model "$MODEL")
    [ $1 -eq 1 ] && np=${NP1:-12}
    if [ "${SMALL_MODEL:-}" = dummy ]; then
        xz -dc results/2026-12-06-study-scale/own/own-trace.jsonl.xz > $S/own-trace.jsonl
        src=${SRC:-own:$S/own-trace.jsonl}
        model=(--model $S/vocab.gguf --serve-arg=--load-format=dummy --serve-arg=--model-shape=smollm2-135m)
    fi
    NAME=small-c$1 CONFIGS=${CONFIGS:-nospec,suffix-k4,suffix-k6,suffix-k8,suffix-k12,adaptive} \
        CORPUS=${2:-all} C=$1 MAXT=${MAXT:-256} SRC=$src NP=$np \
        WARMUP=${WARMUP:-4} run_tune "${model[@]}"
}

[ $# -gt 0 ] || { sed -n 2,24p "$0"; exit 2; }
case $1 in
prepare) prepare ;;
*)
    for step in "$@"; do
        IFS=: read -r name a b c d e <<< "$step"
        case $name in
        stage) stage ;;
        start8b) start8b ;;
        own) own ;;
        tune8b) tune8b "$a" "$b" "$c" "$d" "$e" ;;
        tunesmall) tunesmall "$a" "$b" ;;
        *) echo "unknown step $step" >&2; exit 2 ;;
        esac
        [ "$(left)" -gt 30 ] || { log "out of time: later steps skipped"; break; }
    done
    # Tables, tune JSON and logs come back as one tarball ($OUT/a/b/c would not come back).
    if [ -n "$DEV_OUT" ]; then
        (cd $OUT && tar -cJf $DEV_OUT/ss-$(date +%H%M%S).tar.xz --exclude='*.jsonl' . 2>/dev/null)
        [ -f $OUT/own/own-trace.jsonl.xz ] && cp $OUT/own/own-trace.jsonl.xz $DEV_OUT/
        ls -la $DEV_OUT
    fi
    ;;
esac
