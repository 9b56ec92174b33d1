#!/usr/bin/env python3
"""Markdown summary of one bench_serve.sh part: output tokens/s per server configuration,
corpus and concurrency, spec acceptance, ratios against wring-nospec and llama.cpp, the
transformers numbers and llama-batched-bench's table.

  python3 scripts/gpu/bench_summary.py /tmp/bench-small small > summary.md
"""
import glob
import json
import os
import re
import sys

d, part = sys.argv[1], sys.argv[2]
cells = {}  # (label, corpus, conc) -> (tok/s, mean acceptance length, completed, failed, tpot)
order = []
for p in sorted(glob.glob(os.path.join(d, "*-c*.json"))):
    try:
        f = json.load(open(p))
    except Exception:  # noqa: BLE001
        continue
    m = f["meta"]
    for r in f["results"]:
        run = r  # the median run's metrics are flattened into the result
        spec = r
        key = (m["label"], r["corpus"], m["max_concurrency"])
        cells[key] = (
            r["output_throughput_median"],
            spec.get("spec_mean_acceptance_length"),
            run["completed"],
            run["failed"],
            run.get("median_tpot_ms"),
        )
        if m["label"] not in order:
            order.append(m["label"])

pref = ["wring-nospec", "wring-k4", "wring-k8", "wring-adaptive", "llamacpp"]
order = [x for x in pref if x in order] + [x for x in order if x not in pref]
corpora = sorted({k[1] for k in cells}, key=lambda c: (c != "mix", c))
concs = sorted({k[2] for k in cells})
date = open(os.path.join(d, "device.txt")).read().strip() if os.path.exists(os.path.join(d, "device.txt")) else ""
print(f"# Serving benchmark, part `{part}` ({date})\n")
print("Output tokens/s (median run; greedy, max_tokens 256); in brackets: mean tokens per verify step.\n")
cols = [(c, n) for c in corpora for n in concs]
print("| server | " + " | ".join(f"{c} c={n}" for c, n in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for lab in order:
    row = []
    for c, n in cols:
        v = cells.get((lab, c, n))
        if v is None:
            row.append("—")
            continue
        s = f"{v[0]:.0f}"
        if v[1]:
            s += f" ({v[1]:.2f})"
        if v[3]:
            s += f" [{v[3]} failed]"
        row.append(s)
    print(f"| {lab} | " + " | ".join(row) + " |")


def ratio_row(name, num, den):
    row = []
    for c, n in cols:
        a, b = cells.get((num, c, n)), cells.get((den, c, n))
        row.append(f"{a[0] / b[0]:.2f}×" if a and b and b[0] > 0 else "—")
    print(f"| {name} | " + " | ".join(row) + " |")


print("\nRatios\n")
print("| ratio | " + " | ".join(f"{c} c={n}" for c, n in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for lab in order:
    if lab != "wring-nospec" and lab.startswith("wring"):
        ratio_row(f"{lab} / wring-nospec", lab, "wring-nospec")
if "llamacpp" in order:
    for lab in order:
        if lab.startswith("wring"):
            ratio_row(f"{lab} / llama.cpp", lab, "llamacpp")

print("\nMedian TPOT (ms per output token, per request)\n")
print("| server | " + " | ".join(f"{c} c={n}" for c, n in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for lab in order:
    row = []
    for c, n in cols:
        v = cells.get((lab, c, n))
        row.append(f"{v[4]:.2f}" if v and v[4] else "—")
    print(f"| {lab} | " + " | ".join(row) + " |")

hf = os.path.join(d, "hf.json")
if os.path.exists(hf):
    h = json.load(open(hf))
    print(f"\ntransformers {h['meta']['transformers']} (torch {h['meta']['torch']}), bf16 `generate`, "
          f"{h['meta']['corpus']}, max_new_tokens {h['meta']['max_new_tokens']}\n")
    print("| batch | prompts | output tokens | s | tok/s |")
    print("|---|---|---|---|---|")
    for r in h["results"]:
        print(f"| {r['batch']} | {r['prompts']} | {r['output_tokens']} | {r['seconds']:.1f} | {r['tok_s']:.0f} |")
elif part == "small":
    log = os.path.join(d, "hf.log")
    tail = open(log).read().strip().splitlines()[-3:] if os.path.exists(log) else ["no log"]
    print("\ntransformers: no result; last lines:\n\n```\n" + "\n".join(tail) + "\n```")

bb = os.path.join(d, "llamacpp-batched-bench.log")
if os.path.exists(bb):
    lines = [l for l in open(bb).read().splitlines() if l.startswith("|")]
    if lines:
        print("\nllama-batched-bench (llama.cpp engine alone, no HTTP, no sampling)\n")
        print("\n".join(lines))

print("\nServer start-up and graph notes (from the serve logs)\n")
for p in sorted(glob.glob(os.path.join(d, "*.serve.log"))):
    text = open(p, errors="replace").read()
    notes = [l.strip()[:200] for l in text.splitlines()
             if re.search(r"captur|calibrat|error|panick|warn", l, re.I)][:6]
    print(f"- {os.path.basename(p)}: " + ("; ".join(notes) if notes else "no capture/error lines"))
