#!/usr/bin/env bash
# First call of a device session (carry DIR, laid out by scripts/gpu/prepare.sh): keeps the
# model's first part under /tmp/wring-stage and the binaries as /tmp/wring, /tmp/wring_old,
# /tmp/gpu_check and /tmp/gpu_check_old for the calls that follow while the machine is warm;
# with DIR/llamacpp-src.tar.xz, starts the llama.cpp peer's build in the background (on every
# core if WAIT_S is set and this call waits that long for it, else on all cores but the last 4,
# which the next calls measure on). Any further arguments run scripts/gpu/check.sh with them,
# so a first call can also check kernels with dummy weights.
#
#   bash scripts/gpu/stage.sh .dev/pa                               # stage only
#   bash scripts/gpu/stage.sh .dev/pa graphs-135m graphs-8b cpu-135m  # stage, then checks
#   WAIT_S=400 bash scripts/gpu/stage.sh .dev/pc                    # stage, build llama.cpp, wait
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
D=${1:?usage: stage.sh DIR [CHECK...]}
shift
. scripts/gpu/lib.sh
[ -f "$D/model.part00" ] && cp "$D/model.part00" "$STAGE/"
unpack "$D/wring" /tmp/wring
unpack "$D/wring_old" /tmp/wring_old
unpack "$D/gpu_check" /tmp/gpu_check
unpack "$D/gpu_check_old" /tmp/gpu_check_old
: > /tmp/wring-flags
echo "commit $(cat "$D/commit" 2>/dev/null); $(device_line); $(nproc) cores"
ls -la "$STAGE" /tmp/wring* /tmp/gpu_check* 2>/dev/null
if [ -f "$D/llamacpp-src.tar.xz" ]; then
    if [ -n "${WAIT_S:-}" ]; then llamacpp_build "$D" all; else llamacpp_build "$D"; fi
    while [ ! -f /tmp/lcpp/build.rc ] && [ "$(elapsed)" -lt "${WAIT_S:-0}" ]; do sleep 5; done
    echo "llama.cpp build: $(cat /tmp/lcpp/build.rc 2>/dev/null || echo "running after $(elapsed) s")"
fi
[ $# -eq 0 ] || DIR=$D exec bash scripts/gpu/check.sh "$@"
