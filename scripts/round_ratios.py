#!/usr/bin/env python3
"""Per-round ratios of arms against a base arm, from scripts/tune_rounds.sh's file of
"NAME<round> <tok/s>" lines, with their geometric mean, standard deviation and standard error.

    scripts/round_ratios.py rounds.txt BASE ARM [ARM...]
"""
import math
import re
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    path, base, arms = sys.argv[1], sys.argv[2], sys.argv[3:]
    d = {}
    for line in open(path):
        m = re.match(r"([a-z][a-z-]*?)(\d+) ([\d.]+)", line)
        if m:
            d[(m[1], int(m[2]))] = float(m[3])
    rounds = sorted({r for _, r in d})
    for arm in arms:
        r = [d[(arm, i)] / d[(base, i)] for i in rounds if (arm, i) in d and (base, i) in d]
        if len(r) < 2:
            print(f"{arm}/{base}: {len(r)} rounds, need 2")
            continue
        g = math.exp(sum(map(math.log, r)) / len(r))
        sd = (sum((x - g) ** 2 for x in r) / (len(r) - 1)) ** 0.5
        cells = " ".join("%.3f" % x for x in r)
        print(f"{arm}/{base}", len(r), cells, "| geomean %.3f sd %.3f se %.3f" % (g, sd, sd / len(r) ** 0.5))


if __name__ == "__main__":
    main()
