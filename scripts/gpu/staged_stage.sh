#!/usr/bin/env bash
# Issue 14, session 12, first call of the serving pair (scripts/gpu/staged_serve.sh is the
# second): stages DIR's model half and wring (scripts/gpu/stage.sh), then runs the attention
# check twice at once (every kernel vs float64; determinism and batch invariance per kernel).
# Device: DIR=.dev/s12b bash scripts/gpu/staged_stage.sh   (carry .dev/s12b)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/s12b}
OUT=${OUT:-/tmp/wring-out}
G=$OUT/stage
mkdir -p "$G"
bash scripts/gpu/stage.sh "$DIR"
GPU_CHECK=/tmp/gpu_check
xz -dc "$DIR/gpu_check.xz" > $GPU_CHECK && chmod +x $GPU_CHECK
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
echo "commit $(cat "$DIR/commit")" | tee "$G/summary.md"
( gpu_check_run 240 attention-1 attention ) &
( gpu_check_run 240 attention-2 attention ) &
wait
grep -h "^| 64 ×\|^| 128 ×" "$G"/attention-*.md | tee -a "$G/summary.md"
