#!/usr/bin/env bash
# Is `--speculative suffix` (the CPU default: unpadded, adaptive K) ever
# slower than no speculation on this CPU? `wring tune` on all seven corpora at concurrency
# 1, 8 and 64, default weights (`--cpu-weights auto`), greedy, 64 output tokens. Run it on a
# quiet machine (nothing else compiling); writes $OUT/c{1,8,64}/report.md.
#   OUT=results/<date>-cpu-spec-defaults scripts/tune_cpu_spec_defaults.sh
set -uo pipefail
cd "$(dirname "$0")/.."
W=${WRING:-target/release/wring}
OUT=${OUT:-results/$(date +%F)-cpu-spec-defaults}
CORPORA=${CORPUS_DIR:-../shared/corpora}
mkdir -p "$OUT"
base=(--max-tokens 64 --runs 1 --max-spread 1 --corpus-dir "$CORPORA" --no-progress)
common=(--configs nospec,suffix --corpus all "${base[@]}")
# PAIRED=1: one `wring tune` per corpus, the two configurations back to back and their order
# alternating between corpora, so a drift in the machine's speed (a shared 2-core VM drifts by
# tens of percent over minutes) lands on both sides of each ratio instead of on one. FLIP=1
# starts with the other order: a pass with FLIP=0 and one with FLIP=1 run every corpus A B B A
# (scripts/spec_defaults_table.py takes both passes' folders and combines them).
if [ -n "${PAIRED:-}" ]; then
    for spec in ${LEVELS:-"1:3:1:6000" "8:8:2:6000" "64:64:4:1500"}; do
        IFS=: read -r c n warm chars <<<"$spec"
        t0=$(date +%s); i=0; mkdir -p "$OUT/c$c"
        for corpus in sharegpt humaneval mbpp swebench wildchat lmsys mix; do
            if (( (i + ${FLIP:-0}) % 2 )); then cfgs=suffix,nospec; else cfgs=nospec,suffix; fi
            i=$((i + 1))
            "$W" tune "${base[@]}" --corpus "$corpus" --configs "$cfgs" --concurrency "$c" \
                --num-prompts "$n" --warmup "$warm" --max-prompt-chars "$chars" \
                --out "$OUT/c$c/$corpus" > "$OUT/c$c/$corpus.log" 2>&1 || echo "c=$c $corpus failed"
            rm -rf "$OUT/c$c/$corpus/logs"
        done
        echo "== c=$c n=$n paired in $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    exit 0
fi
for spec in ${LEVELS:-"1:3:1:6000" "8:8:2:6000" "64:64:4:1500"}; do
    IFS=: read -r c n warm chars <<<"$spec"
    t0=$(date +%s)
    "$W" tune "${common[@]}" --concurrency "$c" --num-prompts "$n" --warmup "$warm" \
        --max-prompt-chars "$chars" --out "$OUT/c$c" > "$OUT/c$c.log" 2>&1
    echo "== c=$c n=$n rc=$? in $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -rf "$OUT/c$c/logs"
    sed -n '/^| configuration/,/^$/p' "$OUT/c$c/report.md"
done
