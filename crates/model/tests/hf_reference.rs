//! Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3 against Hugging Face `transformers`: the tiny
//! random-weight models in tests/data/hf_tiny (made by scripts/reference/hf_tiny_models.py)
//! load through wring's own loader (a sharded index for Mixtral, `chat_template.jinja`, a
//! template inside tokenizer_config.json for DeepSeek, bf16 tensors) and
//! on the CPU in f32 reproduce transformers' logits at every prompt position within 1e-3,
//! its 32 greedy tokens exactly (top-8 logits of every step within 1e-3), and its chat
//! template renderings and token ids; a prompt's logits are the same bits whatever else
//! its step holds (the experts of a token never depend on its batch).

#[allow(dead_code)]
mod support;

use serde_json::Value;
use support::{argmax, decode_step, floats, ids, prefill_batch, prompt_logits, test_data_dir};
use wring_model::{load_model, LoadedModel, ModelRunner, ModelSpec, RunnerOptions};

const TOL: f32 = 1e-3;

fn reference(name: &str) -> Value {
    let path = test_data_dir().join(format!("hf_tiny/{name}.reference.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn load(name: &str) -> LoadedModel {
    let dir = test_data_dir().join("hf_tiny").join(name);
    load_model(&ModelSpec {
        model: Some(dir.to_string_lossy().into_owned()),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{name} loads: {e:#}"))
}

fn runner(m: LoadedModel) -> Box<dyn ModelRunner> {
    let opts = RunnerOptions {
        kv_cache_bytes: 16 << 20,
        max_model_len: 256,
        ..Default::default()
    };
    m.into_runner(&opts).unwrap()
}

fn check_model(name: &str, model_type: &str) {
    let rf = reference(name);
    assert_eq!(rf["model_type"], model_type);
    let m = load(name);
    assert_eq!(m.config.architecture, model_type);
    assert_eq!(m.config.vocab_size, 384);
    let tok = m.tokenizer.clone();

    // Chat templates: the text transformers' apply_chat_template rendered, and its ids.
    let template = m
        .chat_template
        .clone()
        .expect("the model has a chat template");
    for chat in rf["chats"].as_array().unwrap() {
        let text = template.render_json(&chat["messages"], None, true).unwrap();
        assert_eq!(text, chat["text"].as_str().unwrap(), "{name}: rendering");
        assert_eq!(tok.encode(&text).unwrap(), ids(&chat["ids"]), "{name}: ids");
    }
    let eos_end = tok.token_to_id(template.eos_token()).unwrap();
    assert!(
        m.eos_token_ids.contains(&eos_end),
        "{name}: stops at its eos"
    );

    let mut r = runner(m);
    let bs = r.block_size();
    for (p_i, p) in rf["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&p["ids"]);
        assert_eq!(
            tok.encode(p["text"].as_str().unwrap()).unwrap(),
            prompt,
            "{name}: prompt {p_i} ids"
        );
        let got = prompt_logits(r.as_mut(), &prompt);
        let want = p["logits"].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        let mut worst = 0f32;
        for (pos, (g, w)) in got.iter().zip(want).enumerate() {
            let w = floats(w);
            assert_eq!(g.len(), w.len());
            for (a, b) in g.iter().zip(&w) {
                let d = (a - b).abs();
                worst = worst.max(d);
                assert!(
                    d < TOL,
                    "{name}: prompt {p_i} position {pos}: logit {a} vs transformers {b}"
                );
            }
        }
        println!(
            "{name}: prompt {p_i}: {} positions, largest |Δ logit| {worst:.2e}",
            got.len()
        );

        // 32 greedy steps, one decode step each.
        let want_ids = ids(&p["greedy_ids"]);
        let mut seq = prompt.clone();
        let blocks: Vec<u32> = (0..((prompt.len() + want_ids.len()).div_ceil(bs) as u32)).collect();
        let mut logits = got.last().unwrap().clone();
        let mut out = vec![];
        for (i, st) in p["steps"].as_array().unwrap().iter().enumerate() {
            for (id, lg) in ids(&st["top_ids"]).iter().zip(floats(&st["top_logits"])) {
                let d = (logits[*id as usize] - lg).abs();
                assert!(
                    d < TOL,
                    "{name}: prompt {p_i} step {i}: logit of {id} is {} vs transformers {lg}",
                    logits[*id as usize]
                );
            }
            let next = argmax(&logits);
            out.push(next);
            seq.push(next);
            if out.len() == want_ids.len() {
                break;
            }
            let step = decode_step(next, seq.len(), blocks.clone(), prompt.len());
            logits = r.forward(&step).unwrap().row(0).to_vec();
        }
        assert_eq!(out.len(), 32);
        assert_eq!(out, want_ids, "{name}: prompt {p_i}: greedy ids");
    }

    // Batch invariance: each prompt's last logits alone, together, and in another order
    // on other blocks are the same bits.
    let prompts: Vec<Vec<u32>> = rf["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    let solo: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| prefill_batch(r.as_mut(), std::slice::from_ref(p), 0).remove(0))
        .collect();
    let together = prefill_batch(r.as_mut(), &prompts, 0);
    let reversed: Vec<Vec<u32>> = prompts.iter().rev().cloned().collect();
    let mut together_rev = prefill_batch(r.as_mut(), &reversed, 5);
    together_rev.reverse();
    for i in 0..prompts.len() {
        assert!(solo[i] == together[i], "{name}: prompt {i} batched differs");
        assert!(
            solo[i] == together_rev[i],
            "{name}: prompt {i} reordered differs"
        );
    }
}

#[test]
fn qwen3_matches_transformers() {
    check_model("qwen3", "qwen3");
}

#[test]
fn qwen3_moe_matches_transformers() {
    let m = load("qwen3_moe");
    let moe = m.config.moe.as_ref().expect("experts");
    assert_eq!((moe.num_experts, moe.top_k), (16, 4));
    assert!(moe.norm_topk_prob);
    assert_eq!(moe.dense_layers, vec![1], "mlp_only_layers");
    assert!(m.config.qk_norm);
    check_model("qwen3_moe", "qwen3_moe");
}

#[test]
fn mixtral_matches_transformers() {
    let dir = test_data_dir().join("hf_tiny/mixtral");
    assert!(
        dir.join("model.safetensors.index.json").exists(),
        "the Mixtral checkpoint is sharded"
    );
    let m = load("mixtral");
    let moe = m.config.moe.as_ref().expect("experts");
    assert_eq!((moe.num_experts, moe.top_k), (8, 2));
    assert!(!m.config.qk_norm);
    check_model("mixtral", "mixtral");
}

#[test]
fn deepseek_v3_matches_transformers() {
    let dir = test_data_dir().join("hf_tiny/deepseek_v3");
    assert!(
        !dir.join("chat_template.jinja").exists(),
        "DeepSeek ships its template inside tokenizer_config.json"
    );
    let m = load("deepseek_v3");
    let c = &m.config;
    let mla = c.mla.as_ref().expect("latent attention");
    assert_eq!(mla.q_lora_rank, Some(32));
    assert_eq!(
        (
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim
        ),
        (32, 16, 8, 16)
    );
    // Materialised heads: K is 16 + 8 wide, V (16) padded to it.
    assert_eq!((c.num_kv_heads, c.head_dim, c.rope_dim()), (4, 24, 8));
    assert!(c.rope_interleaved);
    assert!(matches!(
        c.rope_scaling,
        wring_model::RopeScaling::Yarn { factor, original_max_position_embeddings: 256, .. } if factor == 4.0
    ));
    // mscale 1 and mscale_all_dim 0.8 over a factor of 4: the rotated parts × 1.0249, the
    // scores × 1.2341.
    assert!((c.rope_scaling.attention_factor() - 1.02494).abs() < 1e-4);
    assert!((c.rope_scaling.score_factor() - 1.23410).abs() < 1e-4);
    let moe = c.moe.as_ref().expect("experts");
    assert_eq!((moe.num_experts, moe.top_k), (16, 4));
    assert_eq!((moe.groups, moe.top_groups), (4, 2));
    assert_eq!(moe.scoring, wring_model::MoeScoringFunc::Sigmoid);
    assert!(moe.correction_bias && moe.norm_topk_prob);
    assert_eq!(moe.routed_scaling_factor, 2.5);
    assert_eq!(moe.shared_intermediate_size, 64, "2 shared experts of 32");
    assert_eq!(moe.dense_layers, vec![0], "first_k_dense_replace");
    // BOS from an AddedToken object, added to prompts (its template writes it itself).
    assert!(m.tokenizer.add_bos());
    let bos = m.tokenizer.token_to_id("<｜begin▁of▁sentence｜>");
    assert_eq!(m.tokenizer.bos_token_id(), bos);
    let rf = reference("deepseek_v3");
    assert!(
        rf["tokens_routed_otherwise_without_bias"].as_u64().unwrap() > 0,
        "the correction bias changes some tokens' experts in the reference"
    );
    check_model("deepseek_v3", "deepseek_v3");
}
