#!/usr/bin/env bash
# Issue 14, session 12, first call of the serving pair (scripts/gpu/staged_serve.sh is the
# second): stages DIR's model half and wring (scripts/gpu/stage.sh), then runs the attention
# check once (every kernel vs float64; determinism and batch invariance per kernel).
# Device: DIR=.dev/s12b bash scripts/gpu/staged_stage.sh   (carry .dev/s12b)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/s12b}
bash scripts/gpu/stage.sh "$DIR"
gpu_check_setup stage
# Two at once ran out of time in session 12 (each takes ~170 s alone): one.
gpu_check_run 240 attention attention
grep -h "^| 64 ×\|^| 128 ×" "$G"/attention.md | tee -a "$G/summary.md"
