#!/usr/bin/env python3
"""Tiny random-weight Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3 models and Hugging Face
`transformers`' outputs on them: the reference wring's loader and forward pass are checked
against (crates/model/tests/hf_reference.rs, crates/engine/tests/hf_models_spec_lossless.rs).

Nothing is downloaded: each model is built by `AutoModelForCausalLM.from_config` from a
config written here (hidden 64, 2-3 layers), its weights drawn from a seeded generator and
rounded to bf16, saved with `save_pretrained` (bf16 safetensors; the Mixtral one sharded
with an index, as large checkpoints are), beside a tiny byte-level BPE tokenizer trained
here with the `tokenizers` library on the repository's own test prompts, and a chat
template of the model's style (DeepSeek's inside tokenizer_config.json, as DeepSeek ships
it). transformers then runs in float32 on those exact weights:

  * the logits of every position of each prompt (rounded to 5 decimals);
  * 32 greedy tokens from each prompt (a full forward pass per step, no cache, no stop at
    EOS), with the top-8 logits of every step and the margin between the best two;
  * the chat template rendered by `apply_chat_template` for a few conversations.

It asserts that no greedy step and no routing decision is a near-tie (margins above
1e-3 and routing gaps above 1e-4: for DeepSeek both the group and the expert choice), so a
float32 implementation that differs in the last bits still reproduces every id and every
expert choice; and, for DeepSeek, that its router's correction bias changes some of them.

  scripts/reference/make_hf_tiny_models.sh [--only NAME...]   # the venv under target/, then this

Writes tests/data/hf_tiny/<name>/ (the model directory) and
tests/data/hf_tiny/<name>.reference.json (see tests/data/README.md).
"""
import argparse
import json
import math
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

VOCAB = 384
GREEDY_STEPS = 32
TOP = 8

# ChatML as Qwen3's template writes it (an empty think block when thinking is off).
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
# Mistral's instruction format: BOS, then [INST] user [/INST] answer</s> turns.
INST_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message.role == 'user' %}"
    "{{- '[INST] ' + message.content + ' [/INST]' }}"
    "{%- else %}"
    "{{- message.content + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}"
)

# DeepSeek-V3's template as its tokenizer_config.json writes it, without the tool-call
# branches: system messages joined at the front after BOS, then User/Assistant turns.
DEEPSEEK_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}"
    "{%- if ns.is_first_sp %}"
    "{% set ns.system_prompt = ns.system_prompt + message['content'] %}"
    "{% set ns.is_first_sp = false %}"
    "{%- else %}"
    "{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{{ bos_token }}{{ ns.system_prompt }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- set ns.is_tool = false -%}"
    "{{'<｜User｜>' + message['content']}}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}"
    "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    "{%- endif %}"
    "{%- endfor -%}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"
)

CHATML = {
    "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
    # Added tokens that are text, not control tokens (Qwen3's tokenizer has them
    # "special": false, so a decoder that skips special tokens keeps them in the output
    # and a reasoning parser can find them).
    "text_tokens": ["<think>", "</think>"],
    "bos": None,
    "eos": "<|im_end|>",
    "pad": "<|endoftext|>",
    "eos_ids": ["<|im_end|>", "<|endoftext|>"],
    "template": CHATML_TEMPLATE,
}
INST = {
    "specials": ["<unk>", "<s>", "</s>"],
    "bos": "<s>",
    "eos": "</s>",
    "pad": None,
    "eos_ids": ["</s>"],
    "template": INST_TEMPLATE,
}

DEEPSEEK = {
    "specials": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
    "bos": "<｜begin▁of▁sentence｜>",
    "eos": "<｜end▁of▁sentence｜>",
    "pad": None,
    "eos_ids": ["<｜end▁of▁sentence｜>"],
    "template": DEEPSEEK_TEMPLATE,
    # DeepSeek's tokenizer_config.json: the template inside it, BOS as an AddedToken and
    # added to prompts.
    "template_in_tokenizer_config": True,
    "conversations": [
        [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a primary color."},
        ]
    ],
}

MODELS = {
    # Qwen3 dense: head_dim 32 with hidden 64 and 4 heads (q is wider than the hidden
    # size, as in Qwen3-30B-A3B), tied embeddings (as Qwen3-0.6B..4B).
    "qwen3": {
        "style": CHATML,
        "seed": 1,
        "shard": None,
        "config": dict(
            model_type="qwen3",
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=1024,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            attention_bias=False,
        ),
    },
    # Qwen3-MoE: 16 experts, 4 a token, normalised weights; layer 1 dense (mlp_only_layers).
    "qwen3_moe": {
        "style": CHATML,
        "seed": 2,
        "shard": None,
        "config": dict(
            model_type="qwen3_moe",
            hidden_size=64,
            intermediate_size=96,
            moe_intermediate_size=32,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            num_experts=16,
            num_experts_per_tok=4,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            max_position_embeddings=1024,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            tie_word_embeddings=False,
            attention_bias=False,
        ),
    },
    # Mixtral: 8 experts, top-2; sharded checkpoint with an index.
    "mixtral": {
        "style": INST,
        "seed": 3,
        "shard": "150KB",
        "config": dict(
            model_type="mixtral",
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_local_experts=8,
            num_experts_per_tok=2,
            max_position_embeddings=1024,
            rms_norm_eps=1e-5,
            rope_theta=1000000.0,
            sliding_window=None,
            tie_word_embeddings=False,
        ),
    },
    # DeepSeek-V3: latent attention (q LoRA rank 32, KV LoRA rank 32, heads of 16 + 8
    # rope for q/k and 16 for v, so V is padded in wring's cache), YaRN ×4 with mscale
    # differing from mscale_all_dim (the rotated parts and the softmax both scaled);
    # layer 0 dense, then 16 routed experts in 4 groups of which 2 are eligible, 4 a
    # token, sigmoid scores with a correction bias, weights × 2.5, and 2 shared experts.
    "deepseek_v3": {
        "style": DEEPSEEK,
        "seed": 4,
        "shard": None,
        "correction_bias_std": 0.1,
        "config": dict(
            model_type="deepseek_v3",
            hidden_size=64,
            intermediate_size=96,
            moe_intermediate_size=32,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=4,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            n_routed_experts=16,
            n_shared_experts=2,
            num_experts_per_tok=4,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            first_k_dense_replace=1,
            max_position_embeddings=1024,
            rms_norm_eps=1e-6,
            rope_parameters=dict(
                rope_type="yarn",
                rope_theta=10000.0,
                factor=4.0,
                original_max_position_embeddings=256,
                beta_fast=32,
                beta_slow=1,
                mscale=1.0,
                mscale_all_dim=0.8,
            ),
            rope_interleave=True,
            tie_word_embeddings=False,
            attention_bias=False,
        ),
    },
}

# Raw prompts (their logits at every position) and chat conversations (rendered by the
# template; the first one's rendering is also a logits prompt; a style may add its own).
RAW_PROMPTS = [
    "The three primary colors are",
    "def add(a, b):\n    return",
]
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "user", "content": "Write a function to add two numbers."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
        {"role": "user", "content": "Now subtract them."},
    ],
]


def corpus(repo):
    texts = []
    for path in ["tests/data/golden/prompts.jsonl", "tests/data/traces/prompts.jsonl"]:
        with open(os.path.join(repo, path), encoding="utf-8") as f:
            texts += [json.loads(line)["user"] for line in f if line.strip()]
    return texts + RAW_PROMPTS


def build_tokenizer(texts, style):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=style["specials"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if style.get("text_tokens"):
        # The trainer makes every listed token special; keep their ids, unmark these.
        spec = json.loads(tok.to_str())
        for added in spec["added_tokens"]:
            if added["content"] in style["text_tokens"]:
                added["special"] = False
        tok = Tokenizer.from_str(json.dumps(spec))
    kw = {"eos_token": style["eos"]}
    if style["bos"]:
        kw["bos_token"] = style["bos"]
    if style["pad"]:
        kw["pad_token"] = style["pad"]
    if "<unk>" in style["specials"]:
        kw["unk_token"] = "<unk>"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **kw)
    fast.chat_template = style["template"]
    return fast


def randomize(model, seed):
    """Seeded weights rounded to bf16: norms 1 ± 0.1, the embedding N(0, 1), every other
    matrix N(0, gain²/fan_in), with gain 3 for the matrices that write the residual stream
    (o, down, the experts' down) so the layers, not the input token's own embedding, decide
    the next token (with gain 1 a tied model repeats its input)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            r = torch.randn(p.shape, generator=g)
            if p.dim() == 1:
                v = 1.0 + 0.1 * r
            elif "embed_tokens" in name:
                v = r
            else:
                gain = 3.0 if ("o_proj" in name or "down_proj" in name) else 1.0
                v = gain * r / math.sqrt(p.shape[-1])
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def randomize_buffers(model, spec, seed):
    """DeepSeek's router correction bias (a buffer transformers starts at zero):
    N(0, std²), rounded to bf16."""
    std = spec.get("correction_bias_std")
    if not std:
        return
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                v = std * torch.randn(b.shape, generator=g)
                b.copy_(v.to(torch.bfloat16).to(torch.float32))


def deepseek_choices(m, logits, with_bias=True):
    """DeepSeek's routing of router logits (transformers' DeepseekV3TopkRouter): the group
    scores, the masked biased scores and the chosen experts."""
    scores = logits.float().sigmoid()
    choice = scores + (m.e_score_correction_bias if with_bias else 0.0)
    size = m.num_experts // m.num_group
    gs = choice.view(-1, m.num_group, size).topk(2, dim=-1)[0].sum(dim=-1)
    idx = gs.topk(m.topk_group, dim=-1)[1]
    mask = torch.zeros_like(gs).scatter_(1, idx, 1).bool().repeat_interleave(size, dim=1)
    masked = choice.masked_fill(~mask, float("-inf"))
    chosen = masked.topk(m.top_k, dim=-1)[1].sort(dim=-1).values
    return gs, masked, chosen


def routing_gaps(model, ids, bias_changes=None):
    """The smallest gap, over every token and sparse layer, between the probability of a
    token's last chosen expert and the best expert it did not choose (DeepSeek: between
    the biased scores of the last chosen and the best unchosen group and expert). For
    DeepSeek, `bias_changes` counts the tokens whose experts the correction bias changed."""
    gaps = []
    hooks = []
    for mod in model.modules():
        if type(mod).__name__ == "DeepseekV3TopkRouter":
            def hook(m, inputs, out):
                gs, masked, chosen = deepseek_choices(m, out[0])
                size = m.num_experts // m.num_group
                if m.topk_group < m.num_group:
                    s = gs.sort(dim=-1, descending=True).values
                    gaps.append((s[:, m.topk_group - 1] - s[:, m.topk_group]).min().item())
                if m.top_k < m.topk_group * size:
                    s = masked.sort(dim=-1, descending=True).values
                    gaps.append((s[:, m.top_k - 1] - s[:, m.top_k]).min().item())
                if bias_changes is not None:
                    plain = deepseek_choices(m, out[0], with_bias=False)[2]
                    bias_changes[0] += int((plain != chosen).any(dim=-1).sum())
            hooks.append(mod.register_forward_hook(hook))
        elif type(mod).__name__.endswith("TopKRouter"):
            def hook(m, inputs, out, top_k=mod.top_k):
                logits = out[0] if isinstance(out, tuple) else out
                p = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True).values
                gaps.append((p[:, top_k - 1] - p[:, top_k]).min().item())
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def top(row, n=TOP):
    v, i = row.topk(n)
    return [int(x) for x in i], [round(float(x), 5) for x in v], float(v[0] - v[1])


def make(name, spec, out_dir, texts):
    """The model of the first seed (spec's seed, then + 1000, + 2000, ...) whose greedy
    steps and routing decisions are all clear of near-ties."""
    for attempt in range(20):
        seed = spec["seed"] + 1000 * attempt
        try:
            return make_seeded(name, spec, seed, out_dir, texts)
        except NearTie as e:
            print(f"{name}: seed {seed}: {e}; next seed")
    raise SystemExit(f"{name}: no seed without near-ties")


class NearTie(Exception):
    pass


def make_seeded(name, spec, seed, out_dir, texts):
    style = spec["style"]
    tok = build_tokenizer(texts, style)
    cfg_kw = dict(spec["config"])
    model_type = cfg_kw.pop("model_type")
    ids_of = lambda t: tok.convert_tokens_to_ids(t)
    cfg = AutoConfig.for_model(
        model_type,
        vocab_size=len(tok),
        bos_token_id=ids_of(style["bos"]) if style["bos"] else None,
        eos_token_id=[ids_of(t) for t in style["eos_ids"]],
        pad_token_id=ids_of(style["pad"]) if style["pad"] else None,
        **cfg_kw,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, seed)
    randomize_buffers(model, spec, seed)

    chats = []
    for conv in CONVERSATIONS + style.get("conversations", []):
        text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        ids = tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        chats.append({"messages": conv, "text": text, "ids": [int(i) for i in ids]})
    prompts = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in RAW_PROMPTS]
    prompts.append({"text": chats[0]["text"], "ids": chats[0]["ids"]})

    min_margin, min_gap = math.inf, math.inf
    bias_changes = [0]
    for p in prompts:
        lg = logits_of(model, p["ids"])
        p["logits"] = [[round(float(x), 4) for x in row] for row in lg]
        seq = list(p["ids"])
        steps = []
        for _ in range(GREEDY_STEPS):
            row = logits_of(model, seq)[-1]
            ids, vals, margin = top(row)
            steps.append({"top_ids": ids, "top_logits": vals, "margin": round(margin, 5)})
            min_margin = min(min_margin, margin)
            seq.append(ids[0])
        p["greedy_ids"] = seq[len(p["ids"]) :]
        p["greedy_text"] = tok.decode(p["greedy_ids"])
        p["steps"] = steps
        gap = routing_gaps(model, seq, bias_changes)
        if gap is not None:
            min_gap = min(min_gap, gap)
    if min_margin <= 1e-3:
        raise NearTie(f"a greedy step is a near-tie ({min_margin})")
    if min_gap <= 1e-4:
        raise NearTie(f"a routing decision is a near-tie ({min_gap})")
    if spec.get("correction_bias_std") and bias_changes[0] == 0:
        raise NearTie("the correction bias changes no token's experts")

    model_dir = os.path.join(out_dir, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    save_kw = {"max_shard_size": spec["shard"]} if spec["shard"] else {}
    model.to(torch.bfloat16).save_pretrained(model_dir, **save_kw)
    tok.save_pretrained(model_dir)
    if style.get("template_in_tokenizer_config"):
        move_template_into_tokenizer_config(model_dir, style)
    with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
        # Greedy by default, so `wring generate` on these models is deterministic.
        json.dump(
            {"eos_token_id": [ids_of(t) for t in style["eos_ids"]], "do_sample": False},
            f,
            indent=2,
        )
        f.write("\n")
    ref = {
        "model": name,
        "model_type": model_type,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": seed,
        "min_greedy_margin": round(min_margin, 5),
        "min_routing_gap": None if min_gap is math.inf else round(min_gap, 6),
        **(
            {"tokens_routed_otherwise_without_bias": bias_changes[0]}
            if spec.get("correction_bias_std")
            else {}
        ),
        "prompts": prompts,
        "chats": chats,
    }
    with open(os.path.join(out_dir, f"{name}.reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    size = sum(
        os.path.getsize(os.path.join(model_dir, x)) for x in os.listdir(model_dir)
    )
    print(
        f"{name}: {size / 1024:.0f} KiB, vocab {len(tok)}, min greedy margin {min_margin:.4f}, "
        f"min routing gap {ref['min_routing_gap']}"
    )


def move_template_into_tokenizer_config(model_dir, style):
    """The chat template inside tokenizer_config.json (no chat_template.jinja), BOS as an
    AddedToken object and `add_bos_token`, as DeepSeek's checkpoints ship them."""
    jinja = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)
    path = os.path.join(model_dir, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["add_bos_token"] = True
    cfg["bos_token"] = {
        "__type": "AddedToken",
        "content": style["bos"],
        "lstrip": False,
        "normalized": True,
        "rstrip": False,
        "single_word": False,
    }
    cfg["chat_template"] = style["template"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/data/hf_tiny")
    ap.add_argument("--only", nargs="*", help="model names (default: all)")
    args = ap.parse_args()
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    texts = corpus(repo)
    for name, spec in MODELS.items():
        if not args.only or name in args.only:
            make(name, spec, args.out, texts)


if __name__ == "__main__":
    main()
