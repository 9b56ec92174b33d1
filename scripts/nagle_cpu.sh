#!/usr/bin/env bash
# TCP_NODELAY on the CPU server (streams at a steady pace): `wring serve --device cpu` with
# WRING_HTTP_NODELAY=off (Nagle on, the old behaviour) and with the default, alternated
# ROUNDS times; `wring bench serve` on humaneval at concurrency 1 and 4 (8 prompts,
# max_tokens 64). Prints tok/s, median TTFT and the median of each stream's longest gap.
# Usage: scripts/nagle_cpu.sh [WRING_BIN]   (release build; results under $OUT, default target/nagle-cpu)
set -uo pipefail
cd "$(dirname "$0")/.."
W=${1:-target/release/wring} OUT=${OUT:-target/nagle-cpu} corp=${CORPUS_DIR:-../shared/corpora}
mkdir -p "$OUT"
for round in $(seq "${ROUNDS:-2}"); do
    for mode in off on; do
        WRING_HTTP_NODELAY=$mode $W serve --device cpu --port 8300 > "$OUT/serve-$mode-$round.log" 2>&1 &
        pid=$!
        for _ in $(seq 120); do curl -sf http://127.0.0.1:8300/v1/models > /dev/null 2>&1 && break; sleep 1; done
        for c in 1 4; do
            j=$OUT/$mode-c$c-$round.json
            $W bench serve --base-url http://127.0.0.1:8300 --corpus humaneval --corpus-dir "$corp" \
                --concurrency $c --num-prompts 8 --runs 1 --warmup 1 --max-tokens 64 --no-progress \
                --label "nodelay-$mode" --result-json "$j" > "$OUT/$mode-c$c-$round.log" 2>&1
            python3 -c "import json;r=json.load(open('$j'))['results'][0];print('nodelay $mode c=$c round $round:', round(r['output_throughput_median'],1), 'tok/s, median TTFT', round(r['median_ttft_ms'],1), 'ms, median longest gap', round(r['median_stream_max_gap_ms'],1), 'ms, p99 gap', round(r['p99_itl_ms'],1), 'ms')"
        done
        kill $pid; wait $pid 2>/dev/null
    done
done | tee "$OUT/summary.txt"
