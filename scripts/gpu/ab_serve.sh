#!/usr/bin/env bash
# Serving A/B with one binary, one call, interleaved: wring tune at c=32 (128 prompts a
# corpus, all seven corpora, no-spec and padded suffix K = 4/6/8) for A B A B, then c=1 (8
# prompts, no-spec and K = 4) for A and B. A and B are environment assignments
# (A="WRING_CUDA_PREFILL=tiles"), NAME the prefix of $OUT/NAME-{old,new}-{1,2,c1}.tgz
# (A is "old", B "new"). Second call of a pair: the first staged the model's first part and
# /tmp/wring (scripts/gpu/stage.sh); this one carries .dev/b (scripts/gpu/final_serve.sh).
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
: "${A:?A=assignments for the old side}" "${B:?B=assignments for the new side}" "${NAME:?NAME=prefix}"
old() { env $A "$@"; }
new() { env $B "$@"; }
C32="C32_CONFIGS=nospec,suffix-k4,suffix-k6,suffix-k8"
for round in ${ROUNDS:-1 2}; do
    for v in old new; do
        $v $C32 NAME=$NAME-$v-$round PARTS=tune32 CALL_S=120 bash scripts/gpu/final_serve.sh
    done
done
for v in old new; do
    $v C1_CONFIGS=nospec,suffix-k4 NAME=$NAME-$v-c1 PARTS=tune1 CALL_S=60 bash scripts/gpu/final_serve.sh
done
