#!/usr/bin/env bash
# Issue 14, session 12: serving with the staged attention kernel and per_q=512 against the
# previous defaults, same binary, one call, interleaved A B A B: wring tune at c=32 (128
# prompts a corpus, all seven corpora, no-spec and padded suffix K = 4/6/8), then c=1 (8
# prompts, mix and humaneval, no-spec and K = 4) for each. Second call of a pair: the
# first ran `bash scripts/gpu/stage.sh .dev/s12b` (model's first half, /tmp/wring); this
# one carries .dev/b3: `ln -sfn b3 .dev/b && bash scripts/gpu/staged_serve.sh`.
# Writes $OUT/s12-{old,new}-{1,2}.tgz and $OUT/s12-{old,new}-c1.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
old() { WRING_CUDA_ATTENTION=mma WRING_CUDA_MMA_SPLITS=per_q=128 "$@"; }
new() { WRING_CUDA_ATTENTION=mma-staged WRING_CUDA_MMA_SPLITS=per_q=512 "$@"; }
C32="C32_CONFIGS=nospec,suffix-k4,suffix-k6,suffix-k8"
for round in 1 2; do
    for v in old new; do
        $v env $C32 NAME=s12-$v-$round PARTS=tune32 CALL_S=120 bash scripts/gpu/final_serve.sh
    done
done
for v in old new; do
    $v env C1_CONFIGS=nospec,suffix-k4 NAME=s12-$v-c1 PARTS=tune1 CALL_S=60 bash scripts/gpu/final_serve.sh
done
