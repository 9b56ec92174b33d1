#!/usr/bin/env bash
# Stages the default model's first half (carry .dev/p0, a hard link of .dev/a/model.part00 from
# scripts/gpu/final_prepare.sh) under /tmp/wring-stage for scripts/gpu/final_serve.sh, whose
# call carries the second half (.dev/b2). A call of its own when the binaries' call is full.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mkdir -p /tmp/wring-stage && cp .dev/p0/model.part00 /tmp/wring-stage/
ls -la /tmp/wring-stage /tmp/wring /tmp/wring_old 2>&1
