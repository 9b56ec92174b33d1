#!/usr/bin/env bash
# Where a step's host time goes on the H200 (issues 14 and 15): final_serve.sh's hostsplit
# part — no-spec and padded suffix K=4, mix, c=1 (8 prompts) and c=32 (128 prompts), with the
# engine's per-phase host counters (draft, schedule, verify_emit, end) and admission/finish
# time outside steps. Second call of a pair after the model half and /tmp/wring are staged
# (final_stage.sh, or the staging lines of final_a.sh); carry .dev/b.
exec env NAME=phases PARTS=hostsplit bash "$(dirname "$0")/final_serve.sh"
