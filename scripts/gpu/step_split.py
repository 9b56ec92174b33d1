#!/usr/bin/env python3
"""Model vs host time per engine step between two /metrics scrapes (labels ignored).
step_split.py LABEL BEFORE_TEXT AFTER_TEXT BENCH_LOG"""
import re
import sys


def parse(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(wring:engine_\w*)(\{[^}]*\})?\s+([0-9.eE+-]+)', line)
        if m:
            phase = re.search(r'phase="(\w+)"', m.group(2) or "")
            key = m.group(1) + (":" + phase.group(1) if phase else "")
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def prefill_part(d, steps):
    """Steps with prompt tokens (eager on CUDA) vs the rest, when the server reports them."""
    n = d.get("wring:engine_steps_with_prefill_total")
    if n is None:
        return ""
    t = d.get("wring:engine_step_model_seconds_with_prefill_total", 0.0)
    rest_n = steps - n
    rest_t = d["wring:engine_step_model_seconds_total"] - t
    with_ms = f"{1e3 * t / n:.3f}" if n else "-"
    rest_ms = f"{1e3 * rest_t / rest_n:.3f}" if rest_n else "-"
    return (f"; {int(n)} steps with prompt tokens at {with_ms} ms model time, "
            f"{int(rest_n)} without at {rest_ms}")


label, a, b = sys.argv[1], parse(sys.argv[2]), parse(sys.argv[3])
d = {k: b[k] - a.get(k, 0.0) for k in b}
steps = d.get("wring:engine_steps_total", 0)
tput = ""
try:
    rows = [l for l in open(sys.argv[4]) if l.startswith("mix")]
    tput = rows[-1].split()[2] + " tok/s" if rows else ""
except OSError:
    pass
if steps:
    phases = ", ".join(f"{k.split(':')[-1]} {1e3 * v / steps:.3f}" for k, v in sorted(d.items())
                       if k.startswith("wring:engine_step_host_phase_seconds_total:"))
    admin = d.get("wring:engine_admin_seconds_total")
    print(f"{label}: {int(steps)} steps, model {1e3 * d['wring:engine_step_model_seconds_total'] / steps:.3f} ms/step, "
          f"host {1e3 * d['wring:engine_step_host_seconds_total'] / steps:.3f} ms/step"
          + (f" ({phases})" if phases else "")
          + (f", admission/finish outside steps {1e3 * admin / steps:.3f} ms/step" if admin is not None else "")
          + prefill_part(d, steps)
          + f", {tput}")
else:
    print(f"{label}: no step counters ({sorted(b)[:3]})")
