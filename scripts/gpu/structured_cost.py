#!/usr/bin/env python3
"""What a grammar-constrained step costs on a running wring server.

The same chat prompts are sent four ways at each concurrency: plain; with a `response_format`
json_schema (greedy: the grammar masks are computed on the host beside the step and applied
inside the device argmax); as a forced tool call whose arguments follow the same schema; and
json_schema with logprobs, which brings the logit rows back and masks them on the host (the
path every constrained step took before the masked argmax: the baseline in the same run).
Prints output tokens/s for each and its ratio to plain, one line a concurrency, and writes a
JSON list of `{"model", "concurrency", "mode", "speculative", "tok_s", ...}` to the path given.
At a concurrency of 2 or more it also sends plain requests on half the streams beside
json_schema ones on the other half: the plain streams' tokens/s each against all-plain
streams (mode `plain_beside_json_schema`), since a constrained request must not slow the
unconstrained ones beside it.
Then checks that each constrained answer is the one the same request gets with logprobs, and
prints the server's constrained-step and grammar-draft counters. Standard library only (the device has no
network).

    structured_cost.py BASE_URL OUT_JSON [--model NAME] [--speculative off|suffix] [C ...]
"""
import argparse
import json
import sys
import threading
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "city": {"type": "string"},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "city", "age", "hobbies"],
}
PROMPTS = [
    "Invent a person who lives in {c} and describe them as JSON.",
    "Give me a JSON record of a fictional {c} resident with hobbies.",
    "Describe, as JSON, someone from {c}: name, city, age, hobbies.",
    "Make up a character from {c}; answer only with JSON.",
]
CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Pune", "Quito", "Perth"]


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


MODES = ("plain", "json_schema", "tools", "json_schema_host_mask")
TOOL = {"type": "function", "function": {"name": "record_person",
                                         "description": "Store a person's record.",
                                         "parameters": SCHEMA}}


def body_of(i, mode):
    body = {
        "messages": [{"role": "user", "content": PROMPTS[i % 4].format(c=CITIES[i % 8])}],
        "max_tokens": 128, "temperature": 0,
    }
    if mode in ("json_schema", "json_schema_host_mask"):
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "person", "schema": SCHEMA}}
    if mode == "json_schema_host_mask":
        body |= {"logprobs": True, "top_logprobs": 1}
    if mode == "tools":
        body |= {"tools": [TOOL],
                 "tool_choice": {"type": "function", "function": {"name": "record_person"}}}
    return body


def same_with_logprobs(base, count):
    """How many of `count` constrained answers equal the same request's with logprobs."""
    same = 0
    for i in range(count):
        a = post(base, body_of(i, "json_schema"))["choices"][0]["message"]["content"]
        b = post(base, body_of(i, "json_schema_host_mask"))
        same += a == b["choices"][0]["message"]["content"]
    return same


def batch(base, n, mode, requests, beside=None):
    """Output tokens of `requests` requests of `mode` over `n` streams, and the seconds they
    took. With `beside`, as many more streams send that mode at the same time (their
    tokens are not counted; they stop once the counted streams are done)."""
    out, lock = [], threading.Lock()
    work = list(range(requests))
    done = threading.Event()

    def worker():
        while True:
            with lock:
                if not work:
                    return
                i = work.pop()
            r = post(base, body_of(i, mode))
            with lock:
                out.append(r["usage"]["completion_tokens"])

    def neighbour(j):
        i = j
        while not done.is_set():
            post(base, body_of(i, beside))
            i += n

    others = [threading.Thread(target=neighbour, args=(j,)) for j in range(n if beside else 0)]
    for t in others:
        t.start()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    done.set()
    for t in others:
        t.join()
    return sum(out), dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--model", default="default")
    ap.add_argument("--speculative", default="off")
    ap.add_argument("concurrency", nargs="*", type=int)
    args = ap.parse_intermixed_args()
    base = args.base
    rows = []
    for n in args.concurrency or [1, 32]:
        reqs = 8 if n == 1 else 2 * n
        for mode in MODES:  # warm-up (graphs, grammar compile caches)
            batch(base, n, mode, min(reqs, n))
        res = {}
        for mode in MODES:
            toks, dt = batch(base, n, mode, reqs)
            res[mode] = toks / dt
            rows.append({"model": args.model, "concurrency": n, "mode": mode,
                         "speculative": args.speculative, "tok_s": round(toks / dt, 1),
                         "requests": reqs, "output_tokens": toks, "seconds": round(dt, 3)})
        print(f"structured {args.model} spec={args.speculative} c={n}: "
              + ", ".join(f"{m} {res[m]:.0f} tok/s (x{res[m] / res['plain']:.2f})" for m in MODES),
              flush=True)
        save(args.out, rows)
    # A constrained request must not slow the plain ones beside it: plain requests on half
    # the streams, json_schema on the other half, against plain on every stream (the same
    # batch): the plain streams' tokens per second each.
    for n in [c for c in (args.concurrency or [1, 32]) if c >= 2]:
        half = n // 2
        reqs = 2 * n
        batch(base, half, "plain", half, beside="json_schema")
        toks, dt = batch(base, n, "plain", reqs)
        alone = toks / dt / n
        toks, dt = batch(base, half, "plain", reqs // 2, beside="json_schema")
        mixed = toks / dt / half
        rows.append({"model": args.model, "concurrency": n, "mode": "plain_beside_json_schema",
                     "speculative": args.speculative, "tok_s_per_stream": round(mixed, 1),
                     "plain_tok_s_per_stream": round(alone, 1), "requests": reqs // 2,
                     "output_tokens": toks, "seconds": round(dt, 3)})
        print(f"structured {args.model} spec={args.speculative} c={n}: plain streams beside "
              f"json_schema ones {mixed:.1f} tok/s each, all plain {alone:.1f} "
              f"(x{mixed / alone:.2f})", flush=True)
        save(args.out, rows)
    same = same_with_logprobs(base, 8)
    print(f"structured: {same}/8 constrained answers equal the same request with logprobs", flush=True)
    rows.append({"check": "same_with_logprobs", "equal": same, "of": 8})
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        counters = {line.split()[0]: float(line.split()[1]) for line in r.read().decode().splitlines()
                    if line.startswith(("wring:engine_constrained_steps",
                                         "wring:engine_grammar_draft"))}
    print(f"structured: {counters}", flush=True)
    rows.append({"check": "constrained_steps", **counters})
    save(args.out, rows)


def save(path, rows):
    """Rows so far: a call cut short by its time limit still leaves what it measured."""
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
