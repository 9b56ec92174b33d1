#!/usr/bin/env python3
"""Markdown tables from what the device scripts bring back (stdlib only).

    tables.py steps A/steps.json [B/steps.json ...]   step times side by side (graph replay), the
                                                      roofline and each file's % of it
    tables.py quant quant.json ...                    whole 8B steps per weight format and path,
                                                      and each against bf16's default path
    tables.py cold DIR ...                            prefill_cold.json per folder: the extra cost
                                                      of a step's first run, warm time, enqueue
    tables.py ncu FILE.csv[.gz] [STEPS=3]             per-kernel time of one step from Nsight
                                                      Compute's CSV (scripts/gpu/profile.sh)
    tables.py steplog FILE.jsonl ...                  where a serving run's step time goes, from
                                                      `wring serve --step-log` files
    tables.py split LABEL BEFORE AFTER BENCH_LOG      model vs host time per engine step between
                                                      two /metrics scrapes (serve.sh hostsplit)
"""
import csv
import gzip
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: {e}")
        return []


def steps(paths):
    runs = [{(r["model"], r["batch"], r["q"], r.get("variant", "default")): r for r in load(p)} for p in paths]
    keys = list(dict.fromkeys(k for run in runs for k in run))
    names = [os.path.basename(os.path.dirname(p)) or p for p in paths]
    print("| model | variant | batch × q | " + " | ".join(f"{n} ms" for n in names) + " | roofline ms | % of roofline |")
    print("|---|---|---|" + "---:|" * (len(paths) + 2))
    for k in keys:
        rows = [run.get(k) for run in runs]
        first = next(r for r in rows if r)
        cells = [f"{r['ms']:.3f}" if r else "–" for r in rows]
        pct = " / ".join(f"{100 * r['roofline_ms'] / r['ms']:.0f} %" for r in rows if r)
        print(f"| {k[0]} | {k[3]} | {k[1]} × {k[2]} | " + " | ".join(cells) + f" | {first['roofline_ms']:.3f} | {pct} |")


def quant(paths):
    rows = [r for p in paths for r in load(p)]
    base = {(r["batch"], r["q"]): r["ms"] for r in rows if r["weights"] == "bf16" and r.get("variant", "default") == "default"}
    print("| weights | path | batch × q | ms | roofline ms | % of roofline | bf16 default / this |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["weights"], r.get("variant", ""), r["batch"], r["q"])):
        b = base.get((r["batch"], r["q"]))
        vs = f"{b / r['ms']:.2f}×" if b else "–"
        print(f"| {r['weights']} | {r.get('variant', 'default')} | {r['batch']} × {r['q']} | {r['ms']:.3f} | "
              f"{r['roofline_ms']:.3f} | {100 * r['roofline_ms'] / r['ms']:.0f} % | {vs} |")


def cold(dirs):
    print("| folder | model | steps | cold − warm median ms | max | warm median ms | enqueue median ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for d in dirs:
        rows = load(os.path.join(d, "prefill_cold.json"))
        for model in dict.fromkeys(r["model"] for r in rows):
            m = [r for r in rows if r["model"] == model]
            extra = [r["cold_ms"] - r["warm_ms"] for r in m]
            enq = [r["warm_enqueue_ms"] for r in m if "warm_enqueue_ms" in r]
            enq = f"{statistics.median(enq):.3f}" if enq else "–"
            print(f"| {d} | {model} | {len(m)} | {statistics.median(extra):.2f} | {max(extra):.2f} | "
                  f"{statistics.median(r['warm_ms'] for r in m):.3f} | {enq} |")


def ncu_group(name):
    if "gemv" in name.lower():
        return "cuBLAS gemv"
    if re.search(r"gemm|sm90_xmma|cutlass|nvjet", name, re.I):
        return "cuBLAS gemm"
    return name.split("(")[0].split("<")[0]


def ncu(path, n_steps=3):
    opener = gzip.open if path.endswith(".gz") else open
    lines = [line for line in opener(path, "rt") if line.startswith('"')]
    ns, count = defaultdict(float), defaultdict(int)
    for row in csv.DictReader(lines):
        if row["Metric Name"] != "gpu__time_duration.sum":
            continue
        g = ncu_group(row["Kernel Name"])
        ns[g] += float(row["Metric Value"].replace(",", ""))
        count[g] += 1
    total = sum(ns.values()) or 1.0
    print(f"{path}: {sum(count.values()) // n_steps} kernels and {total / n_steps / 1e6:.3f} ms of kernel time per step\n")
    print("| kernel | launches / step | ms / step | share |")
    print("|---|---:|---:|---:|")
    for g in sorted(ns, key=ns.get, reverse=True):
        print(f"| {g} | {count[g] / n_steps:.0f} | {ns[g] / n_steps / 1e6:.3f} | {100 * ns[g] / total:.1f} % |")


BUCKETS = [128, 256, 512, 1024, 2048, 1 << 30]


def steplog(paths):
    for path in paths:
        try:
            steplog_one(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"## {path}: unreadable ({e})")


def steplog_one(path):
    """Steps with prompt tokens beside at least 16 decoding sequences (the concurrency-32 part
    of a run) by prompt tokens, against the steps without; and, where the steps name how they
    ran ("graph": eager, capture, replay), the steps and time of each."""
    opener = gzip.open if path.endswith(".gz") else open
    all_steps = [json.loads(line) for line in opener(path, "rt") if line.strip()]
    busy = [s for s in all_steps if s["decoding"] >= 16]
    with_p = [s for s in busy if s["prompt_tokens"] > 0]
    without = [s for s in busy if s["prompt_tokens"] == 0]
    total = sum(s["model_ms"] + s["host_ms"] for s in busy) or 1.0
    print(f"## {path}: {len(all_steps)} steps, {len(busy)} beside >= 16 decoding sequences")
    if without:
        print(f"without prompt tokens: {len(without)} steps, model {statistics.mean(s['model_ms'] for s in without):.3f} ms, "
              f"host {statistics.mean(s['host_ms'] for s in without):.3f} ms, "
              f"{statistics.mean(s['tokens'] for s in without):.0f} tokens a step")
    kinds = sorted({s.get("graph") for s in all_steps if s.get("graph")})
    if kinds:
        t_all = sum(s["model_ms"] + s["host_ms"] for s in all_steps) or 1.0
        print("| how the step ran | prompt tokens | steps | mean model ms | mean host ms | share of all step time |")
        print("|---|---|---:|---:|---:|---:|")
        for kind in kinds:
            for label, keep in (("none", lambda s: s["prompt_tokens"] == 0), ("some", lambda s: s["prompt_tokens"] > 0)):
                b = [s for s in all_steps if s.get("graph") == kind and keep(s)]
                if b:
                    t = sum(s["model_ms"] + s["host_ms"] for s in b)
                    print(f"| {kind} | {label} | {len(b)} | {statistics.mean(s['model_ms'] for s in b):.3f} | "
                          f"{statistics.mean(s['host_ms'] for s in b):.3f} | {100 * t / t_all:.1f} % |")
        print()
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


def metrics(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(wring:engine_\w*)(\{[^}]*\})?\s+([0-9.eE+-]+)', line)
        if m:
            phase = re.search(r'phase="(\w+)"', m.group(2) or "")
            key = m.group(1) + (":" + phase.group(1) if phase else "")
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def split(label, before, after, bench_log):
    a, b = metrics(before), metrics(after)
    d = {k: b[k] - a.get(k, 0.0) for k in b}
    n = d.get("wring:engine_steps_total", 0)
    if not n:
        print(f"{label}: no step counters ({sorted(b)[:3]})")
        return
    tput = ""
    try:
        rows = [line for line in open(bench_log) if line.startswith("mix")]
        tput = rows[-1].split()[2] + " tok/s" if rows else ""
    except OSError:
        pass
    phases = ", ".join(f"{k.split(':')[-1]} {1e3 * v / n:.3f}" for k, v in sorted(d.items())
                       if k.startswith("wring:engine_step_host_phase_seconds_total:"))
    admin = d.get("wring:engine_admin_seconds_total")
    prefill = ""
    n_p = d.get("wring:engine_steps_with_prefill_total")
    if n_p is not None:  # steps with prompt tokens (eager on CUDA) vs the rest
        t = d.get("wring:engine_step_model_seconds_with_prefill_total", 0.0)
        rest_t = d["wring:engine_step_model_seconds_total"] - t
        with_ms = f"{1e3 * t / n_p:.3f}" if n_p else "-"
        rest_ms = f"{1e3 * rest_t / (n - n_p):.3f}" if n - n_p else "-"
        prefill = f"; {int(n_p)} steps with prompt tokens at {with_ms} ms model time, {int(n - n_p)} without at {rest_ms}"
    print(f"{label}: {int(n)} steps, model {1e3 * d['wring:engine_step_model_seconds_total'] / n:.3f} ms/step, "
          f"host {1e3 * d['wring:engine_step_host_seconds_total'] / n:.3f} ms/step"
          + (f" ({phases})" if phases else "")
          + (f", admission/finish outside steps {1e3 * admin / n:.3f} ms/step" if admin is not None else "")
          + prefill + f", {tput}")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    what, args = sys.argv[1], sys.argv[2:]
    if what == "steps":
        steps(args)
    elif what == "quant":
        quant(args)
    elif what == "cold":
        cold(args)
    elif what == "ncu":
        ncu(args[0], int(args[1]) if len(args) > 1 else 3)
    elif what == "steplog":
        steplog(args)
    elif what == "split" and len(args) == 4:
        split(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
