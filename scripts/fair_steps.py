#!/usr/bin/env python3
"""Fair steps, measured: a few short streams decode while one long prompt arrives.

Starts `--streams` streaming completions (short prompts, `--stream-tokens` each, ignore_eos), waits
until every one has produced tokens, then sends one `--long-tokens`-token prompt (exact length: the
server's /tokenize cuts a corpus text to it, and the ids are sent as the prompt). Prints, per short
stream, the longest and the median gap between two of its chunks, and the long prompt's
time to first token; with --json, the same as one JSON object.

Standard library only. Against a running server, e.g.
    wring serve --port 8011 &
    python3 scripts/fair_steps.py --url http://127.0.0.1:8011
"""

import argparse
import json
import statistics
import threading
import time
import urllib.request

FILLER = (
    "The history of the printing press begins in the fifteenth century, when movable metal type "
    "made it possible to reproduce text quickly and cheaply. Within fifty years presses operated "
    "in more than two hundred cities, and the number of books in Europe grew from thousands to "
    "millions. Scholars argue about the consequences: literacy rose, vernacular languages gained "
    "standard spellings, and scientific results could be checked by readers far away. "
)


def post(url, body, stream=False):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    return urllib.request.urlopen(req, timeout=600)


def model_id(base):
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        return json.load(r)["data"][0]["id"]


def long_prompt_ids(base, model, n):
    text = FILLER * (n // 60 + 2)
    with post(base + "/tokenize", {"model": model, "prompt": text}) as r:
        ids = json.load(r)["tokens"]
    if len(ids) < n:
        raise SystemExit(f"filler too short: {len(ids)} < {n} tokens")
    return ids[:n]


def stream(base, body, out, started):
    """Streams one completion; appends each content chunk's arrival time to out['times']."""
    body = dict(body, stream=True)
    t0 = time.perf_counter()
    out["sent"] = t0
    with post(base + "/v1/completions", body) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if any(c.get("text") for c in chunk.get("choices", [])):
                out["times"].append(time.perf_counter())
                if started is not None:
                    started.set()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--stream-tokens", type=int, default=400)
    ap.add_argument("--long-tokens", type=int, default=2000)
    ap.add_argument("--long-max-tokens", type=int, default=8)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    base = a.url.rstrip("/")
    model = model_id(base)
    ids = long_prompt_ids(base, model, a.long_tokens)

    outs, threads, started = [], [], []
    for i in range(a.streams):
        out, ev = {"times": []}, threading.Event()
        body = {
            "model": model,
            "prompt": f"Write a long story about a lighthouse keeper number {i}.",
            "max_tokens": a.stream_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        t = threading.Thread(target=stream, args=(base, body, out, ev))
        t.start()
        outs.append(out)
        threads.append(t)
        started.append(ev)
    for ev in started:
        ev.wait(120)
    time.sleep(0.5)  # every stream is decoding now
    long_out = {"times": []}
    long_body = {
        "model": model,
        "prompt": ids,
        "max_tokens": a.long_max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    lt = threading.Thread(target=stream, args=(base, long_body, long_out, None))
    lt.start()
    lt.join()
    for t in threads:
        t.join()

    ttft = long_out["times"][0] - long_out["sent"]
    long_done = long_out["times"][-1]
    per_stream = []
    for o in outs:
        gaps = [b - a for a, b in zip(o["times"], o["times"][1:])]
        # The gaps while the long prompt was in the engine: from its arrival to its last token.
        during = [
            b - a
            for a, b in zip(o["times"], o["times"][1:])
            if b >= long_out["sent"] and a <= long_done
        ]
        per_stream.append(
            {
                "chunks": len(o["times"]),
                "max_gap_ms": 1000 * max(gaps),
                "median_gap_ms": 1000 * statistics.median(gaps),
                "median_gap_during_prefill_ms": 1000 * statistics.median(during) if during else None,
                "finished_after_long_prompt": o["times"][-1] > long_done,
            }
        )
    result = {
        "label": a.label,
        "long_prompt_tokens": len(ids),
        "long_ttft_s": ttft,
        "streams": per_stream,
        "max_gap_ms": max(s["max_gap_ms"] for s in per_stream),
        "median_gap_ms": statistics.median(s["median_gap_ms"] for s in per_stream),
    }
    if a.json:
        print(json.dumps(result))
        return
    print(
        f"{a.label or 'run'}: long prompt {len(ids)} tokens, TTFT {ttft:.2f} s; "
        f"short streams: longest gap {result['max_gap_ms']:.0f} ms, "
        f"median gap {result['median_gap_ms']:.1f} ms"
    )
    for i, s in enumerate(per_stream):
        during = s["median_gap_during_prefill_ms"]
        print(
            f"  stream {i}: {s['chunks']} chunks, max gap {s['max_gap_ms']:.0f} ms, median "
            f"{s['median_gap_ms']:.1f} ms, median while the long prompt ran "
            f"{'-' if during is None else f'{during:.1f}'} ms"
            + ("" if s["finished_after_long_prompt"] else "  (finished before the long prompt did)")
        )


if __name__ == "__main__":
    main()
