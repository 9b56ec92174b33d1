#!/usr/bin/env bash
# Issue 14, session 11: serving with the key splits scripts/gpu/split_sweep.sh chose
# (/tmp/wring-splits) and with the previous defaults, side by side in one call, same binary:
# wring tune at c=32 (128 prompts a corpus, all seven corpora, no-spec and padded K =
# 3/4/6/8) and the model time of steps with and without prompt tokens (hostsplit). Second
# call of a pair: split_sweep.sh staged /tmp/wring, the model's first half and
# /tmp/wring-splits; carry .dev/b2 and run `ln -sfn b2 .dev/b && bash scripts/gpu/split_serve.sh`.
# Writes $OUT/s11-chosen.tgz and $OUT/s11-base.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. /tmp/wring-splits
echo "chosen: $WRING_CUDA_MMA_SPLITS"
NAME=s11-chosen PARTS=tune32,hostsplit CALL_S=200 bash scripts/gpu/final_serve.sh
WRING_CUDA_MMA_SPLITS=per_q=128,prefill=0,grid=fill,prefill_nt=6 NAME=s11-base PARTS=tune32,hostsplit \
    CALL_S=200 bash scripts/gpu/final_serve.sh
