#!/usr/bin/env bash
# Issue 2's measurement: wring serve vs llama.cpp's llama-server on this machine's CPU, the same
# model (SmolLM2-135M-Instruct Q4_1 GGUF), closed loop at concurrency 1, 8 and 32, 256 max tokens,
# prompts from the real corpora (`mix`), both driven by the same client (`wring bench serve`).
# Writes one raw result JSON per (server, concurrency) and a markdown table to $OUT/table.md.
#
# Env (defaults): OUT=bench-out/cpu_vs_llamacpp  MODEL=~/.cache/wring/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   WRING=target/release/wring  LLAMA_SERVER=~/.cache/wring/llama.cpp/llama-server (built by
#   scripts/llamacpp/build.sh)  CONCURRENCY="1 8 32"  MAX_TOKENS=256  NUM_PROMPTS=32  RUNS=1  WARMUP=2
#   CORPUS=mix  MAX_PROMPT_CHARS=2000 (llama-server splits -c over its slots: long prompts would not fit)
#   PARALLEL=8 (llama-server slots)  CTX=8192  THREADS=$(nproc)  WRING_SERVE_ARGS=""  SERVERS="llama.cpp wring"
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-bench-out/cpu_vs_llamacpp}"
MODEL="${MODEL:-$HOME/.cache/wring/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
WRING="${WRING:-target/release/wring}"
LLAMA_SERVER="${LLAMA_SERVER:-$HOME/.cache/wring/llama.cpp/llama-server}"
CONCURRENCY="${CONCURRENCY:-1 8 32}"
MAX_TOKENS="${MAX_TOKENS:-256}"
NUM_PROMPTS="${NUM_PROMPTS:-32}"
RUNS="${RUNS:-1}"
WARMUP="${WARMUP:-2}"
CORPUS="${CORPUS:-mix}"
MAX_PROMPT_CHARS="${MAX_PROMPT_CHARS:-2000}"
PARALLEL="${PARALLEL:-8}"
CTX="${CTX:-8192}"
THREADS="${THREADS:-$(nproc)}"
SERVERS="${SERVERS:-llama.cpp wring}"
read -r -a WRING_SERVE_ARGS <<<"${WRING_SERVE_ARGS:-}"

[[ -x "$WRING" ]] || { echo "missing $WRING (cargo build --release -p wring, or set WRING)" >&2; exit 1; }
[[ -f "$MODEL" ]] || { echo "missing model $MODEL" >&2; exit 1; }
mkdir -p "$OUT/logs"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_healthy() { # url pid
  for _ in $(seq 1 600); do
    kill -0 "$2" 2>/dev/null || { echo "server exited before it was healthy" >&2; return 1; }
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "server not healthy after 300 s" >&2; return 1
}

server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap stop_server EXIT

for server in $SERVERS; do
  port="$(free_port)"
  case "$server" in
    llama.cpp)
      [[ -x "$LLAMA_SERVER" ]] || { echo "missing $LLAMA_SERVER (run scripts/llamacpp/build.sh)" >&2; exit 1; }
      "$LLAMA_SERVER" -m "$MODEL" --parallel "$PARALLEL" -c "$CTX" -t "$THREADS" --host 127.0.0.1 \
        --port "$port" --metrics >"$OUT/logs/llama.cpp.log" 2>&1 &
      ;;
    wring)
      "$WRING" serve --model "$MODEL" --port "$port" "${WRING_SERVE_ARGS[@]}" >"$OUT/logs/wring.log" 2>&1 &
      ;;
    *) echo "unknown server $server" >&2; exit 1 ;;
  esac
  server_pid=$!
  wait_healthy "http://127.0.0.1:$port" "$server_pid"
  for c in $CONCURRENCY; do
    echo "== $server, concurrency $c"
    "$WRING" bench serve --base-url "http://127.0.0.1:$port" --corpus "$CORPUS" \
      --corpus-dir "${WRING_SHARED:-../shared}/corpora" --concurrency "$c" --max-tokens "$MAX_TOKENS" \
      --num-prompts "$NUM_PROMPTS" --runs "$RUNS" --warmup "$WARMUP" --max-prompt-chars "$MAX_PROMPT_CHARS" \
      --device cpu --label "$server" --no-progress --result-json "$OUT/${server}_c${c}.json"
  done
  stop_server
done

python3 - "$OUT" $CONCURRENCY <<'PY'
import json, os, sys
out, levels = sys.argv[1], sys.argv[2:]
rows, tps = [], {}
for server in ("llama.cpp", "wring"):
    for c in levels:
        path = os.path.join(out, f"{server}_c{c}.json")
        if not os.path.exists(path):
            continue
        f = json.load(open(path))
        r = f["results"][0]
        tps[(server, c)] = r["output_throughput_median"]
        fmt = lambda v: "–" if v is None else f"{v:.1f}"
        rows.append(f"| {server} | {c} | {r['output_throughput_median']:.1f} ± {r['output_throughput_mad']:.1f} | "
                    f"{r['request_throughput']:.2f} | {fmt(r['median_ttft_ms'])} | {fmt(r['median_tpot_ms'])} | "
                    f"{fmt(r['p99_itl_ms'])} | {r['completed']} / {r['failed_all_runs']} |")
if not rows:
    sys.exit(f"no results in {out}")
meta = f["meta"]
lines = [
    f"Model {meta['model_id']}; machine {meta['machine']['cpu_model']} ({meta['machine']['cpu_cores']} cores); "
    f"corpus {f['results'][0]['corpus']}, {meta['num_prompts']} prompts, max_tokens {meta['max_tokens']}, "
    f"temperature {meta['temperature']}, {meta['runs']} run(s), commit {meta['commit']}, {meta['date']}.",
    "",
    "| server | concurrency | output tok/s | req/s | TTFT median ms | TPOT median ms | ITL p99 ms | completed / failed |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
    "",
]
for c in levels:
    if ("wring", c) in tps and ("llama.cpp", c) in tps and tps[("llama.cpp", c)] > 0:
        lines.append(f"- concurrency {c}: wring / llama.cpp = {tps[('wring', c)] / tps[('llama.cpp', c)]:.2f}×")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "table: $OUT/table.md"
