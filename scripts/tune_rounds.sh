#!/usr/bin/env bash
# Arms of one-corpus `wring tune` runs in rotating order, for ratios that resolve a few percent
# on a noisy CPU: round r runs the arms starting at arm r mod n, so no arm always goes first.
# Each ARM is NAME=BINARY:CONFIGS[:ENV=V,ENV=V...]; every run appends "NAME<round> <tok/s>" to
# $OUT (the corpus row of the tune's summary). scripts/round_ratios.py turns that file into
# per-round ratios and their geometric mean.
#   CORPUS=sharegpt C=64 N=64 WARMUP=4 CHARS=1500 ROUNDS=8 OUT=rounds.txt \
#     scripts/tune_rounds.sh none=target/release/wring:nospec suffix=target/release/wring:suffix
#   scripts/round_ratios.py rounds.txt none suffix
set -uo pipefail
[ $# -gt 0 ] || { sed -n '2,10p' "$0"; exit 2; }
CORPUS=${CORPUS:-sharegpt} C=${C:-64} N=${N:-64} WARMUP=${WARMUP:-4} CHARS=${CHARS:-1500}
OUT=${OUT:?OUT=file the rounds are appended to} TOKENS=${TOKENS:-64}
CORPUS_DIR=${CORPUS_DIR:-../shared/corpora}
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
run() { # name round binary configs env
    local name=$1 round=$2 bin=$3 cfg=$4 envs=${5:-}
    env ${envs//,/ } "$bin" tune --max-tokens "$TOKENS" --runs 1 --max-spread 1 --corpus-dir "$CORPUS_DIR" \
        --no-progress --corpus "$CORPUS" --configs "$cfg" --concurrency "$C" --num-prompts "$N" \
        --warmup "$WARMUP" --max-prompt-chars "$CHARS" --out "$tmp/$name" > "$tmp/$name.log" 2>&1
    echo "$name$round $(grep "^$CORPUS" "$tmp/$name.log" | tail -1 | awk '{print $3}')" | tee -a "$OUT"
    rm -rf "${tmp:?}/$name"
}
arms=("$@")
for r in $(seq 1 "${ROUNDS:-8}"); do
    for j in $(seq 0 $((${#arms[@]} - 1))); do
        a=${arms[$(( (j + r) % ${#arms[@]} ))]}
        IFS=: read -r bin cfg envs <<<"${a#*=}"
        run "${a%%=*}" "$r" "$bin" "$cfg" "$envs"
    done
done
