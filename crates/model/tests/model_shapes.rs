//! The named shapes of `--load-format dummy --model-shape` are the published models: their
//! parameter counts (all, and those one token reads on a mixture-of-experts model) and their
//! bf16 checkpoint sizes match the model cards; the parameter count of a config is the
//! element count of a transformers-made checkpoint of it (tests/data/hf_tiny); and dummy
//! weights exist for every tensor a Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3 config
//! implies, so the shapes run (DeepSeek-V3's first layers at reduced widths: its real
//! widths take 12 GB of f32 weights for two dense layers).

#[allow(dead_code)]
mod support;

use support::{decode_step, test_data_dir};
use wring_backend::cpu::CpuBackend;
use wring_model::llama::LlamaRunner;
use wring_model::weights::WeightSource;
use wring_model::{CpuWeights, MlaConfig, ModelConfig, ModelSpec, MoeConfig, SeqInput, StepInput};

fn shape(name: &str) -> ModelConfig {
    ModelConfig::named_shape(name).unwrap_or_else(|| panic!("{name} is a named shape"))
}

fn billions(n: usize) -> f64 {
    n as f64 / 1e9
}

/// `got` within 2 % of the published `want` (model cards round to 0.1 B, and Qwen3-30B-A3B's
/// "3.3 B activated" is 3.35 B with both embedding matrices counted).
fn assert_near(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 0.02 * want,
        "{what}: {got:.3} B, published {want} B"
    );
}

#[test]
fn named_shapes_have_the_published_parameter_counts_and_sizes() {
    // (shape, model_type, total B, active B, bf16 checkpoint GB) from the model cards:
    // Qwen/Qwen3-8B (8.2 B, 6.95 B without embeddings), Qwen/Qwen3-30B-A3B (30.5 B,
    // 3.3 B activated), mistralai/Mixtral-8x7B-v0.1 (46.7 B, 12.9 B a token).
    for (name, model_type, total, active, gb) in [
        ("qwen3-8b", "qwen3", 8.2, 8.2, 16.4),
        ("qwen3-30b-a3b", "qwen3_moe", 30.5, 3.3, 61.1),
        ("mixtral-8x7b", "mixtral", 46.7, 12.9, 93.4),
        ("llama-3.1-8b", "llama", 8.03, 8.03, 16.1),
    ] {
        assert!(ModelConfig::NAMED_SHAPES.contains(&name), "{name} listed");
        let c = shape(name);
        assert_eq!(c.architecture, model_type, "{name}");
        println!(
            "{name}: {:.3} B parameters, {:.3} B a token, {:.1} GB in bf16",
            billions(c.num_params()),
            billions(c.active_params()),
            billions(2 * c.num_params())
        );
        assert_near(
            &format!("{name} parameters"),
            billions(c.num_params()),
            total,
        );
        assert_near(
            &format!("{name} parameters a token reads"),
            billions(c.active_params()),
            active,
        );
        assert_near(
            &format!("{name} bf16 bytes"),
            billions(2 * c.num_params()),
            gb,
        );
    }
    let q = shape("qwen3-8b");
    let without_embeddings = q.num_params() - 2 * q.vocab_size * q.hidden_size;
    assert_near(
        "qwen3-8b parameters without embeddings",
        billions(without_embeddings),
        6.95,
    );

    let moe = shape("qwen3-30b-a3b");
    let m = moe.moe.as_ref().expect("qwen3-30b-a3b has experts");
    assert_eq!(
        (m.num_experts, m.top_k, m.expert_intermediate_size),
        (128, 8, 768)
    );
    assert_eq!(
        (
            moe.hidden_size,
            moe.num_layers,
            moe.num_heads,
            moe.num_kv_heads
        ),
        (2048, 48, 32, 4)
    );
    assert_eq!((moe.head_dim, moe.vocab_size), (128, 151936));
    assert!(moe.qk_norm && m.norm_topk_prob && m.dense_layers.is_empty());
    let mx = shape("mixtral-8x7b");
    let m = mx.moe.as_ref().expect("mixtral-8x7b has experts");
    assert_eq!((m.num_experts, m.top_k, mx.vocab_size), (8, 2, 32000));
    assert!(!mx.qk_norm);
}

/// Element count of every tensor in the safetensors files of `dir` (their JSON headers).
fn checkpoint_elements(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("safetensors") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        for (name, t) in header.as_object().unwrap() {
            if name == "__metadata__" {
                continue;
            }
            n += t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .product::<usize>();
        }
    }
    n
}

#[test]
fn parameter_count_is_the_element_count_of_a_transformers_checkpoint() {
    for name in ["qwen3", "qwen3_moe", "mixtral", "deepseek_v3"] {
        let dir = test_data_dir().join("hf_tiny").join(name);
        let m = wring_model::load_model(&ModelSpec {
            model: Some(dir.to_string_lossy().into_owned()),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{name} loads: {e:#}"));
        assert_eq!(m.config.num_params(), checkpoint_elements(&dir), "{name}");
        assert!(m.config.active_params() <= m.config.num_params());
    }
}

/// `name`'s proportions (q/k norms, routing, GQA) at a size the CPU runs in a test.
fn shrunk(name: &str) -> ModelConfig {
    let c = shape(name);
    ModelConfig {
        hidden_size: 64,
        intermediate_size: 96,
        num_layers: 2,
        num_heads: 8,
        num_kv_heads: 8 / (c.num_heads / c.num_kv_heads),
        head_dim: 16,
        vocab_size: 256,
        moe: c.moe.as_ref().map(|m| MoeConfig {
            num_experts: m.num_experts.min(16),
            expert_intermediate_size: 24,
            ..m.clone()
        }),
        ..c
    }
}

#[test]
fn dummy_weights_of_the_new_shapes_run_on_the_cpu() {
    for name in ["qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b"] {
        let cfg = shrunk(name);
        let mut r = LlamaRunner::new(
            CpuBackend::new(CpuWeights::F32),
            cfg.clone(),
            &WeightSource::Dummy { seed: 5 },
            8,
            16,
        )
        .unwrap_or_else(|e| panic!("{name}: dummy weights build a runner: {e:#}"));
        let step = StepInput {
            tokens: vec![3, 14, 15, 92, 65],
            positions: (0..5).collect(),
            seqs: vec![SeqInput {
                query_start: 0,
                query_len: 5,
                context_len: 5,
                block_table: vec![0],
                prompt_len: 5,
            }],
            logit_rows: vec![4],
        };
        let logits = wring_model::ModelRunner::forward(&mut r, &step).unwrap();
        assert_eq!((logits.rows, logits.row(0).len()), (1, cfg.vocab_size));
        assert!(logits.row(0).iter().all(|v| v.is_finite()), "{name}");
        let spread = logits.row(0).iter().cloned().fold(f32::MIN, f32::max)
            - logits.row(0).iter().cloned().fold(f32::MAX, f32::min);
        assert!(spread > 0.0, "{name}: the logits differ");
    }
}

#[test]
fn deepseek_v3_has_the_published_shape_and_parameter_counts() {
    // deepseek-ai/DeepSeek-V3's model card: 671 B parameters, 37 B activated a token
    // (the 14 B of its multi-token-prediction module not counted: wring does not run it).
    let c = shape("deepseek-v3");
    assert_eq!(c.architecture, "deepseek_v3");
    println!(
        "deepseek-v3: {:.3} B parameters, {:.3} B a token",
        billions(c.num_params()),
        billions(c.active_params())
    );
    assert_near("deepseek-v3 parameters", billions(c.num_params()), 671.0);
    assert_near(
        "deepseek-v3 parameters a token reads",
        billions(c.active_params()),
        37.0,
    );
    assert_eq!(
        (c.hidden_size, c.num_layers, c.num_heads, c.vocab_size),
        (7168, 61, 128, 129280)
    );
    let m = c.moe.as_ref().unwrap();
    assert_eq!(
        (m.num_experts, m.top_k, m.groups, m.top_groups),
        (256, 8, 8, 4)
    );
    assert_eq!(m.dense_layers, vec![0, 1, 2]);
    assert_eq!(m.shared_intermediate_size, 2048);
    let mla = c.mla.as_ref().unwrap();
    assert_eq!((mla.q_lora_rank, mla.kv_lora_rank), (Some(1536), 512));
    // The materialised cache against the latent one: 2 · 128 heads · 192 against
    // 512 + 64 values a token and layer (85 ×).
    let (cached, latent) = c.kv_values_per_token();
    assert_eq!((cached, latent), (61 * 2 * 128 * 192, 61 * 576));
    // YaRN with mscale = mscale_all_dim: the rotated parts unscaled, the scores ×
    // (0.1 ln 40 + 1)².
    assert_eq!(c.rope_scaling.attention_factor(), 1.0);
    let ms = 0.1 * 40f32.ln() + 1.0;
    assert!((c.rope_scaling.score_factor() - ms * ms).abs() < 1e-5);
    assert_eq!(c.rope_inv_freq().len(), 32);

    // `<shape>:<layers>` keeps the first layers: three dense, then one of experts.
    let cut = ModelConfig::shape_spec("deepseek-v3:4").unwrap();
    assert_eq!(cut.num_layers, 4);
    assert!(cut.moe_layer(2).is_none() && cut.moe_layer(3).is_some());
    let two = ModelConfig::shape_spec("deepseek-v3:2").unwrap();
    assert_eq!(two.moe.as_ref().unwrap().dense_layers, vec![0, 1]);
    for bad in [
        "deepseek-v3:0",
        "deepseek-v3:62",
        "deepseek-v3:x",
        "deepseek-v4",
    ] {
        assert!(ModelConfig::shape_spec(bad).is_err(), "{bad}");
    }
}

/// `deepseek-v3:4` (three dense layers, one of experts) at widths the CPU runs in a test,
/// its proportions kept: latent attention with a q LoRA and v narrower than q/k, 32
/// experts in 8 groups of which 4 are eligible, 8 a token, one shared expert.
fn deepseek_shrunk() -> ModelConfig {
    let c = ModelConfig::shape_spec("deepseek-v3:4").unwrap();
    let mla = MlaConfig {
        q_lora_rank: Some(24),
        kv_lora_rank: 16,
        qk_nope_head_dim: 16,
        qk_rope_head_dim: 8,
        v_head_dim: 16,
    };
    ModelConfig {
        hidden_size: 64,
        intermediate_size: 96,
        num_heads: 4,
        num_kv_heads: 4,
        head_dim: mla.cache_head_dim(),
        vocab_size: 256,
        moe: c.moe.as_ref().map(|m| MoeConfig {
            num_experts: 32,
            expert_intermediate_size: 16,
            shared_intermediate_size: 16,
            ..m.clone()
        }),
        mla: Some(mla),
        ..c
    }
}

#[test]
fn dummy_weights_of_deepseek_v3_run_on_the_cpu() {
    // With its q LoRA, and with q as one projection.
    for q_lora_rank in [Some(24), None] {
        let mut cfg = deepseek_shrunk();
        cfg.mla.as_mut().unwrap().q_lora_rank = q_lora_rank;
        dummy_deepseek_runs(cfg);
    }
}

fn dummy_deepseek_runs(cfg: ModelConfig) {
    let mut r = LlamaRunner::new(
        CpuBackend::new(CpuWeights::F32),
        cfg.clone(),
        &WeightSource::Dummy { seed: 5 },
        8,
        16,
    )
    .expect("dummy weights build a DeepSeek-V3 runner");
    let prompt = [3u32, 14, 15, 92, 65, 35, 89, 79];
    let step = StepInput {
        tokens: prompt.to_vec(),
        positions: (0..8).collect(),
        seqs: vec![SeqInput {
            query_start: 0,
            query_len: 8,
            context_len: 8,
            block_table: vec![0],
            prompt_len: 8,
        }],
        logit_rows: (0..8).collect(),
    };
    let all = wring_model::ModelRunner::forward(&mut r, &step).unwrap();
    assert_eq!((all.rows, all.row(0).len()), (8, cfg.vocab_size));
    assert!(all.data.iter().all(|v| v.is_finite()));
    let last = all.row(7).to_vec();
    let spread = last.iter().cloned().fold(f32::MIN, f32::max)
        - last.iter().cloned().fold(f32::MAX, f32::min);
    assert!(spread > 0.0, "the logits differ");
    // The last token again as a decode step over the cached K/V of the first seven (on
    // another block): the same bits as in the prompt step.
    let prefix = StepInput {
        tokens: prompt[..7].to_vec(),
        positions: (0..7).collect(),
        seqs: vec![SeqInput {
            query_start: 0,
            query_len: 7,
            context_len: 7,
            block_table: vec![3],
            prompt_len: 8,
        }],
        logit_rows: vec![6],
    };
    wring_model::ModelRunner::forward(&mut r, &prefix).unwrap();
    let decode = decode_step(prompt[7], 8, vec![3], 8);
    let one = wring_model::ModelRunner::forward(&mut r, &decode).unwrap();
    assert!(
        one.row(0) == last.as_slice(),
        "decode equals the prompt step's row"
    );
}

/// deepseek-ai/DeepSeek-V3's config.json as published (DeepSeek-R1's differs only in
/// fields wring does not read).
fn deepseek_v3_config_json() -> serde_json::Value {
    serde_json::from_str(
        r#"{
  "architectures": [
    "DeepseekV3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "hidden_size": 7168,
  "initializer_range": 0.02,
  "intermediate_size": 18432,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 61,
  "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1,
  "pretraining_tp": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "quantization_config": {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [
      128,
      128
    ]
  },
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "seq_aux": true,
  "tie_word_embeddings": false,
  "topk_group": 4,
  "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.46.3",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 129280
}"#,
    )
    .unwrap()
}

#[test]
fn deepseek_v3_config_json_parses_to_the_named_shape() {
    let c = deepseek_v3_config_json();
    assert_eq!(wring_model::hf_config(&c).unwrap(), shape("deepseek-v3"));

    let with = |k: &str, v: serde_json::Value| {
        let mut c = deepseek_v3_config_json();
        c[k] = v;
        wring_model::hf_config(&c)
    };
    // DeepSeek-V2-Lite style: q is one projection.
    let plain_q = with("q_lora_rank", serde_json::Value::Null).unwrap();
    assert_eq!(plain_q.mla.unwrap().q_lora_rank, None);
    // Experts on every second layer after the dense ones (DeepSeek's moe_layer_freq).
    let every_other = with("moe_layer_freq", 2.into()).unwrap();
    assert!(every_other.moe_layer(3).is_none() && every_other.moe_layer(4).is_some());
    // A rope_interleave of false rotates halves.
    assert!(
        !with("rope_interleave", false.into())
            .unwrap()
            .rope_interleaved
    );
    // What transformers does not run is refused in words.
    for (k, v, says) in [
        ("scoring_func", "softmax", "scoring_func"),
        ("topk_method", "greedy", "topk_method"),
        ("n_group", "7", "n_group"),
        ("attention_bias", "true", "attention_bias"),
    ] {
        let v: serde_json::Value = serde_json::from_str(v).unwrap_or(v.into());
        let e = with(k, v).unwrap_err().to_string();
        assert!(e.contains(says), "{k}: {e}");
    }
    // YaRN is taken for the latent attention only.
    let mut llama = deepseek_v3_config_json();
    llama["model_type"] = "llama".into();
    let e = wring_model::hf_config(&llama).unwrap_err().to_string();
    assert!(e.contains("yarn"), "{e}");
}
