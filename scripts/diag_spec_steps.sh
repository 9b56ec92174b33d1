#!/usr/bin/env bash
# Where a speculating server's time goes at one concurrency: runs `wring serve` with each
# given --speculative setting, replays one corpus with `wring bench serve`, and keeps the
# engine's /metrics (steps, model seconds, host phases, drafts) beside the result.
#   OUT=results/... CORPUS=humaneval C=64 N=64 CHARS=1500 scripts/diag_spec_steps.sh none suffix
set -uo pipefail
cd "$(dirname "$0")/.."
W=${WRING:-target/release/wring}
OUT=${OUT:-results/$(date +%F)-diag-spec-steps}
CORPUS=${CORPUS:-humaneval}; C=${C:-64}; N=${N:-64}; CHARS=${CHARS:-1500}
mkdir -p "$OUT"
port=${PORT:-39400}
for spec in "$@"; do
    port=$((port + 1))
    label=${LABEL_PREFIX:-}${spec//[^a-z0-9]/_}
    # shellcheck disable=SC2086
    "$W" serve --port "$port" --speculative $spec ${SERVE_ARGS:-} > "$OUT/$label.serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
        sleep 1
    done
    "$W" bench serve --base-url "http://127.0.0.1:$port" --corpus "$CORPUS" \
        --corpus-dir "${CORPUS_DIR:-../shared/corpora}" --concurrency "$C" --num-prompts "$N" \
        --max-tokens 64 --warmup 4 --max-prompt-chars "$CHARS" --no-progress --label "$label" \
        --result-json "$OUT/$label.json" ${BENCH_ARGS:-} > "$OUT/$label.bench.log" 2>&1
    curl -s "http://127.0.0.1:$port/metrics" > "$OUT/$label.metrics"
    kill "$pid"; wait "$pid" 2>/dev/null
    echo "== $spec (load $(cut -d' ' -f1-3 /proc/loadavg))"
    grep -A2 "^corpus" "$OUT/$label.bench.log"
    grep -E "^wring:(engine_steps|engine_step_model_seconds|engine_step_host|spec_decode_num_draft_tokens|spec_decode_num_accepted_tokens |spec_decode_num_drafts)" "$OUT/$label.metrics" | grep -v "^#"
done
