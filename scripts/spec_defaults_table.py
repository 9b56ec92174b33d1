#!/usr/bin/env python3
"""Table of `--speculative suffix` (defaults) over no speculation, per corpus and concurrency,
from the result JSONs `scripts/tune_cpu_spec_defaults.sh` writes (sequential or PAIRED=1 layout).
    scripts/spec_defaults_table.py results/tune-cpu-spec-defaults-<date>/paired"""
import glob, json, math, os, sys

CORPORA = ["sharegpt", "humaneval", "mbpp", "swebench", "wildchat", "lmsys", "mix"]


def load(path):
    out = {}
    for r in json.load(open(path))["results"]:
        out.setdefault(r["corpus"], r)
    return out


def main(root):
    print("| concurrency | " + " | ".join(CORPORA) + " | geomean | worst |")
    print("|---" * (len(CORPORA) + 3) + "|")
    dirs = [p for p in glob.glob(os.path.join(root, "c*")) if os.path.isdir(p)]
    for cdir in sorted(dirs, key=lambda p: int(p.split("/c")[-1])):
        cells, ratios = [], []
        for corpus in CORPORA:
            sub = os.path.join(cdir, corpus)
            base = sub if os.path.isdir(sub) else cdir
            try:
                n = load(os.path.join(base, "nospec.json"))[corpus]
                s = load(os.path.join(base, "suffix.json"))[corpus]
            except (OSError, KeyError):
                cells.append("–")
                continue
            x = s["output_throughput"] / n["output_throughput"]
            ratios.append((x, corpus))
            acc = s.get("spec_acceptance_rate")
            drafted = s.get("spec_num_draft_tokens") or 0
            note = f" ({acc:.0%})" if drafted and acc is not None else " (no draft)"
            cells.append(f"{n['output_throughput']:.0f} → {s['output_throughput']:.0f}: ×{x:.2f}{note}")
        if ratios:
            g = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
            w = min(ratios)
            print(f"| {cdir.split('/c')[-1]} | " + " | ".join(cells) + f" | **×{g:.3f}** | {w[1]} ×{w[0]:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
