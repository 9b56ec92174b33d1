#!/usr/bin/env bash
# CPU prefill throughput, wring vs llama.cpp, side by side on this machine.
#
#   scripts/bench_prefill_cpu.sh                   # 512, 2048 and 4096 prompt tokens, 3 rounds
#   LENGTHS="512 2048" ROUNDS=5 scripts/bench_prefill_cpu.sh
#
# For each length and round it runs, interleaved (A B A B ...):
#   wring:     wring generate --max-tokens 1 --prompt <N tokens>   (prefill tok/s = N / ttft)
#   llama.cpp: llama-bench -p N -n 0 -t THREADS -r 1               (its pp tok/s)
# on the default model (SmolLM2-135M Q4_1 GGUF) with wring's default --cpu-weights (auto).
# The prompt is N pseudo-random common English words (one token each; the script checks
# the count wring reports). Prints one line per run and a summary table (medians and the
# ratio wring / llama.cpp). The box may be shared: the load average is printed with each run.
#
# Env: WRING (binary, default target/release/wring; built if missing), LLAMA_BENCH (default
#      ~/.cache/wring/llama.cpp/llama-bench; scripts/llamacpp/build.sh builds it), MODEL
#      (default $WRING_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf), THREADS (default nproc),
#      LENGTHS, ROUNDS, WRING_ARGS (extra flags for wring generate), LLAMA_ARGS (extra flags
#      for llama-bench: `--repack 0` where its AMX kernels crash, as on an AMX-advertising VM).
set -euo pipefail
cd "$(dirname "$0")/.."

home="${WRING_HOME:-$HOME/.cache/wring}"
wring="${WRING:-target/release/wring}"
llama_bench="${LLAMA_BENCH:-$home/llama.cpp/llama-bench}"
model="${MODEL:-$home/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
threads="${THREADS:-$(nproc)}"
lengths="${LENGTHS:-512 2048 4096}"
rounds="${ROUNDS:-3}"

if [[ ! -x "$wring" ]]; then cargo build --release -p wring; fi
[[ -x "$llama_bench" ]] || { echo "no llama-bench at $llama_bench: run scripts/llamacpp/build.sh" >&2; exit 1; }
[[ -f "$model" ]] || "$wring" pull

# prompt_of N: N words that are one token each, from a fixed pseudo-random sequence.
. scripts/prefill_prompt.sh

declare -A wring_tps llama_tps
echo "# $(date -u +%FT%TZ) $(uname -n) threads=$threads model=$(basename "$model")"
echo "# wring: $("$wring" --version 2>/dev/null || echo "$wring") $(git rev-parse --short HEAD 2>/dev/null)"
for n in $lengths; do
  prompt="$(prompt_of "$n")"
  for r in $(seq 1 "$rounds"); do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    # wring: the stats line "[N prompt + 1 generated tokens, ..., ttft Xs, ...]".
    stats="$("$wring" generate --model "$model" --max-tokens 1 --prompt "$prompt" ${WRING_ARGS:-} 2>&1 >/dev/null | grep -o '\[[0-9]* prompt.*ttft [0-9.]*s' | tail -1)"
    got="$(sed -E 's/^\[([0-9]+) prompt.*/\1/' <<<"$stats")"
    ttft="$(sed -E 's/.*ttft ([0-9.]+)s/\1/' <<<"$stats")"
    tps="$(awk -v n="$got" -v t="$ttft" 'BEGIN { printf "%.1f", n / t }')"
    [[ "$got" == "$n" ]] || echo "# note: the prompt is $got tokens, not $n" >&2
    wring_tps[$n]+="$tps "
    echo "wring     n=$n round=$r prompt_tokens=$got ttft=${ttft}s tok/s=$tps load=$load"
    load="$(cut -d' ' -f1 /proc/loadavg)"
    # llama-bench: its markdown table's last column is "t/s" as "mean ± sd".
    line="$("$llama_bench" -m "$model" -p "$n" -n 0 -t "$threads" -r 1 ${LLAMA_ARGS:-} 2>/dev/null | grep "pp$n" | tail -1)" ||
      { echo "llama-bench failed (exit $?; a crash in its AMX kernels? try LLAMA_ARGS='--repack 0')" >&2; exit 1; }
    ltps="$(awk -F'|' '{ print $(NF-1) }' <<<"$line" | awk '{ print $1 }')"
    llama_tps[$n]+="$ltps "
    echo "llama.cpp n=$n round=$r tok/s=$ltps load=$load"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo
echo "| prompt tokens | wring tok/s (median of $rounds) | llama.cpp tok/s (median of $rounds) | wring / llama.cpp |"
echo "|---:|---:|---:|---:|"
for n in $lengths; do
  w="$(median <<<"${wring_tps[$n]}")"
  l="$(median <<<"${llama_tps[$n]}")"
  echo "| $n | $w | $l | $(awk -v a="$w" -v b="$l" 'BEGIN { printf "%.2f", a / b }') |"
done
