#!/usr/bin/env python3
"""GGUF files of the tiny transformers-made models in tests/data/hf_tiny, laid out as
llama.cpp's convert_hf_to_gguf.py lays them out, written with the `gguf` package's
GGUFWriter: the same weights in the file format people download (crates/model/tests/
gguf_models.rs checks each file against the model's transformers reference).

  qwen3.gguf        general.architecture "qwen3": per-head q/k RMSNorm tensors
                    (blk.N.attn_q_norm / attn_k_norm), q/k rows as Hugging Face stores them
                    (llama.cpp rotates qwen3's halves, NEOX style: no permutation)
  qwen3.Q8_0.gguf   the same model with every matrix quantised to Q8_0 by gguf-py
                    (norms and other 1-D tensors stay F32, as llama.cpp keeps them)
  qwen3_moe.gguf    "qwen3moe": qwen3moe.expert_count / expert_used_count /
                    expert_feed_forward_length, the router blk.N.ffn_gate_inp and the experts
                    stacked into blk.N.ffn_{gate,up,down}_exps (numpy [expert, out, in], so
                    GGUF dims [in, out, expert]); the model's dense layer (mlp_only_layers)
                    keeps blk.N.ffn_{gate,up,down}, the names llama.cpp's tensor map gives it
  mixtral.gguf      "llama" with llama.expert_count > 0 (what llama.cpp writes for Mixtral):
                    the same stacked experts, and q/k rows permuted head by head into
                    llama.cpp's adjacent-pair RoPE order
  deepseek_v3.gguf  "deepseek2" as llama.cpp writes DeepSeek-V3/R1: latent attention
                    (attn_q_a / attn_q_a_norm / attn_q_b, attn_kv_a_mqa, attn_kv_a_norm, and
                    kv_b_proj split per head into attn_k_b, transposed, and attn_v_b), the
                    .attention.key_length_mla / value_length_mla keys beside the MQA-form
                    key_length (kv_lora_rank + rope) and value_length (kv_lora_rank), YaRN
                    as rope.scaling.* with yarn_log_multiplier = 0.1 x mscale_all_dim,
                    sigmoid gating (expert_gating_func 2) with the correction bias
                    blk.N.exp_probs_b.bias, expert groups, the routed scale, shared experts
                    (ffn_*_shexp) and leading dense layers (leading_dense_block_count); the
                    multi-token-prediction layer is left out, as llama.cpp leaves it

Matrices are stored BF16 (the checkpoints' own values, bit for bit), the router and every
1-D tensor F32 (exact too). The tokenizer is the model's tiny byte-level BPE from
tokenizer.json, as llama.cpp writes a BPE vocabulary: tokenizer.ggml.model "gpt2",
tokens by id, merges as "a b", token types (special added tokens CONTROL), bos/eos/pad/
unk ids from tokenizer_config.json, and tokenizer.chat_template from chat_template.jinja.
tokenizer.ggml.pre is "gpt2": the tiny tokenizers split text with GPT-2's byte-level
regex (llama.cpp names the pre-tokenizer by hashing the tokenizer's output; a real Qwen3
file says "qwen2", a real Mixtral one uses SentencePiece).

Needs only numpy and gguf (scripts/reference/requirements.txt); the safetensors files are
read here directly (numpy has no bfloat16).

  scripts/reference/make_gguf_tiny_models.sh    # the venv under target/, then this
"""
import argparse
import json
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

MODELS = {
    "qwen3": {"arch": "qwen3", "q8_0": True},
    "qwen3_moe": {"arch": "qwen3moe", "q8_0": False},
    "mixtral": {"arch": "llama", "q8_0": False},
    "deepseek_v3": {"arch": "deepseek2", "q8_0": False},
}


def read_safetensors(model_dir):
    """Every tensor of the checkpoint (one file or an index of shards) as
    name -> (dtype, shape, raw little-endian bytes)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        with open(os.path.join(model_dir, name), "rb") as f:
            blob = f.read()
        n = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8 : 8 + n])
        base = 8 + n
        for k, v in header.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            out[k] = (v["dtype"], v["shape"], blob[base + a : base + b])
    return out


def as_bf16_bits(dtype, shape, raw):
    assert dtype == "BF16", f"expected BF16 tensors, got {dtype}"
    return np.frombuffer(raw, dtype="<u2").reshape(shape).copy()


def bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def permute_rows(w, n_heads):
    """Hugging Face q/k rows (each head: first half, second half) into llama.cpp's order for
    adjacent-pair RoPE (each head: the two halves interleaved)."""
    rows = w.shape[0]
    head_dim = rows // n_heads
    return (
        w.reshape(n_heads, 2, head_dim // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def gguf_names(cfg, tensors):
    """(gguf name, hf names) in llama.cpp's order: embedding, layers, output norm, output.
    Stacked experts list one Hugging Face name per expert."""
    L = cfg["num_hidden_layers"]
    out = [("token_embd.weight", ["model.embed_tokens.weight"])]
    for l in range(L):
        p = f"model.layers.{l}"
        b = f"blk.{l}"
        out.append((f"{b}.attn_norm.weight", [f"{p}.input_layernorm.weight"]))
        for g, h in [("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")]:
            out.append((f"{b}.{g}.weight", [f"{p}.self_attn.{h}.weight"]))
        for g, h in [("attn_q_norm", "q_norm"), ("attn_k_norm", "k_norm")]:
            if f"{p}.self_attn.{h}.weight" in tensors:
                out.append((f"{b}.{g}.weight", [f"{p}.self_attn.{h}.weight"]))
        out.append((f"{b}.ffn_norm.weight", [f"{p}.post_attention_layernorm.weight"]))
        if f"{p}.block_sparse_moe.gate.weight" in tensors:  # Mixtral
            n = cfg["num_local_experts"]
            out.append((f"{b}.ffn_gate_inp.weight", [f"{p}.block_sparse_moe.gate.weight"]))
            for g, w in [("ffn_gate_exps", "w1"), ("ffn_up_exps", "w3"), ("ffn_down_exps", "w2")]:
                out.append((f"{b}.{g}.weight", [f"{p}.block_sparse_moe.experts.{e}.{w}.weight" for e in range(n)]))
        elif f"{p}.mlp.gate.weight" in tensors:  # Qwen3-MoE sparse layer
            n = cfg.get("num_experts") or cfg["num_local_experts"]
            out.append((f"{b}.ffn_gate_inp.weight", [f"{p}.mlp.gate.weight"]))
            for g, w in [("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"), ("ffn_down_exps", "down_proj")]:
                out.append((f"{b}.{g}.weight", [f"{p}.mlp.experts.{e}.{w}.weight" for e in range(n)]))
        else:
            for g, h in [("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")]:
                out.append((f"{b}.{g}.weight", [f"{p}.mlp.{h}.weight"]))
    out.append(("output_norm.weight", ["model.norm.weight"]))
    if "lm_head.weight" in tensors and not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", ["lm_head.weight"]))
    return out


def deepseek2_names(cfg, tensors):
    """(gguf name, hf names, how) for a DeepSeek-V3 checkpoint: how is None (as stored),
    "k_b" or "v_b" (the halves of kv_b_proj)."""
    L = cfg["num_hidden_layers"]
    out = [("token_embd.weight", ["model.embed_tokens.weight"], None)]
    for l in range(L):
        p, b = f"model.layers.{l}", f"blk.{l}"
        a = f"{p}.self_attn"
        out.append((f"{b}.attn_norm.weight", [f"{p}.input_layernorm.weight"], None))
        for g, h in [("attn_q_a", "q_a_proj"), ("attn_q_a_norm", "q_a_layernorm"), ("attn_q_b", "q_b_proj"),
                     ("attn_q", "q_proj"), ("attn_kv_a_mqa", "kv_a_proj_with_mqa"),
                     ("attn_kv_a_norm", "kv_a_layernorm"), ("attn_output", "o_proj")]:
            if f"{a}.{h}.weight" in tensors:
                out.append((f"{b}.{g}.weight", [f"{a}.{h}.weight"], None))
        out.append((f"{b}.attn_k_b.weight", [f"{a}.kv_b_proj.weight"], "k_b"))
        out.append((f"{b}.attn_v_b.weight", [f"{a}.kv_b_proj.weight"], "v_b"))
        out.append((f"{b}.ffn_norm.weight", [f"{p}.post_attention_layernorm.weight"], None))
        if f"{p}.mlp.gate.weight" in tensors:
            n = cfg["n_routed_experts"]
            out.append((f"{b}.ffn_gate_inp.weight", [f"{p}.mlp.gate.weight"], None))
            out.append((f"{b}.exp_probs_b.bias", [f"{p}.mlp.gate.e_score_correction_bias"], None))
            for g, w in [("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")]:
                out.append((f"{b}.{g}_exps.weight", [f"{p}.mlp.experts.{e}.{w}.weight" for e in range(n)], None))
                out.append((f"{b}.{g}_shexp.weight", [f"{p}.mlp.shared_experts.{w}.weight"], None))
        else:
            for g, h in [("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")]:
                out.append((f"{b}.{g}.weight", [f"{p}.mlp.{h}.weight"], None))
    out.append(("output_norm.weight", ["model.norm.weight"], None))
    if not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", ["lm_head.weight"], None))
    return out


def split_kv_b(bits, how, cfg):
    """kv_b_proj ([heads x (nope + v), kv_lora]) as llama.cpp splits it: attn_k_b
    [heads, kv_lora, nope] (each head's k rows transposed), attn_v_b [heads, v, kv_lora]."""
    heads, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    kv = bits.reshape(heads, nope + v, bits.shape[-1])
    if how == "k_b":
        return np.ascontiguousarray(kv[:, :nope, :].transpose(0, 2, 1))
    return np.ascontiguousarray(kv[:, nope:, :])


def add_deepseek2_keys(w, cfg):
    """The metadata llama.cpp's converter writes for a DeepSeek-V3 checkpoint."""
    heads, rope_dim = cfg["num_attention_heads"], cfg["qk_rope_head_dim"]
    r = cfg["kv_lora_rank"]
    w.add_head_count(heads)
    w.add_head_count_kv(1)  # latent attention as MQA over the latent
    w.add_key_length(r + rope_dim)
    w.add_value_length(r)
    w.add_key_length_mla(cfg["qk_nope_head_dim"] + rope_dim)
    w.add_value_length_mla(cfg["v_head_dim"])
    if cfg.get("q_lora_rank"):
        w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(r)
    w.add_rope_dimension_count(rope_dim)
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_weights_scale(float(cfg["routed_scaling_factor"]))
    w.add_expert_weights_norm(bool(cfg["norm_topk_prob"]))
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    rope = cfg["rope_parameters"]
    assert rope["rope_type"] == "yarn"
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(float(rope["factor"]))
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(float(rope["beta_fast"]))
    w.add_rope_scaling_yarn_beta_slow(float(rope["beta_slow"]))
    w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])


def add_vocab(w, model_dir):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tok_cfg = json.load(f)
    assert tok["model"]["type"] == "BPE"
    pre = tok["pre_tokenizer"]
    assert pre["type"] == "ByteLevel" and pre["use_regex"], pre
    vocab = dict(tok["model"]["vocab"])
    special = {}
    for t in tok["added_tokens"]:
        vocab[t["content"]] = t["id"]
        special[t["id"]] = t["special"]
    by_id = {i: s for s, i in vocab.items()}
    assert sorted(by_id) == list(range(len(by_id))), "token ids are not dense"
    tokens = [by_id[i] for i in range(len(by_id))]
    types = [
        gguf.TokenType.NORMAL
        if i not in special
        else (gguf.TokenType.CONTROL if special[i] else gguf.TokenType.USER_DEFINED)
        for i in range(len(tokens))
    ]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {s: i for i, s in enumerate(tokens)}
    for key, add in [
        ("bos_token", w.add_bos_token_id),
        ("eos_token", w.add_eos_token_id),
        ("unk_token", w.add_unk_token_id),
        ("pad_token", w.add_pad_token_id),
    ]:
        value = tok_cfg.get(key)
        if isinstance(value, dict):  # an AddedToken written out
            value = value.get("content")
        if value:
            add(ids[value])
    if "add_bos_token" in tok_cfg:
        w.add_add_bos_token(bool(tok_cfg["add_bos_token"]))
    template = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(template):
        with open(template, encoding="utf-8") as f:
            w.add_chat_template(f.read())
    else:  # older transformers keep it in tokenizer_config.json
        w.add_chat_template(tok_cfg["chat_template"])
    return len(tokens)


def write(name, spec, model_dir, path, matrix_type):
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    tensors = read_safetensors(model_dir)
    arch = spec["arch"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{name}")
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    if arch != "deepseek2":
        w.add_head_count(heads)
        w.add_head_count_kv(kv_heads)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    rope = cfg.get("rope_parameters") or {}
    w.add_rope_freq_base(float(cfg.get("rope_theta", rope.get("rope_theta"))))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    if arch == "deepseek2":
        add_deepseek2_keys(w, cfg)
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("moe_intermediate_size"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if matrix_type == Q.Q8_0 else gguf.LlamaFileType.MOSTLY_BF16)
    n_vocab = add_vocab(w, model_dir)
    assert n_vocab == cfg["vocab_size"], (n_vocab, cfg["vocab_size"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    names = deepseek2_names(cfg, tensors) if arch == "deepseek2" else [(g, h, None) for g, h in gguf_names(cfg, tensors)]
    for gname, hf, how in names:
        parts = [as_bf16_bits(*tensors[h]) for h in hf]
        bits = parts[0] if len(parts) == 1 else np.stack(parts)
        if how is not None:
            bits = split_kv_b(bits, how, cfg)
        if arch == "llama" and (".attn_q." in gname or ".attn_k." in gname):
            bits = permute_rows(bits, heads if ".attn_q." in gname else kv_heads)
        if bits.ndim == 1 or gname.endswith("ffn_gate_inp.weight"):
            w.add_tensor(gname, bits_to_f32(bits))
        elif matrix_type == Q.BF16:
            w.add_tensor(gname, bits, raw_dtype=Q.BF16)
        else:
            w.add_tensor(gname, gguf.quants.quantize(bits_to_f32(bits), matrix_type), raw_dtype=matrix_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: {os.path.getsize(path) / 1024:.0f} KiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tests/data/hf_tiny", help="the Hugging Face directories")
    ap.add_argument("--out", default="tests/data/gguf_tiny")
    ap.add_argument("names", nargs="*", help="the models to write (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, spec in MODELS.items():
        if args.names and name not in args.names:
            continue
        src = os.path.join(args.models, name)
        write(name, spec, src, os.path.join(args.out, f"{name}.gguf"), Q.BF16)
        if spec["q8_0"]:
            write(name, spec, src, os.path.join(args.out, f"{name}.Q8_0.gguf"), Q.Q8_0)


if __name__ == "__main__":
    main()
