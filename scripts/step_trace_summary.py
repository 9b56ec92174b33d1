#!/usr/bin/env python3
"""Model time per step shape from a server's step-cost trace (`RUST_LOG=info,wring_engine::step_cost=trace
wring serve ...`, e.g. through scripts/diag_spec_steps.sh): plain decode steps, small verify/mixed
steps and steps with prefill, with ms per row, so two servers can be compared on the same shapes.
    scripts/step_trace_summary.py A.serve.log B.serve.log   (gzip'd traces: zcat to a file first)"""
import re, sys, collections
pat = re.compile(r"step seqs (\S+) rows (\S+) logit_rows (\S+) attended (\S+) secs (\S+) predicted (\S+)")
def load(p):
    out = []
    for line in open(p, errors="replace"):
        m = pat.search(line)
        if m:
            out.append(tuple(float(x) for x in m.groups()[:5]))
    return out
for p in sys.argv[1:]:
    st = load(p)
    dec = [s for s in st if s[1] == s[0] and s[2] == s[0]]          # plain decode
    ver = [s for s in st if s[1] > s[0] and s[1] <= 12 * s[0]]      # verify-ish (no big prefill)
    pre = [s for s in st if s[1] > 12 * s[0] or (s[1] > s[0] and s[2] < s[0])]
    tot = sum(s[4] for s in st)
    def summ(name, xs):
        if not xs: return f"{name}: none"
        t = sum(s[4] for s in xs); r = sum(s[1] for s in xs); a = sum(s[3] for s in xs)
        return f"{name}: {len(xs)} steps {t:.2f} s, rows {r:.0f} ({1e3*t/r:.3f} ms/row), attended {a/1e6:.1f} M, logit rows {sum(s[2] for s in xs):.0f}"
    print(p, f"total {len(st)} steps {tot:.2f} s")
    for name, xs in [("decode", dec), ("verify/mixed small", ver), ("with prefill", pre)]:
        print("  " + summ(name, xs))
    # decode steps by batch size
    by = collections.defaultdict(list)
    for s in dec: by[int(s[0]) // 8 * 8].append(s[4])
    print("  decode ms by seqs bin:", {k: round(1e3 * sum(v) / len(v), 2) for k, v in sorted(by.items())})
