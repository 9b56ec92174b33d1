#!/usr/bin/env python3
"""Where a serving run's step time goes, from `wring serve --step-log` files.
step_log_summary.py FILE.jsonl...  For each file: steps with prompt tokens beside at least 16
decoding sequences (the concurrency-32 part of a run) by prompt tokens, against the steps
without prompt tokens at that concurrency; model and host milliseconds; and where the
steps name how they ran ("graph": eager, capture, replay — CUDA), the steps and time of each,
with and without prompt tokens."""
import json
import statistics
import sys

BUCKETS = [128, 256, 512, 1024, 2048, 1 << 30]


def summarise(path):
    steps = [json.loads(l) for l in open(path) if l.strip()]
    busy = [s for s in steps if s["decoding"] >= 16]
    with_p = [s for s in busy if s["prompt_tokens"] > 0]
    without = [s for s in busy if s["prompt_tokens"] == 0]
    total = sum(s["model_ms"] + s["host_ms"] for s in busy) or 1.0
    print(f"## {path}: {len(steps)} steps, {len(busy)} beside >= 16 decoding sequences")
    if without:
        print(f"without prompt tokens: {len(without)} steps, model {statistics.mean(s['model_ms'] for s in without):.3f} ms, "
              f"host {statistics.mean(s['host_ms'] for s in without):.3f} ms, "
              f"{statistics.mean(s['tokens'] for s in without):.0f} tokens a step")
    graphs(steps)
    if not with_p:
        return
    share = sum(s["model_ms"] + s["host_ms"] for s in with_p) / total
    print(f"with prompt tokens: {len(with_p)} steps, {100 * share:.0f} % of this part's time")
    print("| prompt tokens | steps | mean prompt tokens | mean step tokens | mean prompts a step | model ms | host ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    lo = 0
    for hi in BUCKETS:
        b = [s for s in with_p if lo < s["prompt_tokens"] <= hi]
        if b:
            label = f"{lo + 1}–{hi}" if hi < (1 << 30) else f"> {lo}"
            print(f"| {label} | {len(b)} | {statistics.mean(s['prompt_tokens'] for s in b):.0f} | "
                  f"{statistics.mean(s['tokens'] for s in b):.0f} | "
                  f"{statistics.mean(s['seqs'] - s['decoding'] for s in b):.1f} | "
                  f"{statistics.mean(s['model_ms'] for s in b):.3f} | {statistics.mean(s['host_ms'] for s in b):.3f} |")
        lo = hi
    print()


def graphs(steps):
    kinds = sorted({s.get("graph") for s in steps if s.get("graph")})
    if not kinds:
        return
    total = sum(s["model_ms"] + s["host_ms"] for s in steps) or 1.0
    print("| how the step ran | prompt tokens | steps | mean model ms | mean host ms | share of all step time |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in kinds:
        for label, keep in (("none", lambda s: s["prompt_tokens"] == 0), ("some", lambda s: s["prompt_tokens"] > 0)):
            b = [s for s in steps if s.get("graph") == kind and keep(s)]
            if b:
                t = sum(s["model_ms"] + s["host_ms"] for s in b)
                print(f"| {kind} | {label} | {len(b)} | {statistics.mean(s['model_ms'] for s in b):.3f} | "
                      f"{statistics.mean(s['host_ms'] for s in b):.3f} | {100 * t / total:.1f} % |")
    print()


for p in sys.argv[1:]:
    try:
        summarise(p)
    except (OSError, ValueError, KeyError) as e:
        print(f"## {p}: unreadable ({e})")
