//! Architecture hyper-parameters of a Llama-family model (Qwen3's q/k norms and
//! mixture-of-experts layers included), from GGUF metadata, a Hugging Face
//! `config.json`, or a named shape for dummy weights.

use serde::{Deserialize, Serialize};

/// RoPE frequency scaling (Hugging Face `rope_scaling`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    None,
    /// Llama 3.x: low-frequency wavelengths stretched by `factor`, smooth in between.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: usize,
    },
    /// Plain linear position interpolation.
    Linear {
        factor: f32,
    },
}

/// Mixture-of-experts feed-forward layers (Qwen3-MoE, Mixtral).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    pub num_experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// Intermediate size of one expert.
    pub expert_intermediate_size: usize,
    /// Divide the selected experts' probabilities by their sum (Mixtral always,
    /// Qwen3-MoE when `norm_topk_prob`).
    pub norm_topk_prob: bool,
    /// Layers whose feed-forward stays dense, of `intermediate_size` (Qwen3-MoE's
    /// `mlp_only_layers`, and the layers `decoder_sparse_step` skips).
    pub dense_layers: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// The Hugging Face `model_type` it runs as: "llama" (Mistral too), "qwen2" (biases
    /// on q/k/v), "qwen3" (q/k norms), "qwen3_moe" or "mixtral".
    pub architecture: String,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    /// GGUF permutes q/k for adjacent-pair rotation; HF checkpoints rotate halves.
    pub rope_interleaved: bool,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    /// RMSNorm over each head of q and k (one `head_dim` weight each) before RoPE (Qwen3).
    #[serde(default)]
    pub qk_norm: bool,
    /// Mixture-of-experts feed-forward layers; None: every layer is dense.
    #[serde(default)]
    pub moe: Option<MoeConfig>,
}

impl ModelConfig {
    /// The mixture-of-experts configuration of layer `layer`, None when its
    /// feed-forward is dense.
    pub fn moe_layer(&self, layer: usize) -> Option<&MoeConfig> {
        self.moe
            .as_ref()
            .filter(|m| !m.dense_layers.contains(&layer))
    }

    /// The ops beyond the Llama family's this model needs from a backend.
    pub fn extra_ops(&self) -> Vec<wring_backend::ExtraOp> {
        let mut ops = Vec::new();
        if self.qk_norm {
            ops.push(wring_backend::ExtraOp::HeadRmsNorm);
        }
        if (0..self.num_layers).any(|l| self.moe_layer(l).is_some()) {
            ops.push(wring_backend::ExtraOp::MixtureOfExperts);
        }
        ops
    }

    /// Refuses, before any weight is read, a model that needs ops `device` does not run:
    /// the error names the `model_type` and every missing op, e.g. "qwen3_moe: q/k norms
    /// (per-head RMSNorm) and mixture-of-experts layers are not supported on cuda yet;
    /// run with --device cpu".
    pub fn refuse_unsupported(
        &self,
        device: &str,
        supports: impl Fn(wring_backend::ExtraOp) -> bool,
    ) -> anyhow::Result<()> {
        let missing: Vec<String> = self
            .extra_ops()
            .into_iter()
            .filter(|&op| !supports(op))
            .map(|op| op.to_string())
            .collect();
        anyhow::ensure!(
            missing.is_empty(),
            "{}: {} are not supported on {device} yet; run with --device cpu",
            self.architecture,
            missing.join(" and ")
        );
        Ok(())
    }

    /// Per-pair inverse frequencies with the configured scaling applied.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let half = self.head_dim / 2;
        let base: Vec<f64> = (0..half)
            .map(|i| 1.0 / (self.rope_theta as f64).powf(2.0 * i as f64 / self.head_dim as f64))
            .collect();
        match &self.rope_scaling {
            RopeScaling::None => base.iter().map(|&f| f as f32).collect(),
            RopeScaling::Linear { factor } => {
                base.iter().map(|&f| (f / *factor as f64) as f32).collect()
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let (factor, lf, hf, old) = (
                    *factor as f64,
                    *low_freq_factor as f64,
                    *high_freq_factor as f64,
                    *original_max_position_embeddings as f64,
                );
                let low_wavelen = old / lf;
                let high_wavelen = old / hf;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        let v = if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - lf) / (hf - lf);
                            (1.0 - smooth) * f / factor + smooth * f
                        };
                        v as f32
                    })
                    .collect()
            }
        }
    }

    /// Parameters in the transformer (embeddings counted once when tied; every expert).
    pub fn num_params(&self) -> usize {
        self.params(false)
    }

    /// Parameters one token's forward reads (of a mixture-of-experts layer only the
    /// router and the `top_k` experts it is routed to); `num_params` for a dense model.
    pub fn active_params(&self) -> usize {
        self.params(true)
    }

    fn params(&self, active: bool) -> usize {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let q = self.num_heads * self.head_dim;
        let kv = self.num_kv_heads * self.head_dim;
        let norms = 2 * h + if self.qk_norm { 2 * self.head_dim } else { 0 };
        let bias = if self.attention_bias { q + 2 * kv } else { 0 };
        let attn = h * q + 2 * h * kv + q * h + bias + norms;
        let layers: usize = (0..self.num_layers)
            .map(|l| match self.moe_layer(l) {
                None => attn + 3 * h * i,
                Some(m) => {
                    let experts = if active { m.top_k } else { m.num_experts };
                    attn + m.num_experts * h + experts * 3 * h * m.expert_intermediate_size
                }
            })
            .sum();
        let emb = self.vocab_size * h * if self.tie_word_embeddings { 1 } else { 2 };
        layers + emb + h
    }

    /// A named real shape, for dummy weights.
    pub fn named_shape(name: &str) -> Option<Self> {
        let llama =
            |hidden, inter, layers, heads, kv, vocab, theta: f32, tie, scaling| ModelConfig {
                architecture: "llama".into(),
                hidden_size: hidden,
                intermediate_size: inter,
                num_layers: layers,
                num_heads: heads,
                num_kv_heads: kv,
                head_dim: hidden / heads,
                vocab_size: vocab,
                max_position_embeddings: 8192,
                rms_norm_eps: 1e-5,
                rope_theta: theta,
                rope_scaling: scaling,
                rope_interleaved: false,
                tie_word_embeddings: tie,
                attention_bias: false,
                qk_norm: false,
                moe: None,
            };
        let l3 = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        Some(match name {
            "smollm2-135m" => llama(
                576,
                1536,
                30,
                9,
                3,
                49152,
                100000.0,
                true,
                RopeScaling::None,
            ),
            "smollm2-360m" => llama(
                960,
                2560,
                32,
                15,
                5,
                49152,
                100000.0,
                true,
                RopeScaling::None,
            ),
            "llama-3.2-1b" => llama(2048, 8192, 16, 32, 8, 128256, 500000.0, true, l3),
            "llama-3.1-8b" => llama(4096, 14336, 32, 32, 8, 128256, 500000.0, false, l3),
            "llama-3.1-70b" => llama(8192, 28672, 80, 64, 8, 128256, 500000.0, false, l3),
            "llama-3.1-405b" => llama(16384, 53248, 126, 128, 8, 128256, 500000.0, false, l3),
            // Llama-3.1-8B's proportions (32 heads in 8 KV groups, intermediate 3.5 × hidden)
            // at a size the CPU runs in tests: head_dim 16, 2 layers, and the default
            // tokenizer's vocabulary (dummy weights borrow it, so every id it makes exists).
            "llama-3.1-8b-tiny" => ModelConfig {
                head_dim: 16,
                max_position_embeddings: 2048,
                ..llama(512, 1792, 2, 32, 8, 49152, 500000.0, false, l3)
            },
            "qwen2.5-7b" => ModelConfig {
                architecture: "qwen2".into(),
                attention_bias: true,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 32768,
                ..llama(
                    3584,
                    18944,
                    28,
                    28,
                    4,
                    152064,
                    1000000.0,
                    false,
                    RopeScaling::None,
                )
            },
            "qwen2.5-72b" => ModelConfig {
                architecture: "qwen2".into(),
                attention_bias: true,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 32768,
                ..llama(
                    8192,
                    29568,
                    80,
                    64,
                    8,
                    152064,
                    1000000.0,
                    false,
                    RopeScaling::None,
                )
            },
            // Qwen/Qwen3-8B's config.json.
            "qwen3-8b" => ModelConfig {
                architecture: "qwen3".into(),
                head_dim: 128,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 40960,
                qk_norm: true,
                ..llama(
                    4096,
                    12288,
                    36,
                    32,
                    8,
                    151936,
                    1000000.0,
                    false,
                    RopeScaling::None,
                )
            },
            // Qwen/Qwen3-30B-A3B's config.json: 128 experts of 768, 8 a token, every layer
            // sparse (decoder_sparse_step 1, no mlp_only_layers), norm_topk_prob.
            "qwen3-30b-a3b" => ModelConfig {
                architecture: "qwen3_moe".into(),
                head_dim: 128,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 40960,
                qk_norm: true,
                moe: Some(MoeConfig {
                    num_experts: 128,
                    top_k: 8,
                    expert_intermediate_size: 768,
                    norm_topk_prob: true,
                    dense_layers: Vec::new(),
                }),
                ..llama(
                    2048,
                    6144,
                    48,
                    32,
                    4,
                    151936,
                    1000000.0,
                    false,
                    RopeScaling::None,
                )
            },
            // mistralai/Mixtral-8x7B-v0.1's config.json: 8 experts of 14336, 2 a token.
            "mixtral-8x7b" => ModelConfig {
                architecture: "mixtral".into(),
                max_position_embeddings: 32768,
                moe: Some(MoeConfig {
                    num_experts: 8,
                    top_k: 2,
                    expert_intermediate_size: 14336,
                    norm_topk_prob: true,
                    dense_layers: Vec::new(),
                }),
                ..llama(
                    4096,
                    14336,
                    32,
                    32,
                    8,
                    32000,
                    1000000.0,
                    false,
                    RopeScaling::None,
                )
            },
            _ => return None,
        })
    }

    pub const NAMED_SHAPES: &'static [&'static str] = &[
        "smollm2-135m",
        "smollm2-360m",
        "llama-3.2-1b",
        "llama-3.1-8b",
        "qwen2.5-7b",
        "llama-3.1-70b",
        "qwen2.5-72b",
        "llama-3.1-405b",
        "llama-3.1-8b-tiny",
        "qwen3-8b",
        "qwen3-30b-a3b",
        "mixtral-8x7b",
    ];
}

/// Sampling settings a checkpoint ships for chat (Hugging Face `generation_config.json`, or a
/// GGUF's `general.sampling.*` keys). Each field is None where the checkpoint says nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GenerationDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
}

impl GenerationDefaults {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// From a `generation_config.json` value: `do_sample: false` means greedy (temperature 0).
    pub fn from_hf_json(v: &serde_json::Value) -> Self {
        let f = |k: &str| v.get(k).and_then(|x| x.as_f64()).map(|x| x as f32);
        let mut g = Self {
            temperature: f("temperature"),
            top_p: f("top_p"),
            top_k: v.get("top_k").and_then(|x| x.as_u64()).map(|x| x as u32),
            min_p: f("min_p"),
        };
        if v.get("do_sample").and_then(|x| x.as_bool()) == Some(false) {
            g.temperature = Some(0.0);
        }
        g
    }

    /// The generation defaults of the model at `path` (a GGUF file or a model directory).
    pub fn of_model(path: &std::path::Path) -> Self {
        if path.is_dir() {
            return std::fs::read_to_string(path.join("generation_config.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .map(|v| Self::from_hf_json(&v))
                .unwrap_or_default();
        }
        let Ok(g) = crate::gguf::GgufFile::open(path) else {
            return Self::default();
        };
        let f = |k: &str| g.get_f64(k).map(|x| x as f32);
        Self {
            temperature: f("general.sampling.temp"),
            top_p: f("general.sampling.top_p"),
            top_k: g.get_u64("general.sampling.top_k").map(|x| x as u32),
            min_p: f("general.sampling.min_p"),
        }
    }
}

#[cfg(test)]
mod generation_tests {
    use super::GenerationDefaults;

    #[test]
    fn hf_generation_config_fields_and_greedy() {
        let v =
            serde_json::json!({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "eos_token_id": 2});
        let g = GenerationDefaults::from_hf_json(&v);
        assert_eq!(g.temperature, Some(0.6));
        assert_eq!(g.top_k, Some(20));
        assert_eq!(g.min_p, None);
        let g = GenerationDefaults::from_hf_json(
            &serde_json::json!({"do_sample": false, "temperature": 0.6}),
        );
        assert_eq!(g.temperature, Some(0.0));
        assert!(
            GenerationDefaults::from_hf_json(&serde_json::json!({"bos_token_id": 1})).is_empty()
        );
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::ModelConfig;
    use wring_backend::ExtraOp;

    #[test]
    fn a_model_is_refused_by_model_type_and_every_op_the_device_lacks() {
        let moe = ModelConfig::named_shape("qwen3-30b-a3b").unwrap();
        let err = moe.refuse_unsupported("cuda", |_| false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "qwen3_moe: q/k norms (per-head RMSNorm) and mixture-of-experts layers are not supported on cuda yet; run with --device cpu"
        );
        let err = moe
            .refuse_unsupported("cuda", |op| op == ExtraOp::HeadRmsNorm)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "qwen3_moe: mixture-of-experts layers are not supported on cuda yet; run with --device cpu"
        );
        assert!(moe.refuse_unsupported("cpu", |_| true).is_ok());
        let mixtral = ModelConfig::named_shape("mixtral-8x7b").unwrap();
        assert!(mixtral
            .refuse_unsupported("cuda", |_| false)
            .unwrap_err()
            .to_string()
            .starts_with("mixtral: mixture-of-experts layers are not supported"));
        // The Llama family needs none of them.
        let llama = ModelConfig::named_shape("llama-3.1-8b").unwrap();
        assert!(llama.refuse_unsupported("cuda", |_| false).is_ok());
    }
}
