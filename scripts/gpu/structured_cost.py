#!/usr/bin/env python3
"""What a grammar-constrained step costs on a running wring server.

The same chat prompts are sent twice at each concurrency: plain, and with a
`response_format` json_schema (greedy: the grammar masks are computed on the host beside the
step and applied inside the device argmax). Prints output tokens/s for both and their ratio,
one line each, and writes a JSON list to the path given. Then checks that each constrained
answer is the one the same request gets with logprobs (which brings the logits back and
masks them on the host). Standard library only (the device has no network).

    structured_cost.py BASE_URL OUT_JSON [CONCURRENCY ...]
"""
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


def body_of(i, constrained):
    body = {
        "messages": [{"role": "user", "content": PROMPTS[i % 4].format(c=CITIES[i % 8])}],
        "max_tokens": 128, "temperature": 0,
    }
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "person", "schema": SCHEMA}}
    return body


def same_with_logprobs(base, count):
    """How many of `count` constrained answers equal the same request's with logprobs."""
    same = 0
    for i in range(count):
        a = post(base, body_of(i, True))["choices"][0]["message"]["content"]
        b = post(base, {**body_of(i, True), "logprobs": True, "top_logprobs": 1})
        same += a == b["choices"][0]["message"]["content"]
    return same


def batch(base, n, constrained, requests):
    out, lock = [], threading.Lock()
    work = list(range(requests))

    def worker():
        while True:
            with lock:
                if not work:
                    return
                i = work.pop()
            r = post(base, body_of(i, constrained))
            with lock:
                out.append(r["usage"]["completion_tokens"])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    return sum(out), dt


def main():
    base, path = sys.argv[1], sys.argv[2]
    concs = [int(c) for c in sys.argv[3:]] or [1, 32]
    rows = []
    for n in concs:
        reqs = 8 if n == 1 else 2 * n
        batch(base, n, False, min(reqs, n))  # warm-up (graphs, grammar compile caches)
        res = {}
        for constrained in (False, True):
            toks, dt = batch(base, n, constrained, reqs)
            res[constrained] = toks / dt
            rows.append({"concurrency": n, "constrained": constrained, "requests": reqs,
                         "output_tokens": toks, "seconds": round(dt, 3),
                         "tok_per_s": round(toks / dt, 1)})
        print(f"structured c={n}: plain {res[False]:.0f} tok/s, json_schema {res[True]:.0f} tok/s, "
              f"ratio {res[True] / res[False]:.2f}", flush=True)
    same = same_with_logprobs(base, 8)
    print(f"structured: {same}/8 constrained answers equal the same request with logprobs", flush=True)
    rows.append({"check": "same_with_logprobs", "equal": same, "of": 8})
    json.dump(rows, open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
