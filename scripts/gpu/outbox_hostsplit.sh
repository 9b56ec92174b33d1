#!/usr/bin/env bash
# Issue 15 item 2 / issue 14, session 11: host time per engine step with the requests' events
# delivered by the outbox thread (this build) and sent from the engine thread (the previous
# build), side by side: model vs host ms per step and each host phase, no-spec and padded
# K = 4, concurrency 1 and 32 on mix (final_serve.sh's hostsplit part), new / old / new.
# Second call of a pair: `scripts/gpu/stage.sh .dev/s11d` staged /tmp/wring (new),
# /tmp/wring_old and the model's first half; carry .dev/b3 (.dev/b2 with the corpora cut to
# 60-80 KB each: a call may carry 64 MiB) and run
# `ln -sfn b3 .dev/b && bash scripts/gpu/outbox_hostsplit.sh`. Writes $OUT/ob-*.tgz.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NAME=ob-new PARTS=hostsplit bash scripts/gpu/final_serve.sh
WRING_BIN=/tmp/wring_old NAME=ob-old PARTS=hostsplit bash scripts/gpu/final_serve.sh
NAME=ob-new2 PARTS=hostsplit bash scripts/gpu/final_serve.sh
