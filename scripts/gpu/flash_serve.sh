#!/usr/bin/env bash
# Issue 14, session 13: serving with prefill chunks on attention_flash (new) against the
# routing before it (old: WRING_CUDA_PREFILL=tiles, head_dim 64 chunks on attention_mma —
# that switch is gone since; WRING_CUDA_ATTENTION=mma-only is the same routing for the
# 135M model now). scripts/gpu/ab_serve.sh does the runs; carry .dev/b after stage.sh.
# Writes $OUT/s13-{old,new}-{1,2}.tgz and $OUT/s13-{old,new}-c1.tgz.
A="${A:-WRING_CUDA_ATTENTION=mma-only}" B="${B:-WRING_CUDA_ATTENTION=mma}" NAME=s13 \
    exec bash "$(dirname "${BASH_SOURCE[0]}")/ab_serve.sh"
