#!/usr/bin/env bash
# Issue 14, session 12: serving with the staged attention kernel and per_q=512 (new) against
# the previous defaults (old), through scripts/gpu/ab_serve.sh; as run then:
# `ln -sfn b3 .dev/b && bash scripts/gpu/staged_serve.sh` after `bash scripts/gpu/stage.sh .dev/s12b`.
# Writes $OUT/s12-{old,new}-{1,2}.tgz and $OUT/s12-{old,new}-c1.tgz.
A="WRING_CUDA_ATTENTION=mma WRING_CUDA_MMA_SPLITS=per_q=128" \
    B="WRING_CUDA_ATTENTION=mma-staged WRING_CUDA_MMA_SPLITS=per_q=512" NAME=s12 \
    exec bash "$(dirname "${BASH_SOURCE[0]}")/ab_serve.sh"
