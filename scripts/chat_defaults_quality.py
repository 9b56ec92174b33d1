#!/usr/bin/env python3
"""Answer quality of chat sampling settings on the default model, through the real CLI.

Runs `wring generate --chat --prompt Q --seed S` (default weights choice) for each everyday
question × seed under each named setting, and prints per setting and question how many answers
contain the expected word and how many are degenerate loops. A loop is the rule of
`wring_gate::degenerate::is_loop` applied to whitespace-separated words instead of token ids
(no tokenizer here): at least 16 words, at least half of them inside a 4-word span that already
occurred earlier in the answer. Counts, not timings: fine on a busy machine.

    cargo build --release -p wring
    python3 scripts/chat_defaults_quality.py --wring target/release/wring --seeds 10

Settings: `default` (no sampling flag: what the binary resolves by itself), `old` (the earlier
defaults as flags: temperature 0.7, top_p 0.95, min_p 0.05), `card` (SmolLM2's model card,
temperature 0.2, top_p 0.9, as flags), `card_rp` (the card with repetition penalty 1.1), `greedy`
(temperature 0, one run: seeds do not matter); each with DRY off (`--dry-multiplier 0`, since
chat turns DRY on by default). `old_dry`, `card_dry`, `greedy_dry`: the same with DRY at
`--dry-multiplier` M (--dry, default 0.8) and llama.cpp's base 1.75 and allowed length 2.

    python3 scripts/chat_defaults_quality.py --settings old_dry,card_dry,greedy_dry --dry 0.8

Through the HTTP API instead (`--api URL` of a running `wring serve`): each question × seed is one
`POST /v1/chat/completions` with only `messages` and `seed` (no temperature, no max_tokens:
what most clients send, so the server's defaults decide everything), setting `api`; or `api_nodry`
(the same with `dry_multiplier: 0`). Besides right and loops it counts answers that reached the
cap (`finish_reason` "length") and prints the longest answer's tokens.

    wring serve --port 8000 &
    python3 scripts/chat_defaults_quality.py --api http://127.0.0.1:8000 --settings api --seeds 10
"""

import argparse
import json
import re
import subprocess
import sys
import urllib.request

# (question, words any of which counts as the right answer); the first five are the test's
# (crates/wring/tests/first_answer.rs), all eight answered right greedily by the default model.
QUESTIONS = [
    ("What is the capital of France?", ["paris"]),
    ("What is 2+2?", ["4", "four"]),
    ("What color is the sky on a clear day?", ["blue"]),
    ("Name a primary color.", ["red", "blue", "yellow"]),
    ("Who wrote Romeo and Juliet?", ["shakespeare"]),
    ("What is the boiling point of water in Celsius?", ["100"]),
    ("How many days are in a week?", ["7", "seven"]),
    ("What is the opposite of hot?", ["cold"]),
]

OFF = ["--dry-multiplier", "0"]
SETTINGS = {
    "default": [],
    "old": ["--temperature", "0.7", "--top-p", "0.95", "--min-p", "0.05", *OFF],
    "card": ["--temperature", "0.2", "--top-p", "0.9", *OFF],
    "card_rp": ["--temperature", "0.2", "--top-p", "0.9", "--repetition-penalty", "1.1", *OFF],
    "greedy": ["--temperature", "0", *OFF],
}
for name in ["old", "card", "greedy"]:
    SETTINGS[name + "_dry"] = SETTINGS[name][: -len(OFF)] + ["--dry-multiplier", "DRY"]

NGRAM, MIN_WORDS, LOOP_COVERAGE = 4, 16, 0.5


def is_loop(words):
    if len(words) < MIN_WORDS:
        return False
    seen, covered = set(), [False] * len(words)
    for i in range(len(words) - NGRAM + 1):
        w = tuple(words[i : i + NGRAM])
        if w in seen:
            covered[i : i + NGRAM] = [True] * NGRAM
        seen.add(w)
    return sum(covered) / len(words) >= LOOP_COVERAGE


def has_word(text, words):
    return any(re.search(r"(?<![0-9a-z])" + re.escape(w) + r"(?![0-9a-z])", text.lower()) for w in words)


def answer(wring, question, seed, flags, max_tokens):
    cmd = [wring, "generate", "--chat", "--prompt", question, "--seed", str(seed),
           "--max-tokens", str(max_tokens), "--kv-cache-mib", "64", "--max-model-len", "512", *flags]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return out.stdout.strip()


API_SETTINGS = {"api": {}, "api_nodry": {"dry_multiplier": 0}}


def api_answer(base, question, seed, extra, api_key):
    """(text, finish_reason, completion_tokens) of one plain chat request to `base`."""
    body = {"messages": [{"role": "user", "content": question}], "seed": seed, **extra}
    req = urllib.request.Request(base.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    c = out["choices"][0]
    return c["message"]["content"] or "", c["finish_reason"], out["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wring", default="target/release/wring")
    ap.add_argument("--seeds", type=int, default=10, help="seeds 1..N per question")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--settings", default="old,default,greedy", help=f"comma-separated, of {list(SETTINGS)}")
    ap.add_argument("--dry", default="0.8", help="DRY multiplier of the *_dry settings")
    ap.add_argument("--json", help="write every answer here")
    ap.add_argument("--api", help="base URL of a running `wring serve`: ask through the HTTP API (settings api, api_nodry)")
    ap.add_argument("--api-key", default="none", help="with --api: the server's key, if it has one")
    args = ap.parse_args()
    for flags in SETTINGS.values():
        flags[:] = [args.dry if f == "DRY" else f for f in flags]
    rows, answers = [], []
    for name in args.settings.split(","):
        seeds = [1] if name.startswith("greedy") else range(1, args.seeds + 1)
        if name.startswith("api") and not args.api:
            sys.exit(f"setting {name} needs --api URL")
        total_ok = total_loop = total_capped = total = longest = 0
        for q, words in QUESTIONS:
            ok = loops = capped = 0
            for s in seeds:
                if name.startswith("api"):
                    a, finish, tokens = api_answer(args.api, q, s, API_SETTINGS[name], args.api_key)
                else:
                    a, finish, tokens = answer(args.wring, q, s, SETTINGS[name], args.max_tokens), None, None
                good, looped = has_word(a, words), is_loop(a.split())
                ok += good
                loops += looped
                capped += finish == "length"
                longest = max(longest, tokens or 0)
                answers.append({"setting": name, "question": q, "seed": s, "right": good, "loop": looped,
                                "finish_reason": finish, "completion_tokens": tokens, "answer": a})
            n = len(seeds)
            rows.append((name, q, ok, loops, n))
            total_ok, total_loop, total_capped, total = total_ok + ok, total_loop + loops, total_capped + capped, total + n
            cap = f"  capped {capped}/{n}" if name.startswith("api") else ""
            print(f"{name:8} {q:50} right {ok}/{n}  loops {loops}/{n}{cap}", flush=True)
        rows.append((name, "all", total_ok, total_loop, total))
        cap = f"  capped {total_capped}/{total}  longest {longest} tokens" if name.startswith("api") else ""
        print(f"{name:8} {'all':50} right {total_ok}/{total} ({total_ok / total:.0%})  loops {total_loop}/{total}{cap}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "answers": answers}, f, indent=1)


if __name__ == "__main__":
    main()
