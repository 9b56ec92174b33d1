#!/usr/bin/env python3
"""Hugging Face transformers peer for the serving benchmark: greedy `generate` in bf16 on the
GPU, the default model loaded from the same GGUF (transformers dequantises it), the first
HumanEval prompts as a user turn of the model's chat template, max_new_tokens 256.
Output tokens/s counts each row's tokens up to and including its end-of-turn token.

  python3 scripts/gpu/hf_generate.py --gguf MODEL.gguf --corpus-dir DIR --batches 1,8,32 --out hf.json
Needs the `gguf` package (transformers' GGUF loader) on PYTHONPATH.
"""
import argparse
import gzip
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(tok, text):
    try:
        if tok.chat_template:
            return tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
    except Exception as e:  # noqa: BLE001 - fall back to the template written out
        print(f"chat template failed ({e}); using ChatML", file=sys.stderr)
    return (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--corpus-dir", required=True)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    d, f = os.path.split(a.gguf)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16)
    model = model.to("cuda").eval()
    print(f"loaded in {time.time() - t0:.1f} s: {type(model).__name__}, {type(tok).__name__}")
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    eos = {tok.eos_token_id}
    for t in ("<|im_end|>", "<|endoftext|>"):
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tok.unk_token_id:
            eos.add(i)
    eos = sorted(x for x in eos if x is not None)

    with gzip.open(os.path.join(a.corpus_dir, "HumanEval.jsonl.gz"), "rt") as fh:
        prompts = [json.loads(line)["prompt"] for line in fh if line.strip()]

    def run(batch, n, max_new):
        total = 0
        for i in range(0, n, batch):
            texts = [chatml(tok, p) for p in prompts[i : i + batch]]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to("cuda")
            with torch.inference_mode():
                out = model.generate(
                    **enc,
                    max_new_tokens=max_new,
                    do_sample=False,
                    eos_token_id=eos,
                    pad_token_id=tok.pad_token_id,
                )
            for row in out[:, enc["input_ids"].shape[1] :].tolist():
                k = len(row)
                for j, t in enumerate(row):
                    if t in eos:
                        k = j + 1
                        break
                total += k
        return total

    results = []
    for b in [int(x) for x in a.batches.split(",")]:
        n = max(b, 4) if b == 1 else b
        run(b, b, 8)  # warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        tokens = run(b, n, a.max_new_tokens)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        r = {"batch": b, "prompts": n, "output_tokens": tokens, "seconds": dt, "tok_s": tokens / dt}
        print(json.dumps(r))
        results.append(r)
    meta = {
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "device": torch.cuda.get_device_name(0),
        "corpus": "humaneval (first prompts, file order)",
        "max_new_tokens": a.max_new_tokens,
        "dtype": "bfloat16",
    }
    json.dump({"meta": meta, "results": results}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
