#!/usr/bin/env bash
# The CPU speculation table: output tokens/s per corpus for no-spec, ngram and suffix
# (K 4/6/8/12, padded and unpadded), dynamic and adaptive K, with acceptance rate
# and mean accepted length per verify step, plus the geometric mean over corpora.
# The suffix global tree is reset before every cell (cold); pass --warm to keep it.
#
#   scripts/bench_spec_cpu.sh                      # full table (slow on 2 cores)
#   PROMPTS=2 MAX_TOKENS=32 CONC=1,8 scripts/bench_spec_cpu.sh   # brief run
#   CONFIGS=none,suffix:fixed:8 scripts/bench_spec_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PROMPTS="${PROMPTS:-8}"
MAX_TOKENS="${MAX_TOKENS:-128}"
CONC="${CONC:-1,8,32}"
DEFAULT_CONFIGS="none,ngram:fixed:8,ngram:fixed:8:nopad"
for k in 4 6 8 12; do
  DEFAULT_CONFIGS+=",suffix:fixed:$k,suffix:fixed:$k:nopad"
done
DEFAULT_CONFIGS+=",suffix:dynamic,suffix:adaptive"
CONFIGS="${CONFIGS:-$DEFAULT_CONFIGS}"

# The dev profile is optimised (see the root Cargo.toml) and shared with the tests,
# so this reuses their build; PROFILE=release for a separate release build.
PROFILE="${PROFILE:-dev}"
cargo build --profile "$PROFILE" -p wring-engine --example spec_bench >&2
DIR=target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
echo "# bench_spec_cpu: $(date -u +%FT%TZ), $(nproc) cores, prompts/corpus=$PROMPTS, max_tokens=$MAX_TOKENS, concurrency=$CONC"
echo "# cells: output tok/s (acc = accepted/real draft tokens, len = accepted tokens per verify step)"
exec "$DIR/examples/spec_bench" \
  --prompts "$PROMPTS" --max-tokens "$MAX_TOKENS" --concurrency "$CONC" --configs "$CONFIGS" "$@"
