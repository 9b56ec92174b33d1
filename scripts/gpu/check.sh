#!/usr/bin/env bash
# Named checks and timings of the CUDA backend on the device (gpu_check, the check harness in
# crates/gpu-check), from the repository root. gpu_check comes from $DIR (gpu_check or
# gpu_check.xz, laid out by scripts/gpu/prepare.sh) when DIR is set, else from /tmp/gpu_check
# (staged by stage.sh); GPU_CHECK=/tmp/gpu_check_old runs a previous build. Every switch in
# the environment (WRING_CUDA_*, the checks' own STEPS_* / PREFILL_* / QUANT_BENCH_* ...)
# reaches gpu_check, so an A/B is two runs with two names:
#
#   DIR=.dev/k1 bash scripts/gpu/check.sh attention graphs-135m graphs-8b cpu-135m steps
#   NAME=pad-off WRING_CUDA_EAGER_PAD=off bash scripts/gpu/check.sh prefill-cold; \
#   NAME=pad-on  WRING_CUDA_EAGER_PAD=on  bash scripts/gpu/check.sh prefill-cold
#
# Correctness checks (given one after another, they run in parallel):
#   attention     every attention kernel vs a float64 host reference; determinism, batch
#                 invariance (ATTENTION_CASES, ATTENTION_INV_REPEAT narrow it)
#   graphs-135m   `graphs dummy`: graph replay = eager bitwise, verify = plain greedy at every
#                 K, each kernel vs the per-head reference (the 135M shape)
#   graphs-gguf   `graphs dummy-gguf` (the GGUF's RoPE layout); graphs-8b: `graphs dummy-8b`
#   cpu-135m      `cpu-compare dummy-gguf`: logits vs the f32 CPU backend (prefill included)
#   cpu-qwen3     `cpu-compare dummy:qwen3-8b:2` (Qwen3-8B's shape cut to 2 layers): the q/k
#                 norms on CUDA vs the CPU (the tiny reference models' head_dim is below the
#                 64 CUDA's KV cache takes)
#   cpu-moe       the mixture-of-experts op, with WRING_CUDA_MOE=on: `moe` (the op vs the CPU's
#                 on the tiny Qwen3-MoE and Mixtral layers of tests/data/hf_tiny and full-size
#                 dummy layers, exact up to rounding order; determinism, batch invariance, step
#                 times; graph replay of a MoE model) and `cpu-compare` on dummy Qwen3-30B-A3B
#                 and Mixtral-8x7B cut to 2 layers (the tiny models' head_dim 16 is below what
#                 the CUDA attention runs, so they are checked at the op level)
#   qgemm         each quantized GEMM and token count vs a host reference
#   fp8-fused     `fp8-fused dummy` and `dummy-gguf`: the fused FP8 path vs quantise + GEMM
#   quant         `quant dummy-gguf`: each weight format vs the same format on the CPU
#   multi-gemv    `multi-gemv dummy`: the multi-tile 4-bit gemv (set WRING_CUDA_WEIGHTS)
#   golden        the real model's logits vs the f32 reference on the golden prompts
#   graphs-real   `graphs` on the real model; quant-real: `quant` on it with the golden prompts
#                 (the real model is joined from stage.sh's part and .dev/b)
# Timings (each alone; files under $OUT/$NAME/<check>/):
#   steps         graph-replay decode/verify steps vs the HBM roofline -> steps.json,
#                 latency.json (STEPS_VARIANTS, STEPS_SHAPES, STEPS_CTX)
#   prefill       eager steps with prompt tokens (PREFILL_VARIANTS, PREFILL_ROUNDS)
#   prefill-cold  steps of prompt lengths not seen before, cold vs warm, with the host's
#                 enqueue time (PREFILL_COLD_TOKENS, PREFILL_COLD_MODELS)
#   chunk-steps   decode/verify rows beside one prompt chunk: chunk graph vs eager
#   gemv          the gemv kernels alone vs a host reference, timed (GEMV_MODELS, GEMV_SCHEMES,
#                 GEMV_TOKENS)
#   fused-norm    the norm fused into the gemv launches (FUSED_NORM_MODELS)
#   persistent    the persistent step kernel vs the launches it replaces, timed (PERSISTENT_MODELS)
#   quant-bench   dummy Llama-3.1-8B per weight format -> quant.json (QUANT_BENCH_SCHEMES,
#                 QUANT_BENCH_VARIANTS, QUANT_BENCH_SHAPES); its table is printed
#   bench-135m    `bench dummy` / bench-8b: `bench dummy-8b`, the older step-time table
# A check's time limit is LIMIT_S (default 290 s). Results: $OUT/$NAME.tgz (NAME default check).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
. scripts/gpu/lib.sh
[ $# -gt 0 ] || { sed -n '2,48p' "$0"; exit 2; }
NAME=${NAME:-check}
G=$OUT/$NAME
mkdir -p "$G"
if [ -z "${GPU_CHECK:-}" ]; then
    GPU_CHECK=/tmp/gpu_check
    if [ -n "${DIR:-}" ]; then unpack "$DIR/gpu_check" $GPU_CHECK || { echo "no gpu_check in $DIR"; exit 1; }; fi
fi
[ -x "$GPU_CHECK" ] || { echo "no $GPU_CHECK: carry a prepared DIR or run stage.sh first"; exit 1; }
echo "$GPU_CHECK ($(cat "${DIR:-/nonexistent}/commit" 2>/dev/null || echo "staged")); $(device_line)" | tee "$G/summary.md"
env | grep '^WRING_CUDA_' | tee -a "$G/summary.md"
LIMIT_S=${LIMIT_S:-290}
status=0

# The gpu_check arguments of a check; empty for an unknown name.
args_of() {
    case $1 in
        attention | qgemm) echo "$1" ;;
        graphs-135m) echo "graphs dummy" ;;
        graphs-gguf) echo "graphs dummy-gguf" ;;
        graphs-8b) echo "graphs dummy-8b" ;;
        cpu-135m) echo "cpu-compare dummy-gguf" ;;
        cpu-qwen3) echo "cpu-compare dummy:qwen3-8b:2" ;;
        cpu-moe) echo "(three checks)" ;;
        moe) echo "moe" ;;
        cpu-moe-30b) echo "cpu-compare dummy:qwen3-30b-a3b:2" ;;
        cpu-moe-mixtral) echo "cpu-compare dummy:mixtral-8x7b:2" ;;
        quant) echo "quant dummy-gguf" ;;
        fp8-fused) echo "(two checks)" ;;
        fp8-fused-135m) echo "fp8-fused dummy" ;;
        fp8-fused-gguf) echo "fp8-fused dummy-gguf" ;;
        multi-gemv) echo "multi-gemv dummy" ;;
        golden) echo "golden $model $B/smollm2_q41_f32_greedy.jsonl" ;;
        graphs-real) echo "graphs $model" ;;
        quant-real) echo "quant $model $B/smollm2_q41_f32_greedy.jsonl" ;;
        steps | prefill | prefill-cold | chunk-steps | gemv | fused-norm | persistent | quant-bench) echo "$1 $G/$1" ;;
        bench-135m) echo "bench dummy" ;;
        bench-8b) echo "bench dummy-8b" ;;
    esac
}
timing() {
    case $1 in steps | prefill | prefill-cold | chunk-steps | gemv | fused-norm | persistent | quant-bench | bench-*) return 0 ;; esac
    return 1
}

# What a timing prints besides its RESULT line: its tables.
tables() {
    case $1 in
        steps | prefill | prefill-cold | chunk-steps | fused-norm | persistent | bench-*) grep -h "^| \|^###" "$G/$1.md" | tee -a "$G/summary.md" ;;
        gemv) grep -h "^| model\|^|---\|^| 8b .* | [18] | \|^| 135m .* | 1 | " "$G/gemv.md" | tee -a "$G/summary.md" ;;
        quant-bench) python3 scripts/gpu/tables.py quant "$G/quant-bench"/*.json | tee -a "$G/summary.md" ;;
    esac
}

run_group() { # the correctness checks collected so far, in parallel
    [ ${#group[@]} -gt 0 ] || return 0
    local pids=() c
    for c in "${group[@]}"; do
        # shellcheck disable=SC2046 # the arguments split on purpose
        ( gpu_check_run "$LIMIT_S" "$c" $(args_of "$c") ) & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    grep -h "^| 64 ×\|^| 128 ×\|^<!--" "$G/attention.md" 2>/dev/null | tee -a "$G/summary.md"
    grep -h "vs per-head kernel, q 40\|no logits\|row by row" "$G"/graphs-*.md "$G"/cpu-*.md 2>/dev/null | tee -a "$G/summary.md"
    grep -h "^| qwen3-30b-a3b\|^| mixtral-8x7b\|^Graphs captured" "$G/moe.md" 2>/dev/null | tee -a "$G/summary.md"
    group=()
}

group=()
for c in "$@"; do
    case $c in golden | graphs-real | quant-real) join_model || exit 1 ;; esac
    if [ -z "$(args_of "$c")" ]; then echo "unknown check $c" | tee -a "$G/summary.md"; status=1; continue; fi
    if [ "$c" = fp8-fused ]; then group+=(fp8-fused-135m fp8-fused-gguf); continue; fi
    if [ "$c" = cpu-moe ]; then
        export WRING_CUDA_MOE=on
        echo "WRING_CUDA_MOE=on (cpu-moe)" | tee -a "$G/summary.md"
        group+=(moe cpu-moe-30b cpu-moe-mixtral)
        continue
    fi
    if timing "$c"; then
        run_group
        mkdir -p "$G/$c"
        # shellcheck disable=SC2046
        gpu_check_run "$LIMIT_S" "$c" $(args_of "$c") || status=1
        tables "$c"
    else
        group+=("$c")
    fi
done
run_group
echo "done at $(elapsed) s, status $status" | tee -a "$G/summary.md"
pack "$NAME"
exit $status
