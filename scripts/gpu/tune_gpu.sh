#!/usr/bin/env bash
# `wring tune` on the H200: every configuration of the spec-decode table (no-spec, ngram,
# suffix K ∈ {4,6,8,12} padded and unpadded, dynamic, adaptive) × all seven corpora, through
# wring's own HTTP server with `--device cuda`, at one concurrency per call.
#
#   scripts/gpu/tune_gpu.sh prepare          # here: .dev/t1 (model part 1), .dev/t2 (rest, binary, corpora)
#   scripts/gpu/tune_gpu.sh stage            # device call 1, carry .dev/t1
#   scripts/gpu/tune_gpu.sh run 32 [CONFIGS] # device call 2.., carry .dev/t2; env GRAPHS=off runs eagerly,
#                                            # WEIGHTS=fp8|int4|nvfp4 quantises at load (--gpu-weights)
#
# Every call after the first needs the machine still warm (/tmp/wring-stage holds part 1).
# Results: $OUT/tune-c<N>[-eager]/ (raw JSON per configuration, report.md, charts, k_profile.json).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:?prepare, stage or run}
STAGE=/tmp/wring-stage
case $what in
prepare)
    set -e
    bin=${WRING_BIN:?WRING_BIN=path of the release wring binary}
    model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
    shared=${WRING_SHARED:-$PWD/../shared}
    rm -rf .dev/t1 .dev/t2 && mkdir -p .dev/t1 .dev/t2/corpora
    head -c 56000000 "$model" > .dev/t1/model.part00
    tail -c +56000001 "$model" > .dev/t2/model.part01
    sha256sum "$model" | cut -c1-64 > .dev/t2/model.sha256
    strip -o .dev/t2/wring "$bin" && xz -T2 -6 -f .dev/t2/wring
    cp "$shared"/corpora/*.json* .dev/t2/corpora/
    cp "$shared/golden/smollm2_q41_f32_greedy.jsonl" .dev/t2/   # for quant_check.sh GOLDEN=
    cp "$HOME/.cache/wring/corpora/HumanEval.jsonl.gz" .dev/t2/corpora/
    # The ShareGPT loader keeps every complete record of a truncated file.
    head -c 2000000 "$HOME/.cache/wring/corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
        > .dev/t2/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
    du -sh .dev/t1 .dev/t2
    ;;
stage)
    mkdir -p "$STAGE" && cp .dev/t1/model.part00 "$STAGE/" && ls -la "$STAGE"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
    ;;
run)
    conc=${2:?concurrency}
    configs=${3:-all}
    OUT=${OUT:-/tmp/wring-out}
    export WRING_HOME=/tmp/wring-home
    mkdir -p "$WRING_HOME/models" "$OUT"
    . "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
    model=$WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
    if [ ! -f "$model" ]; then
        cat "$STAGE/model.part00" .dev/t2/model.part01 > "$model" || exit 1
        echo "$(cat .dev/t2/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
    fi
    W=/tmp/wring-tune-bin
    [ -x $W ] || { xz -dc .dev/t2/wring.xz > $W && chmod +x $W; } || exit 1
    suffix=""
    [ "${GRAPHS:-on}" = off ] && { export WRING_CUDA_GRAPHS=off; suffix="-eager"; }
    extra=()
    if [ -n "${WEIGHTS:-}" ]; then
        export WRING_CUDA_QUANT_KERNELS=on
        extra=(--serve-arg=--gpu-weights="$WEIGHTS")
        suffix="$suffix-$WEIGHTS"
    fi
    # Prompts per corpus: two waves at concurrency ≥ 8, eight requests at concurrency 1.
    np=${NP:-$((conc * 2))}; [ $np -lt 8 ] && np=8
    warm=$conc; [ $warm -gt 8 ] && warm=8
    dir="$OUT/tune-c$conc$suffix"
    start=$(date +%s)
    $W tune --model "$model" --configs "$configs" --corpus all --corpus-dir "$PWD/.dev/t2/corpora" \
        --concurrency "$conc" --max-tokens 256 --num-prompts "$np" --runs 1 --warmup "$warm" \
        --max-prompt-chars 6000 --device "NVIDIA H200 (graphs ${GRAPHS:-on})" \
        --serve-arg=--device=cuda "${extra[@]}" --startup-timeout-s 120 --request-timeout-s 120 --no-progress \
        --out "$dir" > "$dir.log" 2>&1
    echo "tune rc=$? in $(( $(date +%s) - start )) s"
    tail -5 "$dir.log"
    [ -f "$dir/report.md" ] && sed -n '/Geometric mean/,/^$/p;/Geometric mean/,/Best-K/p' "$dir/report.md" | head -30
    ;;
*) echo "unknown step $what" >&2; exit 2 ;;
esac
