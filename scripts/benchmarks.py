#!/usr/bin/env python3
"""BENCHMARKS.md, the current state of every benchmark topic, generated from the data under
results/. Nothing on the page is typed by hand: change the data (or this script) and run

    scripts/benchmarks.py            # writes BENCHMARKS.md
    scripts/benchmarks.py --check    # exit 1 if BENCHMARKS.md is not what the data gives
    scripts/benchmarks.py --root DIR # DIR/results -> DIR/BENCHMARKS.md (default: the repository)

(`crates/lint/tests/benchmarks_page.rs` runs the check with the test suite.)

Where the numbers come from. A results folder that feeds the page has a `summary.json`:

    {"machine": "...", "commit": "...", "command": "...",
     "topics": {"<topic>": {"rows": [{...}, ...], "command": "...", ...}}}

`machine`, `commit` and `command` may be set per topic too. A row is a dict of the topic's
fields (see TOPICS below). A field is either a plain value, taken from the folder's notes
(then the row names its raw file with "raw", else NOTES.md), or a reference into a raw file,
which this script reads:

    {"bench": FILE[, "corpus": C][, "field": F]}   `wring bench serve` / `wring tune` result JSON
                                                   (F: output_throughput_median by default)
    {"tune": DIR, "corpus": C, "config": NAME}     one configuration of a `wring tune` folder;
                                                   config "bestKpad": the best padded suffix K
                                                   (value and K); corpus "geomean": over corpora
    {"json": FILE, "path": "a.0.b"}                any value of a JSON file (the whole file without path)
    {"value": V, "k": K}                           a plain value with its K (a bestKpad from notes)
    {"rss_kb": FILE}                               a peak RSS in KiB (written by the CPU bench), as MiB
    {"prefill_log": FILE, "server": S, "tokens": N} median tok/s of scripts/bench_prefill_cpu.sh's log
    {"spec_passes": [DIR, ...], "concurrency": C, "corpus": X}
                                                   suffix / no speculation, geometric mean of the
                                                   passes (scripts/tune_cpu_spec_defaults.sh output)

A topic's rows are keyed (TOPICS[...]["key"]); a row of a newer folder (by the folder's date)
replaces the row of an older one with the same key, so the page shows the newest measurement
of each row, and each row says which run it came from. Study-scale runs are read from
`results/*/serving.json` (a list of {"model", "weights", "tp", "corpus", "source",
"concurrency", "max_tokens", "config", "tok_s", "tokens_per_step"}), with the run's
machine, commit and command from a summary.json beside it when there is one.
"""
import glob
import json
import math
import os
import re
import statistics
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RESULTS = os.path.join(ROOT, "results")
CORPORA = ["sharegpt", "humaneval", "mbpp", "swebench", "wildchat", "lmsys", "mix"]


# ---------------------------------------------------------------------------------------------
# Reading raw files


class Run:
    """One (results folder, topic) pair: where its rows came from."""

    def __init__(self, folder, meta):
        self.folder = folder
        self.date = folder[:10]
        self.machine = meta.get("machine")
        self.commit = meta.get("commit")
        self.command = meta.get("command")
        self.used = set()  # the raw files read for the row being resolved

    def path(self, rel):
        return os.path.join(RESULTS, self.folder, rel)

    def load(self, rel):
        self.used.add(rel)
        with open(self.path(rel)) as f:
            return json.load(f)


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def bench_result(doc, corpus):
    for r in doc["results"]:
        if corpus is None or r["corpus"] == corpus:
            return r
    raise KeyError(f"no corpus {corpus}")


def tune_value(run, spec):
    """A `wring tune` folder: one JSON per configuration, one result per corpus."""
    folder, corpus, config = spec["tune"], spec["corpus"], spec["config"]
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(run.path(os.path.join(folder, "*.json"))))
    padded = [n for n in names if re.fullmatch(r"suffix-k\d+", n)]

    def tps(name, c):
        doc = run.load(os.path.join(folder, name + ".json"))
        return bench_result(doc, c)["output_throughput_median"]

    corpora = [c for c in CORPORA if c in {r["corpus"] for r in run.load(os.path.join(folder, "nospec.json"))["results"]}]

    def one(c):
        if config != "bestKpad":
            return tps(config, c), None
        best = max(padded, key=lambda n: tps(n, c))
        return tps(best, c), int(best.split("-k")[1])

    if corpus != "geomean":
        v, k = one(corpus)
        return {"value": v, "k": k}
    return {"value": geomean([one(c)[0] for c in corpora]), "k": None}


def prefill_median(run, spec):
    run.used.add(spec["prefill_log"])
    xs = []
    pat = re.compile(r"^(\S+)\s+n=(\d+)\s.*tok/s=([\d.]+)")
    for line in open(run.path(spec["prefill_log"])):
        m = pat.match(line)
        if m and m[1] == spec["server"] and int(m[2]) == spec["tokens"]:
            xs.append(float(m[3]))
    return statistics.median(xs)


def spec_ratio(run, spec):
    """suffix / nospec of one corpus and concurrency, geometric mean over the passes."""
    xs = []
    for p in spec["spec_passes"]:
        d = os.path.join(p, f"c{spec['concurrency']}", spec["corpus"])
        n = bench_result(run.load(os.path.join(d, "nospec.json")), spec["corpus"])
        s = bench_result(run.load(os.path.join(d, "suffix.json")), spec["corpus"])
        xs.append(s["output_throughput"] / n["output_throughput"])
    return geomean(xs)


def json_path(doc, path):
    for part in path.split(".") if path else []:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def resolve(run, v):
    if not isinstance(v, dict) or "value" in v:
        return v
    if "bench" in v:
        r = bench_result(run.load(v["bench"]), v.get("corpus"))
        return r[v.get("field", "output_throughput_median")]
    if "tune" in v:
        return tune_value(run, v)
    if "json" in v:
        return json_path(run.load(v["json"]), v.get("path"))
    if "rss_kb" in v:
        run.used.add(v["rss_kb"])
        return int(open(run.path(v["rss_kb"])).read().split()[0]) / 1024
    if "prefill_log" in v:
        return prefill_median(run, v)
    if "spec_passes" in v:
        return spec_ratio(run, v)
    raise ValueError(f"unknown value {v}")


def rows_of(topic):
    """The topic's rows, newest folder first per key, each tagged with its Run."""
    runs = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*", "summary.json"))):
        folder = os.path.basename(os.path.dirname(path))
        doc = json.load(open(path))
        t = doc.get("topics", {}).get(topic)
        if t is None:
            continue
        meta = {k: t.get(k, doc.get(k)) for k in ("machine", "commit", "command")}
        runs.append((Run(folder, meta), t["rows"]))
    key = TOPICS[topic]["key"]
    out = {}
    for run, rows in runs:  # oldest first: a newer row replaces an older one in its place
        for row in rows:
            run.used = set()
            r = {k: resolve(run, v) for k, v in row.items() if k != "raw"}
            raw = row.get("raw", [])
            run.used |= {raw} if isinstance(raw, str) else set(raw)
            r["_run"], r["_raw"] = run, sorted(run.used) or ["NOTES.md"]
            out[tuple(str(r.get(k)) for k in key)] = r
    return list(out.values())


# ---------------------------------------------------------------------------------------------
# Formatting


def num(x, digits=0):
    if x is None or x == "":
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        s = num(x["value"], digits)
        return f"{s} (K={x['k']})" if x.get("k") else s
    return f"{x:,.{digits}f}"


def val(x):
    return x["value"] if isinstance(x, dict) else x


def ratio(a, b, digits=2):
    a, b = val(a), val(b)
    return f"×{a / b:.{digits}f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "–"


def pattern(files):
    """One name for a row's raw files: the file, or a glob over their common ends."""
    files = sorted(files)
    if len(files) == 1:
        return f"`{files[0]}`"
    pre = os.path.commonprefix(files)
    suf = os.path.commonprefix([f[::-1] for f in files])[::-1]
    if len(pre) + len(suf) >= min(len(f) for f in files):
        suf = ""
    return f"`{pre}*{suf}` ({len(files)} files)"


class Table:
    """A markdown table whose rows name their run ([n], listed under the table) and raw file."""

    def __init__(self, header):
        self.header = header + ["run", "raw"]
        self.lines = []
        self.runs = []

    def row(self, cells, r=None):
        if r is None:
            self.lines.append(cells + ["", ""])
            return
        run = r["_run"]
        if run not in self.runs:
            self.runs.append(run)
        self.lines.append(cells + [f"[{self.runs.index(run) + 1}]", pattern(r["_raw"])])

    def render(self, aligns=None):
        if not self.lines:
            return ["Not measured yet.", ""]
        aligns = aligns or ["---"] + ["---:"] * (len(self.header) - 3) + ["---", "---"]
        out = ["| " + " | ".join(self.header) + " |", "|" + "|".join(aligns) + "|"]
        out += ["| " + " | ".join(str(c) for c in cells) + " |" for cells in self.lines]
        out.append("")
        for i, run in enumerate(self.runs):
            if run.machine is None and run.commit is None and run.command is None:
                out.append(f"[{i + 1}] {run.date}; machine, commit and command in "
                           f"`results/{run.folder}/NOTES.md`, beside the raw files.")
            else:
                out.append(f"[{i + 1}] {run.date}, {run.machine or '?'}; commit `{run.commit or '?'}`; "
                           f"`{run.command or '?'}`; raw files in `results/{run.folder}/`, notes in its NOTES.md.")
            out.append("")
        return out


# ---------------------------------------------------------------------------------------------
# Topics


def gpu_serving():
    rows = rows_of("gpu-serving")
    cols = ["mix_c32", "humaneval_c32", "mix_c1", "humaneval_c1"]
    t = Table(["server", "mix c=32", "humaneval c=32", "mix c=1", "humaneval c=1"])
    for r in rows:
        t.row([r["server"]] + [num(r.get(c)) for c in cols], r)
    peer = next((r for r in rows if r.get("peer")), None)
    if peer:
        for r in rows:
            if r.get("vs_peer"):
                t.row([f"{r.get('short', r['server'])} / {peer.get('short', peer['server'])}"]
                      + [ratio(r.get(c), peer.get(c), 1) for c in cols])
    return t.render()


def gpu_bestkpad():
    rows = rows_of("gpu-bestkpad")
    t = Table(["corpus", "no-spec c=32", "bestKpad c=32", "ratio", "no-spec c=1", "best padded K c=1", "ratio"])
    for r in rows:
        t.row([r["corpus"], num(r["nospec_c32"]), num(r["best_c32"]), ratio(r["best_c32"], r["nospec_c32"]),
               num(r["nospec_c1"]), num(r["best_c1"]), ratio(r["best_c1"], r["nospec_c1"])], r)
    return t.render()


def gpu_steps():
    t = Table(["model (context)", "batch × q", "ms", "roofline ms", "% of roofline", "× decode 32 × 1"])
    for r in rows_of("gpu-steps"):
        steps = r["steps"]
        decode = {s["model"]: s["ms"] for s in steps if (s["batch"], s["q"]) == (32, 1)}
        for s in steps:
            x = f"{s['ms'] / decode[s['model']]:.2f}" if s["batch"] == 32 and s["model"] in decode else ""
            t.row([f"{s['model']} ({s.get('ctx', '?')})", f"{s['batch']} × {s['q']}", f"{s['ms']:.3f}",
                   f"{s['roofline_ms']:.3f}", f"{100 * s['roofline_ms'] / s['ms']:.0f} %", x], r)
    return t.render()


def gpu_quant():
    shapes = [(1, 1), (8, 1), (32, 1), (32, 5)]
    t = Table(["weights (path)"] + [f"{b} × {q} ms" for b, q in shapes] + ["vs bf16 at 1 × 1 / 32 × 1"])
    for r in rows_of("gpu-quant"):
        steps = r["steps"]
        ms = {}
        for s in steps:
            # the default path of each format; "multi" where the file has no default row
            rank = {"default": 0, "multi": 1}.get(s.get("variant", "default"))
            if rank is None:
                continue
            k = (s["weights"], s["batch"], s["q"])
            if k not in ms or rank < ms[k][0]:
                ms[k] = (rank, s["ms"], s.get("variant", "default"))
        for w in ["bf16", "fp8", "int4", "nvfp4"]:
            cells = [ms.get((w, b, q)) for b, q in shapes]
            if not any(cells):
                continue
            paths = sorted({c[2] for c in cells if c})
            base = [ms.get(("bf16", b, q)) for b, q in shapes]
            vs = " / ".join(ratio(base[i][1], cells[i][1]) if cells[i] and base[i] else "–" for i in (0, 2))
            t.row([f"{w} ({', '.join(paths)})"] + [f"{c[1]:.3f}" if c else "–" for c in cells] + [vs], r)
    return t.render()


def loops(x):
    return f"{len(x)} ({', '.join(x)})" if isinstance(x, list) and x else num(0 if isinstance(x, list) else x)


def cpu_quant():
    t = Table(["candidate vs f32", "verdict", "max \\|Δ logprob\\|", "ppl_rel", "loops introduced"])
    for r in rows_of("cpu-quant"):
        t.row([r["format"], r["verdict"], num(r["max_dlogprob"], 3), f"{100 * r['ppl_rel']:+.2f} %",
               loops(r["loops_introduced"])], r)
    return t.render()


def cpu_serving():
    rows = rows_of("cpu-serving")
    peer = {r["concurrency"]: r for r in rows if r["server"] == "llama.cpp"}
    t = Table(["server", "c", "output tok/s", "vs llama.cpp", "TTFT median ms", "TPOT median ms",
               "ITL p99 ms", "peak RSS MiB"])
    for r in sorted(rows, key=lambda r: (r["concurrency"], r["server"] != "llama.cpp")):
        p = peer.get(r["concurrency"])
        t.row([r["server"], r["concurrency"], num(r["tok_s"], 1),
               ratio(r["tok_s"], p["tok_s"]) if p and p is not r else "", num(r["ttft_ms"], 1),
               num(r["tpot_ms"], 1), num(r["itl_p99_ms"], 1), num(r["rss_mib"])], r)
    return t.render()


def cpu_prefill():
    rows = rows_of("cpu-prefill")
    t = Table(["prompt tokens", "wring tok/s", "llama.cpp tok/s", "wring / llama.cpp"])
    for r in rows:
        t.row([f"{r['tokens']:,}", num(r["wring"], 1), num(r["llama_cpp"], 1), ratio(r["wring"], r["llama_cpp"])], r)
    by = {r["tokens"]: r for r in rows}
    if 512 in by and 4096 in by:
        a, b = by[512], by[4096]
        t.row(["a token at 4,096 / at 512", f"{a['wring'] / b['wring']:.2f}",
               f"{a['llama_cpp'] / b['llama_cpp']:.2f}", ""])
    return t.render()


def cpu_spec():
    rows = rows_of("cpu-spec")
    t = Table(["concurrency"] + CORPORA + ["geomean"])
    for r in rows:
        xs = [r.get(c) for c in CORPORA]
        t.row([r["concurrency"]] + [f"×{x:.2f}" if x else "–" for x in xs] + [f"**×{geomean(xs):.3f}**"], r)
    return t.render()


def drafter():
    t = Table(["K", "tokens/step Arctic", "tokens/step wring", "speculate µs p50 Arctic / wring",
               "append µs p50 Arctic / wring", "bytes per cached token Arctic / wring"])
    for r in rows_of("drafter"):
        t.row([r["k"], num(r["arctic_tok_step"], 3), num(r["wring_tok_step"], 3),
               f"{r['arctic_speculate_us']:.2f} / {r['wring_speculate_us']:.2f}",
               f"{r['arctic_append_us']:.2f} / {r['wring_append_us']:.2f}",
               f"{r['arctic_bytes']} / {r['wring_bytes']}"], r)
    return t.render()


def structured():
    t = Table(["device", "model", "speculation", "concurrency", "unconstrained", "json_schema",
               "json_schema / unconstrained", "forced tool call / unconstrained",
               "unconstrained beside json_schema"])
    for r in rows_of("structured"):
        schema = r.get("json_schema", r.get("constrained"))
        tools = r.get("tools")
        t.row([r["device"], r.get("model", "default"), r.get("speculative", "off"), r["concurrency"],
               num(r["plain"], 1), num(schema, 1), ratio(schema, r["plain"]),
               ratio(tools, r["plain"]) if tools is not None else "–",
               ratio(r["beside"], r["plain_per_stream"]) if r.get("beside") is not None else "–"], r)
    return t.render()


def chat_defaults():
    t = Table(["server defaults", "answered right", "loops", "at the 2,048-token cap", "longest answer (tokens)"])
    for r in rows_of("chat-defaults"):
        t.row([r["settings"], r["right"], r["loops"], r["at_cap"], num(r["longest"])], r)
    return t.render()


def study_scale():
    files = sorted(glob.glob(os.path.join(RESULTS, "*", "serving.json")))
    files = [f for f in files if "study-scale" in os.path.basename(os.path.dirname(f))]
    if not files:
        return ["Not measured yet: no `results/<date>-study-scale/serving.json`.", ""]
    t = Table(["model (weights, TP)", "source", "c", "max tokens", "corpus", "best config", "tok/s",
               "× nospec", "tokens/step"])
    for path in files:
        folder = os.path.basename(os.path.dirname(path))
        meta_path = os.path.join(os.path.dirname(path), "summary.json")
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        run = Run(folder, meta)
        entries = run.load("serving.json")
        groups = {}
        for e in entries:
            g = (e["model"], e.get("weights"), e.get("tp"), e["source"], e["concurrency"], e["max_tokens"])
            groups.setdefault(g, {}).setdefault(e["corpus"], []).append(e)
        for g, by_corpus in groups.items():
            model, weights, tp, source, c, mt = g
            ratios = []
            for corpus, es in by_corpus.items():
                best = max(es, key=lambda e: e["tok_s"])
                base = next((e for e in es if e["config"] == "nospec"), None)
                x = best["tok_s"] / base["tok_s"] if base else None
                ratios.append(x)
                tps = best.get("tokens_per_step")
                t.row([f"{model} ({weights}, TP {tp})", source, c, mt, corpus, best["config"], num(best["tok_s"]),
                       f"×{x:.2f}" if x else "–", f"{tps:.2f}" if tps else "–"],
                      {"_run": run, "_raw": ["serving.json"]})
            g_mean = geomean(ratios)
            t.row([f"{model} ({weights}, TP {tp})", source, c, mt, "**geomean**", "", "",
                   f"**×{g_mean:.2f}**" if g_mean else "–", ""], {"_run": run, "_raw": ["serving.json"]})
    return t.render()


TOPICS = {
    "gpu-serving": {"key": ["server"]},
    "gpu-bestkpad": {"key": ["corpus"]},
    "gpu-steps": {"key": []},
    "gpu-quant": {"key": []},
    "cpu-quant": {"key": ["format"]},
    "cpu-serving": {"key": ["server", "concurrency"]},
    "cpu-prefill": {"key": ["tokens"]},
    "cpu-spec": {"key": ["concurrency"]},
    "drafter": {"key": ["k"]},
    "structured": {"key": ["device", "model", "speculative", "concurrency"]},
    "chat-defaults": {"key": ["settings"]},
}

SECTIONS = [
    ("GPU serving against llama.cpp", gpu_serving,
     "Output tokens/s through each server's HTTP API, the same client (`wring bench serve`) and "
     "prompts, greedy, 256 tokens at most; SmolLM2-135M-Instruct (Q4_1 GGUF, bf16 on the GPU)."),
    ("bestKpad per corpus at concurrency 32 and 1", gpu_bestkpad,
     "`wring tune` through wring's HTTP server on the GPU, output tokens/s: no speculation against "
     "the best padded suffix K per corpus (the K in brackets), 256 tokens at most, greedy."),
    ("Step costs against the roofline", gpu_steps,
     "Graph-replay decode (q = 1) and verify (q = 1 + K) steps on dummy weights; the roofline is the "
     "bytes of weights and K/V a step reads over the copy bandwidth measured in the same call."),
    ("Quantized formats", lambda: gpu_quant() + cpu_quant(),
     "GPU: whole decode/verify steps of dummy Llama-3.1-8B per weight format (graph replay). CPU: "
     "what `wring gate` says of each CPU weight format against the f32 reference; `--cpu-weights "
     "auto` runs the fastest format whose verdict is PASS."),
    ("CPU serving against llama.cpp", cpu_serving,
     "`scripts/bench_cpu_vs_llamacpp.sh`: a fresh server per cell, servers alternating, `mix` "
     "corpus, 32 prompts, 256 tokens at most, temperature 0, the default model's Q4_1 GGUF for "
     "every server. `wring` is the default (`--cpu-weights auto`), `wring-suffix` adds "
     "`--speculative suffix`."),
    ("CPU prefill against llama.cpp", cpu_prefill,
     "`scripts/bench_prefill_cpu.sh`: prompt tokens / time to the first token of `wring generate "
     "--max-tokens 1` (default flags), `llama-bench -p N` beside every wring run; medians."),
    ("CPU speculation: `--speculative suffix` over none", cpu_spec,
     "`wring tune` per corpus, the default `--speculative suffix` (unpadded, adaptive K) against "
     "no speculation, each ratio the geometric mean of two passes in opposite orders."),
    ("Suffix drafter against ArcticInference", drafter,
     "The same trace (96 greedy generations of SmolLM2-135M-Instruct by llama.cpp), the same "
     "parameters, corpus order; Arctic's C++ core called directly. The drafts are identical at "
     "every step (`cargo test -p wring-suffix --test arctic_reference`)."),
    ("Structured-output cost", structured,
     "`scripts/gpu/structured_cost.py`: the same chat prompts plain, with a `response_format` "
     "json_schema and as a forced tool call of the same schema, output tokens/s (constrained "
     "requests stop when the object is complete); the last column is the plain streams' tokens/s "
     "each beside as many json_schema streams, over all-plain streams."),
    ("Everyday answers through the API with the server's defaults", chat_defaults,
     "`scripts/chat_defaults_quality.py --api`: 8 everyday questions × seeds 1–10, each request "
     "carrying only its messages and seed, so the server's defaults decide; the default model "
     "on the CPU."),
    ("Study-scale runs", study_scale,
     "Larger models and tensor parallelism: the best configuration per (model, corpus, "
     "concurrency, max tokens, source) and its ratio over no speculation, with the geometric "
     "mean per group."),
]

HEAD = """# Benchmarks

The current state of each topic, generated by `scripts/benchmarks.py` from the data under
`results/` (the test suite fails when this page and the data disagree: edit the data, then run
the script). Each row names its run (machine, commit, command, listed under its table) and its
raw file; the dated history of every measurement, with the reasoning, is in
`results/<date>-<topic>/NOTES.md` beside its data. Shared machines drift: compare ratios measured
side by side, not absolute numbers across runs.
"""


def page():
    out = [HEAD]
    for title, fn, intro in SECTIONS:
        out += [f"## {title}", "", intro, ""]
        out += fn()
    while out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def main():
    global RESULTS
    args, root, check = sys.argv[1:], ROOT, False
    while args:
        a = args.pop(0)
        if a == "--check":
            check = True
        elif a == "--root" and args:
            root = args.pop(0)
        else:
            sys.exit(__doc__)
    RESULTS = os.path.join(root, "results")
    page_path = os.path.join(root, "BENCHMARKS.md")
    text = page()
    if check:
        old = open(page_path).read() if os.path.exists(page_path) else ""
        if old != text:
            import difflib
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       "BENCHMARKS.md", "generated"))
            sys.exit("BENCHMARKS.md differs from the data under results/: run scripts/benchmarks.py")
        return
    open(page_path, "w").write(text)


if __name__ == "__main__":
    main()
