#!/usr/bin/env python3
"""Side-by-side: ArcticInference 0.3.0's suffix core vs wring's drafter on the same trace with
the same parameters, alternating the two within one run (this box is shared, so each
(order, K) is measured `--rounds` times per implementation and the lowest median is kept).

  ~/.cache/wring/arctic/venv/bin/python scripts/arctic/compare.py \
      --wring target-suffix/release/examples/drafter_eval [--wring-args '--modes tree'] ...

`--wring` is any command that accepts `wring drafter-eval`'s flags (the wring binary with its
`drafter-eval` subcommand, or the suffix crate's stand-alone example).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay as arctic  # noqa: E402


def run_wring(cmd, trace, order, ks, a, extra):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        args = shlex.split(cmd) + [
            "--trace", trace, "--orders", order, "--k", ",".join(map(str, ks)), "--summary",
            "--max-tree-depth", str(a.max_tree_depth), "--max-spec-factor", str(a.max_spec_factor),
            "--max-spec-offset", str(a.max_spec_offset), "--min-token-prob", str(a.min_token_prob),
            "--json", f.name] + shlex.split(extra)
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        return json.load(open(f.name))["rows"]


NATIVE = os.path.join(arctic.ARCTIC_HOME, "native_replay")


def run_native(trace_txt, k, a):
    """Arctic's C++ core without Python (corpus order only), see native_replay.cc."""
    with open(trace_txt) as f:
        out = subprocess.run([NATIVE, str(k), str(a.max_tree_depth), str(a.max_spec_factor),
                              str(a.max_spec_offset), str(a.min_token_prob)],
                             stdin=f, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    r.update(order="corpus", corpus="all")
    return r


def best(rows_by_round):
    """Per (order, k): deterministic fields from round 0, latencies = min over rounds."""
    out = {}
    for rows in rows_by_round:
        for r in rows:
            if r["corpus"] != "all":
                continue
            key = (r["order"], r["k"])
            if key not in out:
                out[key] = dict(r)
            else:
                for f in ("speculate_us_p50", "speculate_us_p99", "append_us_p50", "append_us_p99"):
                    out[key][f] = min(out[key][f], r[f])
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--wring", required=True)
    p.add_argument("--wring-args", default="")
    p.add_argument("--trace", default=os.path.join(
        os.environ.get("WRING_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared")),
        "traces/smollm2_llamacpp_greedy_96.jsonl"))
    p.add_argument("--k", default="4,6,8,12,16")
    p.add_argument("--orders", default="corpus,shuffled,cold")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tree-depth", type=int, default=64)
    p.add_argument("--max-spec-factor", type=float, default=1.0)
    p.add_argument("--max-spec-offset", type=float, default=0.0)
    p.add_argument("--min-token-prob", type=float, default=0.1)
    p.add_argument("--json")
    a = p.parse_args()
    ks = [int(x) for x in a.k.split(",")]
    with open(a.trace) as f:
        trace = [json.loads(l) for l in f if l.strip()]
    ours, theirs, native = [], [], []
    have_native = os.path.exists(NATIVE) and "corpus" in a.orders.split(",")
    trace_txt = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    for r in trace:
        trace_txt.write(f'{len(r["prompt_ids"])} {len(r["output_ids"])}\n')
        trace_txt.write(" ".join(map(str, r["prompt_ids"] + r["output_ids"])) + "\n")
    trace_txt.close()
    for _ in range(a.rounds):
        if have_native:
            native.append([run_native(trace_txt.name, k, a) for k in ks])
        for order in a.orders.split(","):
            rows = []
            for k in ks:
                rows += arctic.replay(trace, k, order, a)
            theirs.append(rows)
            ours.append(run_wring(a.wring, a.trace, order, ks, a, a.wring_args))
    os.unlink(trace_txt.name)
    o, t, nat = best(ours), best(theirs), best(native)
    print("| order | K | tok/step arctic | tok/step wring | accept a / w | empty a / w "
          "| speculate µs p50 a / w | append µs p50 a / w | B per cached token a / w |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in t:
        x, y = t[key], o[key]
        print(f'| {key[0]} | {key[1]} | {x["tokens_per_step"]:.3f} | {y["tokens_per_step"]:.3f} '
              f'| {x["accept_rate"]:.3f} / {y["accept_rate"]:.3f} '
              f'| {100*x["empty_fraction"]:.1f} % / {100*y["empty_fraction"]:.1f} % '
              f'| {x["speculate_us_p50"]:.2f} / {y["speculate_us_p50"]:.2f} '
              f'| {x["append_us_p50"]:.2f} / {y["append_us_p50"]:.2f} '
              f'| {x["bytes_per_cached_token"]:.0f} / {y["bytes_per_cached_token"]:.0f} |')
    if nat:
        print()
        print("Arctic's C++ core called directly (no Python), corpus order:")
        print()
        print("| K | tok/step arctic-native | tok/step wring | speculate µs p50 native / wring "
              "| append µs p50 native / wring | speculate ratio | append ratio |")
        print("|---|---|---|---|---|---|---|")
        for key, x in nat.items():
            y = o[key]
            print(f'| {key[1]} | {x["tokens_per_step"]:.3f} | {y["tokens_per_step"]:.3f} '
                  f'| {x["speculate_us_p50"]:.2f} / {y["speculate_us_p50"]:.2f} '
                  f'| {x["append_us_p50"]:.2f} / {y["append_us_p50"]:.2f} '
                  f'| {y["speculate_us_p50"] / x["speculate_us_p50"]:.2f} '
                  f'| {y["append_us_p50"] / x["append_us_p50"]:.2f} |')
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"arctic": list(t.values()), "wring": list(o.values()),
                       "arctic_native": list(nat.values())}, f, indent=1)


if __name__ == "__main__":
    main()
