#!/usr/bin/env python3
"""Turns `wring tune` output directories (one result JSON per configuration) into the
study-scale rows and table: a list of
{"model", "weights", "tp", "corpus", "source", "concurrency", "max_tokens", "config",
 "tok_s", "tokens_per_step"} (tokens_per_step = output tokens / sequence steps, where every
sequence step emits one target token plus the drafts it accepted), then per (model, weights,
tp, concurrency, max_tokens, source) the tok/s of each configuration per corpus, the best
padded K and its ratio over no-spec, adaptive's ratio, and their geometric means.

usage: study_scale_table.py [--out serving.json] [--append] [--markdown FILE] DIR... """
import argparse
import json
import math
import os
import sys
from collections import defaultdict

PADDED = ["suffix-k4", "suffix-k6", "suffix-k8", "suffix-k12"]


def flag(args, name):
    """The value of `--name=v` or `--name v` in a server argument list."""
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def rows_of(path):
    f = json.load(open(path))
    meta = f["meta"]
    args = meta.get("server_args") or []
    shape = flag(args, "--model-shape")
    model = f"{shape} (dummy)" if shape else (meta.get("model_id") or "?")
    weights = flag(args, "--gpu-weights") or flag(args, "--cpu-weights") or (
        "bf16" if flag(args, "--device") not in (None, "cpu") else "default")
    tp = int(flag(args, "--tensor-parallel-size") or flag(args, "--tp") or 1)
    out = []
    for r in f["results"]:
        tokens = r.get("total_output_tokens") or 0
        accepted = r.get("spec_num_accepted_tokens") or 0
        steps = tokens - accepted
        out.append({
            "model": model,
            "weights": weights,
            "tp": tp,
            "corpus": r["corpus"],
            "source": r.get("replay_source") or "live",
            "concurrency": meta["max_concurrency"],
            "max_tokens": meta["max_tokens"],
            "config": meta["label"],
            "tok_s": round(r["output_throughput_median"], 1),
            "tokens_per_step": round(tokens / steps, 3) if steps > 0 else None,
            "completed": r.get("completed"),
            "failed": r.get("failed_all_runs", r.get("failed")),
            "device": meta.get("device"),
            "commit": meta.get("commit"),
        })
    return out


def collect(dirs):
    rows = []
    for d in dirs:
        files = [d] if d.endswith(".json") else [
            os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".json")
            and n not in ("k_profile.json", "serving.json") and not n.startswith("k_profile")]
        for p in files:
            try:
                rows.extend(rows_of(p))
            except (KeyError, ValueError, TypeError) as e:
                print(f"skipping {p}: {e}", file=sys.stderr)
    return rows


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def table(rows):
    groups = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["weights"], r["tp"], r["concurrency"], r["max_tokens"],
                r["source"])].append(r)
    lines = []
    for key in sorted(groups, key=str):
        model, weights, tp, c, maxt, source = key
        g = groups[key]
        configs = sorted({r["config"] for r in g}, key=lambda c: (
            ["nospec"] + PADDED + ["adaptive", "suffix"]).index(c) if c in (
            ["nospec"] + PADDED + ["adaptive", "suffix"]) else 99)
        corpora = sorted({r["corpus"] for r in g}, key=lambda c: [
            "sharegpt", "humaneval", "mbpp", "swebench", "wildchat", "lmsys", "mix"].index(c)
            if c in ["sharegpt", "humaneval", "mbpp", "swebench", "wildchat", "lmsys", "mix"] else 99)
        at = {(r["corpus"], r["config"]): r for r in g}
        lines.append(f"\n{model}, {weights}, tp {tp}, concurrency {c}, max_tokens {maxt}, "
                     f"replayed outputs: {source} (device: {g[0].get('device')}, commit {g[0].get('commit')})\n")
        head = "| corpus | " + " | ".join(configs) + " | best padded K | best / nospec | adaptive / nospec | adaptive / best |"
        lines.append(head)
        lines.append("|" + "---|" * (head.count("|") - 1))
        best_r, adapt_r, adapt_b = [], [], []
        for corpus in corpora:
            cells = []
            for cfg in configs:
                r = at.get((corpus, cfg))
                cells.append("" if r is None else (
                    f"{r['tok_s']:.0f}" + (f" ({r['tokens_per_step']:.2f})" if r["tokens_per_step"] and cfg != "nospec" else "")))
            base = at.get((corpus, "nospec"))
            padded = [at[(corpus, k)] for k in PADDED if (corpus, k) in at]
            best = max(padded, key=lambda r: r["tok_s"]) if padded else None
            adaptive = at.get((corpus, "adaptive"))
            ratio = lambda a, b: (a["tok_s"] / b["tok_s"]) if a and b and b["tok_s"] > 0 else None
            rb, ra, rab = ratio(best, base), ratio(adaptive, base), ratio(adaptive, best)
            best_r.append(rb); adapt_r.append(ra); adapt_b.append(rab)
            fmt = lambda x: "" if x is None else f"{x:.2f}"
            lines.append(f"| {corpus} | " + " | ".join(cells) +
                         f" | {best['config'].replace('suffix-', '') if best else ''} | {fmt(rb)} | {fmt(ra)} | {fmt(rab)} |")
        fmt = lambda x: "" if x is None else f"**{x:.2f}**"
        lines.append("| geomean | " + " | ".join("" for _ in configs) +
                     f" | | {fmt(geomean(best_r))} | {fmt(geomean(adapt_r))} | {fmt(geomean(adapt_b))} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", help="write the rows to this JSON file")
    ap.add_argument("--append", action="store_true", help="add to the rows already in --out")
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--quiet-missing", action="store_true")
    a = ap.parse_args()
    dirs = [d for d in a.dirs if os.path.exists(d)]
    if not dirs and a.quiet_missing:
        return
    rows = collect(dirs)
    if a.out:
        old = json.load(open(a.out)) if a.append and os.path.exists(a.out) else []
        keep = lambda r: (r["model"], r["weights"], r["tp"], r["corpus"], r["source"],
                          r["concurrency"], r["max_tokens"], r["config"])
        merged = {keep(r): r for r in old}
        merged.update({keep(r): r for r in rows})
        json.dump(list(merged.values()), open(a.out, "w"), indent=1)
        rows = list(merged.values())
    text = table(rows)
    if a.markdown:
        open(a.markdown, "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
