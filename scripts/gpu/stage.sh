#!/usr/bin/env bash
# First call of a serving pair when the binaries and the model's first half fill a call:
# stages DIR/model.part00 (a hard link of .dev/a/model.part00) under /tmp/wring-stage,
# DIR/wring.xz as /tmp/wring and DIR/wring_old.xz (if there) as /tmp/wring_old for
# scripts/gpu/final_serve.sh (WRING_BIN picks one), whose call carries the second half
# (.dev/b2). Usage on the device: bash scripts/gpu/stage.sh .dev/s11d
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
D=${1:?usage: stage.sh DIR}
mkdir -p /tmp/wring-stage && cp "$D/model.part00" /tmp/wring-stage/
xz -dc "$D/wring.xz" > /tmp/wring && chmod +x /tmp/wring && : > /tmp/wring-flags
if [ -f "$D/wring_old.xz" ]; then xz -dc "$D/wring_old.xz" > /tmp/wring_old && chmod +x /tmp/wring_old; fi
ls -la /tmp/wring-stage /tmp/wring
[ ! -f /tmp/wring_old ] || ls -la /tmp/wring_old
