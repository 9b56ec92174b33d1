#!/usr/bin/env bash
# The whole test suite: Rust unit/integration tests (including the golden-output,
# lossless-speculation and server tests), then the OpenAI-client tests against a live
# `wring serve`. Needs the default model (fetched on first use); the data is in tests/data.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --no-fail-fast
if [ -x tests/openai/run.sh ]; then
  # Reuse the binary the cargo tests just built (no second, release build).
  WRING_PROFILE=dev tests/openai/run.sh
fi
