#!/usr/bin/env bash
# A prompt prefilled alone on the CPU: time to first token of two wring builds side by side
# (OLD, NEW: binaries) and llama.cpp's llama-bench, interleaved per length and round.
#   OLD=/tmp/wring-old scripts/bench_prefill_alone.sh        # NEW defaults to target/release/wring
# Env: LENGTHS (default "512 2048 4096"), ROUNDS (2), THREADS (2), MODEL, LLAMA_BENCH.
# Prompts: N one-token words from bench_prefill_cpu.sh's fixed pseudo-random sequence.
set -uo pipefail
cd "$(dirname "$0")/.."
home=${WRING_HOME:-$HOME/.cache/wring}
model=${MODEL:-$home/models/SmolLM2-135M-Instruct.Q4_1.gguf}
lb=${LLAMA_BENCH:-$home/llama.cpp/llama-bench}
old=${OLD:?OLD=path to the other wring binary}
new=${NEW:-target/release/wring}
. scripts/prefill_prompt.sh
for round in $(seq 1 "${ROUNDS:-2}"); do
  for n in ${LENGTHS:-512 2048 4096}; do
    p="$(prompt_of "$n")"
    for b in old new; do
      bin=$old; [ $b = new ] && bin=$new
      t=$("$bin" generate --model "$model" --max-tokens 1 --prompt "$p" 2>&1 | grep -o 'ttft [0-9.]*' | grep -o '[0-9.]*$')
      echo "$b n=$n ttft=$t tok/s=$(awk -v n="$n" -v t="$t" 'BEGIN{printf "%.1f", n/t}') load=$(cut -d' ' -f1 /proc/loadavg)"
    done
    l=$("$lb" -m "$model" -p "$n" -n 0 -t "${THREADS:-2}" -r 1 2>/dev/null | grep "pp$n" | awk -F'|' '{print $(NF-1)}' | awk '{print $1}')
    echo "llama.cpp n=$n tok/s=$l load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
