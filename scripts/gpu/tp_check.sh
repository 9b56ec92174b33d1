#!/usr/bin/env bash
# Tensor parallelism in one device call on N GPUs (N = the GPUs nvidia-smi lists; the same
# command runs on 2, 4 and 8). Dummy weights throughout (the 135M model file is used only if
# an earlier call left it under /tmp/wring-stage); tokenizer from $TP_DIR/vocab.gguf.
#   1. how the GPUs are linked, and NCCL's all-reduce alone (`gpu_check tp allreduce`)
#   2. TP=N vs TP=1 logits within bf16 tolerance: dummy 8B, the 135M shape (9 heads in
#      3 KV groups: uneven split / replicated KV), the real 135M if staged
#   3. greedy verify = greedy plain at TP=N (runner level, oracle drafts), and through
#      the CLI: `wring generate --speculative suffix` = without, dummy 8B
#   4. step times vs the N-GPU HBM roofline + all-reduce time per step -> $OUT/tp.json
#      (dummy 8B TP=1 and TP=N, 70B TP=N; N >= 4 adds qwen2.5-72b, N = 8 llama-3.1-405b)
#   5. `wring serve --tensor-parallel-size N` on the 70B shape through HTTP at
#      concurrency 32, without and with suffix K=4 (`wring bench serve`)
# Here: A=.dev/tp MODEL=0 TP=1 BUILD=1 scripts/gpu/prepare.sh
# Device (a multi-GPU kind): bash scripts/gpu/tp_check.sh   (carry .dev/tp)
# Budget: ~8 minutes on 2 GPUs (BUDGET_S, default 450: later parts are skipped past it;
# on 4 or 8 GPUs the bigger shapes load longer: BUDGET_S=560 and a 600 s call).
# TP_PARTS picks parts (default checks,cli,steps,serve); TP_CONFIGS the step-time shapes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
T0=$(date +%s)
TP_DIR=${TP_DIR:-.dev/tp}
. scripts/gpu/lib.sh
# At most 8 files come back from $OUT: logs go to $LOG, tarred into $OUT/tp.tgz at the end.
LOG=/tmp/tp-log
rm -rf "$LOG" && mkdir -p "$OUT" "$LOG"
# NVLink multicast stays off on shared hosts (wring sets this too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUDGET_S=${BUDGET_S:-450}
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
W=/tmp/wring; G=/tmp/gpu_check; C="$G tp"
[ -x $W ] || { xz -dc $TP_DIR/wring.xz > $W && chmod +x $W; } || exit 1
[ -f $TP_DIR/vocab.gguf ] || { xz -dc $TP_DIR/vocab.gguf.xz > $TP_DIR/vocab.gguf; } || exit 1
[ -x $G ] || { xz -dc $TP_DIR/gpu_check.xz > $G && chmod +x $G; } || exit 1
VOCAB=$PWD/$TP_DIR/vocab.gguf
N=$(nvidia-smi -L | grep -c '^GPU')
{
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    nvidia-smi topo -m
    python3 -c "import glob; print('nccl:', glob.glob('/**/nvidia/nccl/lib/libnccl.so*', recursive=True)[:2])" 2>/dev/null
} > "$LOG/device.txt" 2>&1
echo "== $N GPUs; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
head -$((N + 1)) "$LOG/device.txt"
[ "$N" -ge 2 ] || { echo "tensor parallelism needs at least 2 GPUs"; exit 1; }

# TP_PARTS: which parts run (default all): checks (1-3 at runner level), cli, steps, serve.
TP_PARTS=${TP_PARTS:-checks,cli,steps,serve}
part() { case ",$TP_PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

run() { # tag limit_s cmd...
    local tag=$1 limit=$2; shift 2
    local l; l=$(left)
    if [ "$l" -lt 20 ]; then echo "== $tag SKIPPED (budget)"; return; fi
    [ "$limit" -gt "$l" ] && limit=$l
    local start; start=$(date +%s)
    timeout "$limit" "$@" > "$LOG/$tag.md" 2> "$LOG/$tag.err"
    local rc=$?
    echo "== $tag rc=$rc in $(( $(date +%s) - start )) s: $(grep -h RESULT "$LOG/$tag.md" | tr '\n' ' ')"
    [ $rc -eq 0 ] || tail -5 "$LOG/$tag.err"
}

if part checks; then
    run allreduce 60 $C allreduce "$N" 32 8192 80
    run logits-8b 120 $C logits dummy-8b "$N"
    run logits-135m-shape 60 $C logits dummy "$N"
    gguf=$(ls /tmp/wring-stage/*.gguf "$WRING_HOME"/models/*.gguf 2>/dev/null | head -1)
    [ -n "$gguf" ] && run logits-135m 60 $C logits "$gguf" "$N"
    run spec-8b 120 $C spec dummy-8b "$N"
fi

# Through the CLI: greedy text with suffix speculation = without (dummy 8B, TP=N).
gen() { $W generate --load-format dummy --model-shape llama-3.1-8b --model "$VOCAB" \
    --device cuda --tensor-parallel-size "$N" --kv-cache-memory 8GiB --max-model-len 1024 \
    --prompt "def fibonacci(n): return n if n < 2 else" --max-tokens 96 --ignore-eos "$@"; }
if part cli && [ "$(left)" -gt 120 ]; then
    timeout 90 gen > "$LOG/gen-plain.txt" 2> "$LOG/gen-plain.err"
    timeout 90 gen --speculative suffix --k-policy fixed:4 > "$LOG/gen-spec.txt" 2> "$LOG/gen-spec.err"
    if [ -s "$LOG/gen-plain.txt" ] && cmp -s "$LOG/gen-plain.txt" "$LOG/gen-spec.txt"; then
        echo "== cli greedy spec = plain at TP=$N: PASS ($(tail -1 "$LOG/gen-spec.err"))"
    else
        echo "== cli greedy spec = plain at TP=$N: FAIL"; tail -3 "$LOG/gen-plain.err" "$LOG/gen-spec.err"
    fi
fi

# TP_CONFIGS overrides the list (a scaling table: e.g. "llama-3.1-8b:1
# llama-3.1-8b:2 llama-3.1-8b:4 llama-3.1-8b:8 llama-3.1-70b:2 ...").
configs="llama-3.1-8b:1 llama-3.1-8b:$N llama-3.1-70b:$N"
[ "$N" -ge 4 ] && configs="$configs qwen2.5-72b:$N"
[ "$N" -ge 8 ] && configs="$configs llama-3.1-405b:$N"
part steps && run steps $(( N >= 8 ? 420 : N >= 4 ? 330 : 240 )) $C steps "$OUT" ${TP_CONFIGS:-$configs}

# The HTTP server on the 70B shape at concurrency 32, without and with suffix K=4.
PORT=8100
serve_bench() { # label serve-flags...
    local label=$1; shift
    if [ "$(left)" -lt 100 ]; then echo "== serve $label SKIPPED (budget)"; return; fi
    local start; start=$(date +%s)
    $W serve --load-format dummy --model-shape llama-3.1-70b --model "$VOCAB" --device cuda \
        --tensor-parallel-size "$N" --max-num-seqs 32 --kv-cache-memory 16GiB \
        --max-model-len 4096 --port $PORT "$@" > "$LOG/serve-$label.log" 2>&1 &
    local pid=$! t=0
    while ! curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null 2>&1; do
        kill -0 $pid 2>/dev/null || { echo "== serve $label: server exited"; tail -5 "$LOG/serve-$label.log"; return; }
        sleep 2; t=$((t + 2))
        [ $t -ge 240 ] && { echo "== serve $label: not ready after 240 s"; kill $pid; return; }
    done
    timeout $(( $(left) > 150 ? 150 : $(left) )) $W bench serve --base-url "http://127.0.0.1:$PORT" \
        --corpus mbpp --corpus-dir $TP_DIR/corpora --concurrency 32 --num-prompts 64 --runs 1 \
        --warmup 8 --max-tokens 128 --ignore-eos --max-prompt-chars 4000 --device "H200x$N" \
        --label "70b-tp$N-$label" --no-progress --result-json "$OUT/serve-$label.json" \
        > "$LOG/bench-$label.log" 2>&1
    echo "== serve $label rc=$? (ready after ${t} s, $(( $(date +%s) - start )) s in all): $(python3 - "$OUT/serve-$label.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(f"{r['output_throughput_median']:.0f} tok/s, {r['completed']} ok {r['failed']} failed, "
      f"accept len {r.get('spec_mean_acceptance_length')}")
PY
)"
    kill $pid 2>/dev/null
    for _ in $(seq 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done
    kill -9 $pid 2>/dev/null
}
if part serve; then
    serve_bench nospec
    serve_bench suffix-k4 --speculative suffix --k-policy fixed:4
fi

tar -czf "$OUT/tp.tgz" -C "$LOG" . 2>/dev/null
echo; cat $LOG/allreduce.md; echo; cat $LOG/steps.md 2>/dev/null
echo; grep -h -B1 -A14 "^| step\|^| verify" $LOG/logits-8b.md $LOG/spec-8b.md 2>/dev/null | head -60
echo "== total $(( $(date +%s) - T0 )) s"
