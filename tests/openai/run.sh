#!/usr/bin/env bash
# Runs the OpenAI-client test suite against a real `wring serve`.
# Installs tests/requirements.txt and tests/requirements-nodeps.txt (exact pins) into a venv
# under target/ (reused while the files are unchanged) and builds the wring binary unless WRING_BIN names one.
#   tests/openai/run.sh [pytest args...]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${WRING_OPENAI_VENV:-$repo/target/openai-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
requirements="$repo/tests/requirements.txt"
nodeps="$repo/tests/requirements-nodeps.txt"
stamp="$venv/.requirements.sha256"
want="$(cat "$requirements" "$nodeps" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$nodeps"
    echo "$want" > "$stamp"
fi
if [ -z "${WRING_BIN:-}" ]; then
    # The dev profile is optimised in this workspace and shared with `cargo test`.
    profile="${WRING_PROFILE:-dev}"
    (cd "$repo" && cargo build --quiet -p wring --profile "$profile")
    dir="$profile"; [ "$profile" = dev ] && dir=debug
    export WRING_BIN="${CARGO_TARGET_DIR:-$repo/target}/$dir/wring"
fi
cd "$repo/tests/openai"
exec "$venv/bin/python" -m pytest -q "$@"
