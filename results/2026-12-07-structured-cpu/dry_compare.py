#!/usr/bin/env python3
"""Does the default model's loop penalty help its constrained answers? The 16 JSON-person
prompts of structured_cost.py, as json_schema and as a forced tool call (max_tokens 256,
greedy), once with no `dry_multiplier` (the server's default for constrained requests) and
once with 0.8 (the free-text default): how many answers parse and carry every required key,
how many stopped before the cap, and the tokens spent.

    python3 results/2026-12-07-structured-cpu/dry_compare.py [BASE_URL]
"""
import json, urllib.request, sys
sys.path.insert(0, "scripts/gpu")  # run from the repository root
import structured_cost as sc
base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8311"
for dry in (None, 0.8):
    ok = stops = toks = 0
    for i in range(16):
        for mode in ("json_schema", "tools"):
            b = sc.body_of(i, mode)
            b["max_tokens"] = 256
            if dry is not None: b["dry_multiplier"] = dry
            r = sc.post(base, b)
            ch = r["choices"][0]
            toks += r["usage"]["completion_tokens"]
            stops += ch["finish_reason"] != "length"
            try:
                if mode == "tools":
                    v = json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"])
                else:
                    v = json.loads(ch["message"]["content"])
                ok += all(k in v for k in ("name","city","age","hobbies"))
            except Exception as e:
                pass
    print(f"dry={dry}: valid {ok}/32, stopped {stops}/32, tokens {toks}")
