#!/usr/bin/env bash
# The serving re-run of session 8 (every core free, one wave of 32 prompts at c=32, small K,
# then host/model time per step): final_serve.sh's tune32 and hostsplit parts. Second call
# of a pair after the model half and /tmp/wring are staged; carry .dev/b.
exec env NAME=rerun PARTS=tune32,hostsplit C32_PROMPTS=32 HOST_C32_PROMPTS=32 \
    C32_CONFIGS=${CONFIGS:-nospec,suffix-k2,suffix-k3,suffix-k4,suffix-k6} \
    bash "$(dirname "$0")/final_serve.sh"
