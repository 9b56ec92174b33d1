#!/usr/bin/env bash
# Issue 14, session 13: serving with prefill chunks on attention_flash (the new default)
# against the previous routing (WRING_CUDA_PREFILL=tiles: head_dim 64 chunks on attention_mma,
# which is what the 135M model ran before), same binary, one call, interleaved A B A B:
# wring tune at c=32 (128 prompts a corpus, all seven corpora, no-spec and padded suffix
# K = 4/6/8), then c=1 (8 prompts, all corpora, no-spec and K = 4) for each. Second call of a
# pair: the first ran `bash scripts/gpu/stage.sh .dev/s13a` (model's first part, /tmp/wring);
# this one carries .dev/b: `bash scripts/gpu/flash_serve.sh`.
# Writes $OUT/s13-{old,new}-{1,2}.tgz and $OUT/s13-{old,new}-c1.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
old() { WRING_CUDA_PREFILL=tiles "$@"; }
new() { WRING_CUDA_PREFILL=flash "$@"; }
C32="C32_CONFIGS=nospec,suffix-k4,suffix-k6,suffix-k8"
for round in ${ROUNDS:-1 2}; do
    for v in old new; do
        $v env $C32 NAME=s13-$v-$round PARTS=tune32 CALL_S=120 bash scripts/gpu/final_serve.sh
    done
done
for v in old new; do
    $v env C1_CONFIGS=nospec,suffix-k4 NAME=s13-$v-c1 PARTS=tune1 CALL_S=60 bash scripts/gpu/final_serve.sh
done
