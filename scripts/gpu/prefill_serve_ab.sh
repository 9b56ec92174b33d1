#!/usr/bin/env bash
# Issue 14: serving with the prefill attention kernel (default `mma`) and without it
# (`WRING_CUDA_ATTENTION=mma-only`), side by side in one call: wring tune at c=32 (128 prompts
# a corpus, all seven corpora, no-spec and padded K = 3/4/6/8) and the model time of steps
# with and without prompt tokens (hostsplit). Second call of a pair: the first one
# (scripts/gpu/prefill_check.sh) stages the model's first half and wring; carry .dev/b.
# Writes $OUT/pf-mma.tgz and $OUT/pf-mma-only.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NAME=pf-mma PARTS=tune32,hostsplit CALL_S=250 bash scripts/gpu/final_serve.sh
WRING_CUDA_ATTENTION=mma-only NAME=pf-mma-only PARTS=tune32,hostsplit CALL_S=250 bash scripts/gpu/final_serve.sh
