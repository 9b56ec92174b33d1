#!/usr/bin/env python3
"""Per-kernel time of one step from `scripts/gpu/profile_ncu.sh`'s Nsight Compute CSV:
kernels grouped by name (cuBLAS GEMMs by their kernel family), milliseconds per step (the
CSV holds STEPS steps) and share of the summed kernel time. Markdown to stdout.
Usage: ncu_summary.py FILE.csv[.gz] [STEPS=3]"""
import csv
import gzip
import re
import sys
from collections import defaultdict


def group(name: str) -> str:
    if "gemv" in name.lower():
        return "cuBLAS gemv"
    if re.search(r"gemm|sm90_xmma|cutlass|nvjet", name, re.I):
        return "cuBLAS gemm"
    return name.split("(")[0].split("<")[0]


def main() -> None:
    path, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    opener = gzip.open if path.endswith(".gz") else open
    lines = [l for l in opener(path, "rt") if l.startswith('"')]
    ns, count = defaultdict(float), defaultdict(int)
    for row in csv.DictReader(lines):
        if row["Metric Name"] != "gpu__time_duration.sum":
            continue
        g = group(row["Kernel Name"])
        ns[g] += float(row["Metric Value"].replace(",", ""))
        count[g] += 1
    total = sum(ns.values())
    print(f"{path}: {sum(count.values()) // steps} kernels and {total / steps / 1e6:.3f} ms of kernel time per step\n")
    print("| kernel | launches / step | ms / step | share |")
    print("|---|---:|---:|---:|")
    for g in sorted(ns, key=ns.get, reverse=True):
        print(f"| {g} | {count[g] / steps:.0f} | {ns[g] / steps / 1e6:.3f} | {100 * ns[g] / total:.1f} % |")


if __name__ == "__main__":
    main()
