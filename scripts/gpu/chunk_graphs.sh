#!/usr/bin/env bash
# Issue 14, session 16, first call of a pair: chunk graphs (WRING_CUDA_CHUNK_GRAPHS: steps of
# decode/verify rows beside one prompt chunk replay a graph keyed by the chunk's bucket).
# Stages the model's first part and /tmp/wring for the second call (scripts/gpu/arms_serve.sh
# "chunk-off=WRING_CUDA_CHUNK_GRAPHS=off" "chunk-on="), then: the checks (graphs on the 135M
# shape and dummy 8B: replay = eager bitwise for uniform and chunk steps, chunk steps vs the
# unpadded eager step, verify = plain greedy; CUDA vs the f32 CPU backend), and
# `gpu_check chunk-steps` (chunk graph vs eager, 135M shape and dummy 8B, chunk graphs up to
# 1024 tokens on both), and the per-kernel split of chunk steps (scripts/gpu/profile_ncu.sh).
# Here: bash scripts/gpu/pair_prepare.sh.  Device: bash scripts/gpu/chunk_graphs.sh (carry .dev/pa)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
export DIR=.dev/pa
bash scripts/gpu/stage.sh .dev/pa > /dev/null
gpu_check_setup chunk-graphs
gpu_check_checks "graphs-135m graphs-8b cpu-135m"
grep -h "chunk [0-9]* at context" "$G"/graphs-*.md | tee -a "$G/summary.md"
# Every chunk size on both models, past the big-model default (256 tokens on the 8B).
WRING_CUDA_CHUNK_GRAPHS=1024 gpu_check_run 240 chunk-steps chunk-steps "$G"
sed -n '/^|/p;/^Graphs/p' "$G/chunk-steps.md" >> "$G/summary.md"
# Per kernel (Nsight Compute): a verify step alone and beside a 55-token prompt chunk.
DIR=.dev/pa OUT=$G/prof SPECS="${PROFILE_SPECS:-dummy:32:5:256 dummy:32:5:256:55 dummy:32:1:256:55 dummy-8b:32:5:512 dummy-8b:32:5:512:55}" \
    bash scripts/gpu/profile_ncu.sh > "$G/prof.log" 2>&1
grep -h "kernels and" "$G"/prof/*-summary.md | tee -a "$G/summary.md"
cd "$OUT" && tar -czf chunk-graphs.tgz chunk-graphs && rm -rf chunk-graphs # one file back
