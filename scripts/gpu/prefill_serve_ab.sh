#!/usr/bin/env bash
# Issue 14: serving with this build's attention (default `mma`: K/V prefetch, the prefill
# kernel for head_dim 128) and session 9's (`WRING_CUDA_ATTENTION=mma-serial`), side by side in
# one call: wring tune at c=32 (128 prompts a corpus, all seven corpora, no-spec and padded
# K = 3/4/6/8), then the model time of steps with and without prompt tokens (hostsplit) for
# the default. Second call of a pair: the first one
# (scripts/gpu/prefill_check.sh) stages the model's first half and wring; carry .dev/b.
# Writes $OUT/pf-mma.tgz and $OUT/pf-mma-serial.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NAME=pf-mma PARTS=tune32 CALL_S=200 bash scripts/gpu/final_serve.sh
WRING_CUDA_ATTENTION=mma-serial NAME=pf-mma-serial PARTS=tune32 CALL_S=200 bash scripts/gpu/final_serve.sh
NAME=pf-mma-host PARTS=hostsplit CALL_S=200 bash scripts/gpu/final_serve.sh
