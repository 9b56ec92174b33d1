#!/usr/bin/env bash
# Serving A/B/C with one binary, one call: each ARM is NAME=ASSIGNMENTS (assignments joined
# by commas, e.g. "nagle=WRING_HTTP_NODELAY=off" "lt=WRING_CUDA_GEMM_LT=on"), run in the order
# given: wring tune at c=32 (128 prompts a corpus, all seven corpora, no-spec and padded
# suffix K = 4/6/8) per arm, then c=1 (8 prompts, no-spec and K = 4) per arm.
# Second call of a pair whose first staged the model's first part and /tmp/wring
# (scripts/gpu/stage.sh DIR). Results: $OUT/NAME-{32,1}.tgz per arm.
# Device: bash scripts/gpu/arms_serve.sh ARM...   (carry .dev/b)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
start=$(date +%s)
[ $# -gt 0 ] || { echo "usage: arms_serve.sh NAME=ASSIGNMENTS..."; exit 2; }
arm() { local spec=$1; shift; env ${spec#*=} "$@"; } # assignments may be empty: "base="
for a in "$@"; do
    arm "${a//,/ }" C32_CONFIGS=nospec,suffix-k4,suffix-k6,suffix-k8 NAME="${a%%=*}-32" PARTS=tune32 \
        CALL_S=120 bash scripts/gpu/final_serve.sh
done
for a in "$@"; do
    arm "${a//,/ }" C1_CONFIGS=nospec,suffix-k4 NAME="${a%%=*}-1" PARTS=tune1 CALL_S=60 bash scripts/gpu/final_serve.sh
done
echo "call took $(( $(date +%s) - start )) s"
