#!/usr/bin/env bash
# wring serve vs llama.cpp's llama-server on this machine's CPU, the same
# model (SmolLM2-135M-Instruct Q4_1 GGUF), closed loop at concurrency 1, 8 and 32, 256 max tokens,
# prompts from the real corpora (`mix`), both driven by the same client (`wring bench serve`).
# Writes one raw result JSON per (server, concurrency) and a markdown table to $OUT/table.md.
#
# Env (defaults): OUT=bench-out/cpu_vs_llamacpp  MODEL=~/.cache/wring/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   WRING=target/release/wring  LLAMA_SERVER=~/.cache/wring/llama.cpp/llama-server (built by
#   scripts/llamacpp/build.sh)  CONCURRENCY="1 8 32"  MAX_TOKENS=256  NUM_PROMPTS=32  RUNS=1  WARMUP=2
#   CORPUS=mix  MAX_PROMPT_CHARS=2000 (llama-server splits -c over its slots: long prompts would not fit)
#   CTX_PER_SLOT=4096 (llama-server's -c is split over its --parallel slots)  THREADS=$(nproc)
#   TABLE_ONLY= (set: only rebuild $OUT/table.md from the JSON already there)  WRING_SERVE_ARGS=""  SERVERS="llama.cpp wring wring-f32" (wring: the default --cpu-weights auto; wring-f32/-q8/-q4: --cpu-weights f32/q8/q4; wring-suffix: the defaults plus --speculative suffix)
#   LLAMA_ARGS="" (extra llama-server flags: `--no-repack` where its AMX kernels crash, as on an AMX-advertising VM)
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-bench-out/cpu_vs_llamacpp}"
MODEL="${MODEL:-$HOME/.cache/wring/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
WRING="${WRING:-target/release/wring}"
LLAMA_SERVER="${LLAMA_SERVER:-$HOME/.cache/wring/llama.cpp/build/bin/llama-server}"
CONCURRENCY="${CONCURRENCY:-1 8 32}"
MAX_TOKENS="${MAX_TOKENS:-256}"
NUM_PROMPTS="${NUM_PROMPTS:-32}"
RUNS="${RUNS:-1}"
WARMUP="${WARMUP:-2}"
CORPUS="${CORPUS:-mix}"
MAX_PROMPT_CHARS="${MAX_PROMPT_CHARS:-2000}"
CTX_PER_SLOT="${CTX_PER_SLOT:-4096}"
THREADS="${THREADS:-$(nproc)}"
SERVERS="${SERVERS:-llama.cpp wring wring-f32}"
read -r -a WRING_SERVE_ARGS <<<"${WRING_SERVE_ARGS:-}"
read -r -a LLAMA_ARGS <<<"${LLAMA_ARGS:-}"

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

# Each (concurrency, server) cell gets a fresh server: llama-server with --parallel equal to the
# concurrency (and CTX_PER_SLOT tokens of context per slot), wring with --max-num-seqs likewise.
# Servers alternate within a concurrency level so drift on a shared box hits both alike.
for c in $CONCURRENCY; do
  [[ -n "${TABLE_ONLY:-}" ]] && break
  for server in $SERVERS; do
    port="$(free_port)"
    case "$server" in
      llama.cpp)
        [[ -x "$LLAMA_SERVER" ]] || { echo "missing $LLAMA_SERVER (run scripts/llamacpp/build.sh)" >&2; exit 1; }
        "$LLAMA_SERVER" -m "$MODEL" --parallel "$c" -c "$((c * CTX_PER_SLOT))" -t "$THREADS" --host 127.0.0.1 \
          --port "$port" --metrics "${LLAMA_ARGS[@]}" >"$OUT/logs/llama.cpp_c$c.log" 2>&1 &
        ;;
      wring)
        "$WRING" serve --model "$MODEL" --port "$port" --max-num-seqs "$c" "${WRING_SERVE_ARGS[@]}" \
          >"$OUT/logs/wring_c$c.log" 2>&1 &
        ;;
      wring-suffix)
        "$WRING" serve --model "$MODEL" --port "$port" --max-num-seqs "$c" --speculative suffix \
          "${WRING_SERVE_ARGS[@]}" >"$OUT/logs/${server}_c$c.log" 2>&1 &
        ;;
      wring-f32 | wring-q8 | wring-q4)
        "$WRING" serve --model "$MODEL" --port "$port" --max-num-seqs "$c" --cpu-weights "${server#wring-}" \
          "${WRING_SERVE_ARGS[@]}" >"$OUT/logs/${server}_c$c.log" 2>&1 &
        ;;
      *) echo "unknown server $server (llama.cpp, wring, wring-suffix, wring-f32, wring-q8, wring-q4)" >&2; exit 1 ;;
    esac
    server_pid=$!
    wait_healthy "http://127.0.0.1:$port" "$server_pid"
    echo "== $server, concurrency $c"
    "$WRING" bench serve --base-url "http://127.0.0.1:$port" --corpus "$CORPUS" \
      --corpus-dir "${WRING_SHARED:-../shared}/corpora" --concurrency "$c" --max-tokens "$MAX_TOKENS" \
      --num-prompts "$NUM_PROMPTS" --runs "$RUNS" --warmup "$WARMUP" --max-prompt-chars "$MAX_PROMPT_CHARS" \
      --device cpu --label "$server" --no-progress --result-json "$OUT/${server}_c${c}.json"
    # Peak resident memory of the server process over its whole life (kB).
    awk '/VmHWM/ {print $2}' "/proc/$server_pid/status" >"$OUT/${server}_c${c}.rss_kb" || true
    stop_server
  done
done

python3 - "$OUT" "$SERVERS" $CONCURRENCY <<'PY'
import json, os, sys
out = sys.argv[1]
rows, tps = [], {}
servers = sys.argv[2].split()
levels = sys.argv[3:]
for server in servers:
    for c in levels:
        path = os.path.join(out, f"{server}_c{c}.json")
        if not os.path.exists(path):
            continue
        f = json.load(open(path))
        r = f["results"][0]
        tps[(server, c)] = r["output_throughput_median"]
        fmt = lambda v: "–" if v is None else f"{v:.1f}"
        rss_path = os.path.join(out, f"{server}_c{c}.rss_kb")
        rss = open(rss_path).read().strip() if os.path.exists(rss_path) else ""
        rss = f"{int(rss) / 1024:.0f}" if rss.isdigit() else "–"
        rows.append(f"| {server} | {c} | {r['output_throughput_median']:.1f} ± {r['output_throughput_mad']:.1f} | "
                    f"{r['request_throughput']:.2f} | {fmt(r['median_ttft_ms'])} | {fmt(r['median_tpot_ms'])} | "
                    f"{fmt(r['p99_itl_ms'])} | {rss} | {r['completed']} / {r['failed_all_runs']} |")
if not rows:
    sys.exit(f"no results in {out}")
meta = f["meta"]
lines = [
    f"Model {meta['model_id']}; machine {meta['machine']['cpu_model']} ({meta['machine']['cpu_cores']} cores); "
    f"corpus {f['results'][0]['corpus']}, {meta['num_prompts']} prompts, max_tokens {meta['max_tokens']}, "
    f"temperature {meta['temperature']}, {meta['runs']} run(s), commit {meta['commit']}, {meta['date']}.",
    "",
    "| server | concurrency | output tok/s | req/s | TTFT median ms | TPOT median ms | ITL p99 ms | peak RSS MiB | completed / failed |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    *rows,
    "",
]
for c in levels:
    for w in [s for s in servers if s != "llama.cpp"]:
        if (w, c) in tps and ("llama.cpp", c) in tps and tps[("llama.cpp", c)] > 0:
            lines.append(f"- concurrency {c}: {w} / llama.cpp = {tps[(w, c)] / tps[('llama.cpp', c)]:.2f}×")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "table: $OUT/table.md"
