#!/usr/bin/env python3
"""Replay a trace through ArcticInference 0.3.0's SuffixDecodingCache (built by build.sh) with
the same semantics and metrics as `wring drafter-eval` (see ../shared/traces/README.md).

Usage: replay.py --trace T.jsonl [--k 4,8] [--orders corpus,shuffled,cold] [--json out.json]
                 [--max-tree-depth 64] [--max-spec-factor 1.0] [--min-token-prob 0.1]
Timing is per call through the Python binding (as in the reference numbers).
"""
import argparse
import json
import math
import os
import random
import sys
import time

ARCTIC_HOME = os.environ.get("ARCTIC_HOME", os.path.expanduser("~/.cache/wring/arctic"))
sys.path.insert(0, os.path.join(ARCTIC_HOME, "py"))
from arctic_suffix.cache import SuffixDecodingCache  # noqa: E402


def pct_us(values, q):
    if not values:
        return 0.0
    v = sorted(values)
    rank = min(max(math.ceil(q * len(v)), 1), len(v))
    return v[rank - 1] / 1000.0


class Tally:
    def __init__(self):
        self.requests = self.steps = self.emitted = self.drafted = 0
        self.accepted = self.empty = 0
        self.spec_ns, self.app_ns = [], []
        self.mem = self.cached = 0

    def merge(self, o):
        for f in ("requests", "steps", "emitted", "drafted", "accepted", "empty"):
            setattr(self, f, getattr(self, f) + getattr(o, f))
        self.spec_ns += o.spec_ns
        self.app_ns += o.app_ns

    def row(self, order, k, corpus):
        r = lambda a, b: a / b if b else 0.0
        return {
            "order": order, "k": k, "mode": "Path", "corpus": corpus,
            "requests": self.requests, "steps": self.steps,
            "tokens_per_step": r(self.emitted, self.steps),
            "accept_rate": r(self.accepted, self.drafted),
            "mean_draft_len": r(self.drafted, self.steps),
            "empty_fraction": r(self.empty, self.steps),
            "speculate_us_p50": pct_us(self.spec_ns, 0.5),
            "speculate_us_p99": pct_us(self.spec_ns, 0.99),
            "append_us_p50": pct_us(self.app_ns, 0.5),
            "append_us_p99": pct_us(self.app_ns, 0.99),
            "global_memory_bytes": self.mem,
            "global_cached_tokens": self.cached,
            "bytes_per_cached_token": r(self.mem, self.cached),
        }


def cached_tokens(cache):
    # The binding exposes no token count; responses are tracked on the Python side.
    return sum(len(v) for v in cache._wring_responses.values())


def replay(trace, k, order, a, steps_out=None):
    idx = list(range(len(trace)))
    if order == "shuffled":
        random.Random(0).shuffle(idx)
    corpora = []
    for r in trace:
        if r["corpus"] not in corpora:
            corpora.append(r["corpus"])
    per = {c: Tally() for c in corpora}

    def fresh():
        c = SuffixDecodingCache(max_tree_depth=a.max_tree_depth, max_cached_requests=-1)
        c._wring_responses = {}
        return c

    cache, current, peak = fresh(), None, (0, 0)
    for n, i in enumerate(idx):
        req = trace[i]
        if order == "cold" and req["corpus"] != current:
            cache, current = fresh(), req["corpus"]
        t = per[req["corpus"]]
        t.requests += 1
        prompt, out = req["prompt_ids"], req["output_ids"]
        cache.start_request(n, prompt)
        cache._wring_responses[n] = []
        ctx = list(prompt)
        pos, steps = 0, []
        while pos < len(out):
            context = ctx[-a.max_tree_depth:]
            t0 = time.perf_counter_ns()
            d = cache.speculate(n, context, max_spec_tokens=k, max_spec_factor=a.max_spec_factor,
                                max_spec_offset=a.max_spec_offset, min_token_prob=a.min_token_prob)
            t1 = time.perf_counter_ns()
            draft = list(d.token_ids)
            acc = 0
            while acc < len(draft) and pos + acc < len(out) and draft[acc] == out[pos + acc]:
                acc += 1
            emit = out[pos:pos + acc + 1]
            t2 = time.perf_counter_ns()
            cache.add_active_response(n, emit)
            t3 = time.perf_counter_ns()
            cache._wring_responses[n] += emit
            ctx += emit
            t.steps += 1
            t.emitted += len(emit)
            t.drafted += len(draft)
            t.accepted += acc
            t.empty += not draft
            t.spec_ns.append(t1 - t0)
            t.app_ns.append(t3 - t2)
            steps.append([pos, draft, acc])
            pos += len(emit)
        cache.stop_request(n)
        t.mem = cache._global_tree.estimate_memory()
        t.cached = cached_tokens(cache)
        peak = max(peak, (t.mem, t.cached))
        if steps_out is not None:
            steps_out.append({"idx": req.get("idx", i), "corpus": req["corpus"], "steps": steps})
    rows, total = [], Tally()
    for c in corpora:
        total.merge(per[c])
        rows.append(per[c].row(order, k, c))
    if order == "cold":
        total.mem, total.cached = peak
    else:
        total.mem, total.cached = cache._global_tree.estimate_memory(), cached_tokens(cache)
    rows.append(total.row(order, k, "all"))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trace", required=True)
    p.add_argument("--k", default="4,6,8,12,16")
    p.add_argument("--orders", default="corpus,shuffled,cold")
    p.add_argument("--max-tree-depth", type=int, default=64)
    p.add_argument("--max-spec-factor", type=float, default=1.0)
    p.add_argument("--max-spec-offset", type=float, default=0.0)
    p.add_argument("--min-token-prob", type=float, default=0.1)
    p.add_argument("--json")
    p.add_argument("--steps-out", help="write corpus-order K=first per-step drafts (JSONL)")
    a = p.parse_args()
    with open(a.trace) as f:
        trace = [json.loads(l) for l in f if l.strip()]
    rows = []
    for order in a.orders.split(","):
        for k in [int(x) for x in a.k.split(",")]:
            steps = [] if (a.steps_out and order == "corpus" and not rows) else None
            rows += replay(trace, k, order, a, steps)
            if steps is not None:
                with open(a.steps_out, "w") as f:
                    for s in steps:
                        f.write(json.dumps(s) + "\n")
    for r in rows:
        if r["corpus"] == "all":
            print(f'{r["order"]:<8} K{r["k"]:<3} {r["tokens_per_step"]:.3f} tok/step  '
                  f'accept {r["accept_rate"]:.3f}  empty {100*r["empty_fraction"]:.1f}%  '
                  f'spec {r["speculate_us_p50"]:.2f}/{r["speculate_us_p99"]:.2f} us  '
                  f'append {r["append_us_p50"]:.2f}/{r["append_us_p99"]:.2f} us  '
                  f'mem {r["global_memory_bytes"]/1024:.1f} KiB  {r["bytes_per_cached_token"]:.1f} B/tok')
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"implementation": "arctic-inference 0.3.0", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
