#!/usr/bin/env python3
"""Table of `--speculative suffix` (defaults) over no speculation, per corpus and concurrency,
from the result JSONs `scripts/tune_cpu_spec_defaults.sh` writes (sequential or PAIRED=1 layout).
    scripts/spec_defaults_table.py results/<date>-cpu-spec-defaults/paired
With several folders (passes of the same run, e.g. FLIP=0 and FLIP=1), each cell is the
geometric mean of the passes' ratios, with their range, and the throughputs are the passes' means."""
import glob, json, math, os, sys

CORPORA = ["sharegpt", "humaneval", "mbpp", "swebench", "wildchat", "lmsys", "mix"]


def load(path):
    out = {}
    for r in json.load(open(path))["results"]:
        out.setdefault(r["corpus"], r)
    return out


def pair(cdir, corpus):
    """(nospec, suffix) results of one corpus in one pass, or None."""
    sub = os.path.join(cdir, corpus)
    base = sub if os.path.isdir(sub) else cdir
    try:
        return load(os.path.join(base, "nospec.json"))[corpus], load(os.path.join(base, "suffix.json"))[corpus]
    except (OSError, KeyError):
        return None


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(roots):
    levels = sorted(
        {p.split("/c")[-1] for root in roots for p in glob.glob(os.path.join(root, "c*")) if os.path.isdir(p)},
        key=int,
    )
    print("| concurrency | " + " | ".join(CORPORA) + " | geomean | worst |")
    print("|---" * (len(CORPORA) + 3) + "|")
    for level in levels:
        cells, ratios = [], []
        for corpus in CORPORA:
            pairs = [p for p in (pair(os.path.join(root, f"c{level}"), corpus) for root in roots) if p]
            if not pairs:
                cells.append("–")
                continue
            xs = [s["output_throughput"] / n["output_throughput"] for n, s in pairs]
            x = geomean(xs)
            ratios.append((x, corpus))
            n_tps = sum(n["output_throughput"] for n, _ in pairs) / len(pairs)
            s_tps = sum(s["output_throughput"] for _, s in pairs) / len(pairs)
            drafted = sum(s.get("spec_num_draft_tokens") or 0 for _, s in pairs)
            accs = [s.get("spec_acceptance_rate") for _, s in pairs if s.get("spec_num_draft_tokens")]
            accs = [a for a in accs if a is not None]
            note = f" ({sum(accs) / len(accs):.0%})" if drafted and accs else " (no draft)"
            spread = f" [{min(xs):.2f}–{max(xs):.2f}]" if len(xs) > 1 else ""
            cells.append(f"{n_tps:.0f} → {s_tps:.0f}: ×{x:.2f}{spread}{note}")
        if ratios:
            g = geomean([x for x, _ in ratios])
            w = min(ratios)
            print(f"| {level} | " + " | ".join(cells) + f" | **×{g:.3f}** | {w[1]} ×{w[0]:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: spec_defaults_table.py RESULT_DIR [RESULT_DIR ...]")
    main(sys.argv[1:])
