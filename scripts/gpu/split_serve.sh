#!/usr/bin/env bash
# Issue 14, session 11: serving with this build (attention_mma: one block per key split,
# split prefill chunks) and the previous one side by side in one call: wring tune at c=32
# (128 prompts a corpus, all seven corpora, no-spec and padded K = 3/4/6/8) and the model
# time of steps with and without prompt tokens (hostsplit), new then old. Third call of
# three: scripts/gpu/split_check.sh staged /tmp/wring and /tmp/wring_old, a second call
# staged the model's first half (scripts/gpu/stage_part00.sh); carry .dev/b2 and run
# `ln -sfn b2 .dev/b && bash scripts/gpu/split_serve.sh`.
# Writes $OUT/s11-new.tgz and $OUT/s11-old.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NAME=s11-new PARTS=tune32,hostsplit CALL_S=200 bash scripts/gpu/final_serve.sh
WRING_BIN=/tmp/wring_old NAME=s11-old PARTS=tune32,hostsplit CALL_S=200 bash scripts/gpu/final_serve.sh
