#!/usr/bin/env python3
"""Golden outputs for the default model from an independent float32 forward pass.

Reads the GGUF file with the `gguf` package (dequantises Q4_1/Q8_0 to float32), tokenises
with the Hugging Face `tokenizers` library (a byte-level BPE built from the file's own vocabulary
and merges, individual digits split first, as the file's `smollm` pre-tokenizer does), runs a plain
numpy Llama forward pass (RMSNorm, GGUF's adjacent-pair RoPE, grouped-query attention, SwiGLU,
tied output embedding) with a KV cache, and writes greedy continuations with the top logits of
every step. Nothing here shares code with wring: it is the reference wring's tests compare to.

  python3 -m venv /tmp/ref && /tmp/ref/bin/pip install -r scripts/reference/requirements.txt
  /tmp/ref/bin/python scripts/reference/golden.py --model ~/.cache/wring/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --prompts tests/data/golden/prompts.jsonl --out tests/data/golden/smollm2_q41_f32_greedy.jsonl

Prompt records: {"corpus": TAG, "user": TEXT}. Each is rendered as one ChatML user turn without a
system turn (`<|im_start|>user\\nTEXT<|im_end|>\\n<|im_start|>assistant\\n`); special tokens are
matched whole. Output records: corpus, chat_text, prompt_ids, greedy_ids, greedy_text, steps
(top_ids, top_logits rounded to 5 decimals, margin = top1 - top2) — the format of the shared golden
file, see tests/data/golden/README.md.
"""
import argparse
import json

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

EOS_TEXT = "<|im_end|>"
# What the default model's chat template puts first when a conversation has no system message.
DEFAULT_SYSTEM_TURN = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
)


def field(reader, key):
    return reader.fields[key].contents()


def build_tokenizer(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    types = field(reader, "tokenizer.ggml.token_type")
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # Control tokens (type 3) are matched whole, never split by the BPE.
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    )
    return tok


class Model:
    def __init__(self, reader):
        self.n_layers = field(reader, "llama.block_count")
        self.n_heads = field(reader, "llama.attention.head_count")
        self.n_kv = field(reader, "llama.attention.head_count_kv")
        self.hidden = field(reader, "llama.embedding_length")
        self.head_dim = self.hidden // self.n_heads
        self.eps = field(reader, "llama.attention.layer_norm_rms_epsilon")
        self.base = field(reader, "llama.rope.freq_base")
        self.w = {}
        for t in reader.tensors:
            # dequantize() gives (rows, columns) = (out features, in features) for matrices.
            self.w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32)
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def rms(self, x, w):
        x64 = x.astype(np.float64)
        return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.eps)).astype(np.float32) * w

    def rope(self, x, positions):
        # GGUF stores q/k permuted so RoPE rotates adjacent pairs (x[2i], x[2i+1]).
        d = self.head_dim
        inv = self.base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = positions[:, None].astype(np.float64) * inv[None, :]
        cos = np.cos(ang).astype(np.float32)[:, None, :]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def forward(self, ids, cache):
        """Logits of the last position; `cache` holds each layer's K/V and grows."""
        start = cache["len"]
        pos = np.arange(start, start + len(ids))
        x = self.w["token_embd.weight"][ids]
        group = self.n_heads // self.n_kv
        for l in range(self.n_layers):
            p = f"blk.{l}."
            h = self.rms(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).reshape(len(ids), self.n_heads, self.head_dim)
            k = (h @ self.w[p + "attn_k.weight"].T).reshape(len(ids), self.n_kv, self.head_dim)
            v = (h @ self.w[p + "attn_v.weight"].T).reshape(len(ids), self.n_kv, self.head_dim)
            q, k = self.rope(q, pos), self.rope(k, pos)
            ks, vs = cache.setdefault(l, ([], []))
            ks.append(k)
            vs.append(v)
            K, V = np.concatenate(ks), np.concatenate(vs)
            total = K.shape[0]
            att = np.empty((len(ids), self.n_heads, self.head_dim), dtype=np.float32)
            mask = np.arange(total)[None, :] > pos[:, None]
            for hd in range(self.n_heads):
                kv = hd // group
                s = (q[:, hd, :] @ K[:, kv, :].T) / np.sqrt(self.head_dim)
                s = np.where(mask, -np.inf, s)
                s = np.exp(s - s.max(-1, keepdims=True))
                att[:, hd, :] = (s / s.sum(-1, keepdims=True)) @ V[:, kv, :]
            x = x + att.reshape(len(ids), -1) @ self.w[p + "attn_output.weight"].T
            h = self.rms(x, self.w[p + "ffn_norm.weight"])
            g = h @ self.w[p + "ffn_gate.weight"].T
            u = h @ self.w[p + "ffn_up.weight"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ self.w[p + "ffn_down.weight"].T
        cache["len"] = start + len(ids)
        return self.rms(x[-1:], self.w["output_norm.weight"])[0] @ self.out.T


def greedy(model, prompt, max_tokens, top, eos):
    """Greedy continuation of `prompt`: the ids (ending with `eos` if it came) and every step's top logits."""
    cache = {"len": 0}
    logits = model.forward(np.array(prompt), cache)
    ids, steps = [], []
    for _ in range(max_tokens):
        order = np.argsort(-logits, kind="stable")[:top]
        steps.append(
            {
                "top_ids": [int(i) for i in order],
                "top_logits": [round(float(logits[i]), 5) for i in order],
                "margin": round(float(logits[order[0]] - logits[order[1]]), 5),
            }
        )
        ids.append(int(order[0]))
        if ids[-1] == eos:
            break
        logits = model.forward(np.array([ids[-1]]), cache)
    return ids, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument(
        "--trace",
        action="store_true",
        help="write a request trace instead (the model's default system turn first, trace fields, "
        "see tests/data/traces/README.md)",
    )
    a = ap.parse_args()
    reader = GGUFReader(a.model)
    tok = build_tokenizer(reader)
    eos = tok.token_to_id(EOS_TEXT)
    model = Model(reader)
    with open(a.prompts) as f, open(a.out, "w") as out:
        for idx, line in enumerate(l for l in f if l.strip()):
            rec = json.loads(line)
            chat = f"<|im_start|>user\n{rec['user']}<|im_end|>\n<|im_start|>assistant\n"
            if a.trace:
                chat = DEFAULT_SYSTEM_TURN + chat
            prompt = tok.encode(chat, add_special_tokens=False).ids
            ids, steps = greedy(model, prompt, a.max_tokens, a.top, eos)
            text = tok.decode(ids, skip_special_tokens=False)
            if a.trace:
                row = {
                    "idx": idx,
                    "corpus": rec["corpus"],
                    "source_id": f"{rec['corpus']}:fixture-{idx}",
                    "chat_prompt": chat,
                    "prompt_ids": prompt,
                    "output_ids": ids,
                    "output_text": tok.decode([t for t in ids if t != eos]),
                    "finish_reason": "stop" if ids[-1] == eos else "length",
                }
            else:
                row = {
                    "corpus": rec["corpus"],
                    "chat_text": chat,
                    "prompt_ids": prompt,
                    "greedy_ids": ids,
                    "greedy_text": text,
                    "steps": steps,
                }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            margin = min(s["margin"] for s in steps)
            print(f"{rec['corpus']}: {len(prompt)} prompt ids, {len(ids)} out, min margin {margin:.4f}: {text[:50]!r}")


if __name__ == "__main__":
    main()
