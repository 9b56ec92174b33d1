#!/usr/bin/env bash
# Issue 14, session 15, second call of the eager-padding pair (the first, eager_pad.sh,
# staged /tmp/wring and the model's first part): one binary, WRING_CUDA_EAGER_PAD off vs
# on, interleaved. Per side: wring tune at c=32 (128 prompts a corpus, all seven corpora,
# no-spec and padded suffix K = 4/6/8) and the model vs host time per step (mix, c=1 and 32;
# steps with prompt tokens apart); then c=1 (8 prompts, no-spec and K = 4) per side; then a
# second c=32 round while the call has time. Results: $OUT/pad-{off,on}-{1,2,c1}.tgz.
# Device: bash scripts/gpu/eager_pad_serve.sh   (carry .dev/b)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
start=$(date +%s)
C32="C32_CONFIGS=nospec,suffix-k4,suffix-k6,suffix-k8"
for pad in off on; do
    env WRING_CUDA_EAGER_PAD=$pad $C32 NAME=pad-$pad-1 PARTS=tune32,hostsplit CALL_S=200 \
        bash scripts/gpu/final_serve.sh
done
for pad in off on; do
    env WRING_CUDA_EAGER_PAD=$pad C1_CONFIGS=nospec,suffix-k4 NAME=pad-$pad-c1 PARTS=tune1 \
        CALL_S=60 bash scripts/gpu/final_serve.sh
done
for pad in off on; do
    [ $(( $(date +%s) - start )) -lt ${ROUND2_BEFORE_S:-400} ] || { echo "round 2 skipped"; break; }
    env WRING_CUDA_EAGER_PAD=$pad $C32 NAME=pad-$pad-2 PARTS=tune32 CALL_S=120 bash scripts/gpu/final_serve.sh
done
echo "call took $(( $(date +%s) - start )) s"
