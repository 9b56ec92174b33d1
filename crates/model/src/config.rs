//! Architecture hyper-parameters of a Llama-family model (Qwen3's q/k norms,
//! mixture-of-experts layers and DeepSeek-V3's latent attention included), from GGUF
//! metadata, a Hugging Face `config.json`, or a named shape for dummy weights.

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
    /// YaRN (`transformers`' `_compute_yarn_parameters`): each frequency blends its
    /// extrapolated and interpolated (`/ factor`) values along a ramp between the
    /// dimensions where `original_max_position_embeddings` makes `beta_fast` and
    /// `beta_slow` rotations; the rotated values are scaled by [`RopeScaling::attention_factor`].
    /// Only DeepSeek-V3 (latent attention) takes it so far.
    Yarn {
        factor: f32,
        original_max_position_embeddings: usize,
        beta_fast: f32,
        beta_slow: f32,
        /// 0 where the config gives none.
        mscale: f32,
        /// 0 where the config gives none.
        mscale_all_dim: f32,
        /// The config's own `attention_factor`, which wins over the mscales.
        attention_factor: Option<f32>,
        /// Round the ramp's ends outwards (`truncate`, default true).
        truncate: bool,
    },
    /// A divisor per rotated pair: frequency `i` is the unscaled one over `factors[i]`
    /// (GGUF's `rope_freqs.weight`, which llama.cpp's converter writes in place of
    /// `rope_scaling`; a file whose factors are Llama 3's formula loads as [`RopeScaling::Llama3`]).
    Factors(Vec<f32>),
}

/// Llama 3's scaled frequencies of the unscaled `base` ones: wavelengths above
/// `old / low_freq_factor` stretched by `factor`, below `old / high_freq_factor` kept,
/// blended in between.
pub fn llama3_inv_freq(base: &[f64], factor: f64, lf: f64, hf: f64, old: f64) -> Vec<f64> {
    let (low_wavelen, high_wavelen) = (old / lf, old / hf);
    base.iter()
        .map(|&f| {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < high_wavelen {
                f
            } else if wavelen > low_wavelen {
                f / factor
            } else {
                let smooth = (old / wavelen - lf) / (hf - lf);
                (1.0 - smooth) * f / factor + smooth * f
            }
        })
        .collect()
}

/// YaRN's `get_mscale`: `0.1 · mscale · ln(scale) + 1`, 1 for `scale` ≤ 1.
fn yarn_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

impl RopeScaling {
    /// The factor on cos and sin (YaRN's `attention_factor`; 1 otherwise).
    pub fn attention_factor(&self) -> f32 {
        match self {
            RopeScaling::Yarn {
                factor,
                mscale,
                mscale_all_dim,
                attention_factor,
                ..
            } => attention_factor.unwrap_or_else(|| {
                let f = *factor as f64;
                if *mscale != 0.0 && *mscale_all_dim != 0.0 {
                    (yarn_mscale(f, *mscale as f64) / yarn_mscale(f, *mscale_all_dim as f64)) as f32
                } else {
                    yarn_mscale(f, 1.0) as f32
                }
            }),
            _ => 1.0,
        }
    }

    /// DeepSeek's factor on the attention scores: `get_mscale(factor, mscale_all_dim)²`
    /// under YaRN with a `mscale_all_dim`, else 1.
    pub fn score_factor(&self) -> f32 {
        match self {
            RopeScaling::Yarn {
                factor,
                mscale_all_dim,
                ..
            } if *mscale_all_dim != 0.0 => {
                yarn_mscale(*factor as f64, *mscale_all_dim as f64).powi(2) as f32
            }
            _ => 1.0,
        }
    }
}

/// Multi-head latent attention (DeepSeek-V3): q through a low-rank pair (or one projection),
/// K and V from a shared latent of `kv_lora_rank` values and one rope key a token
/// (`wring_backend::mla`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlaConfig {
    /// None: q is one projection (`q_proj`).
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
}

impl MlaConfig {
    /// Width of one query or key head.
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Width of one materialised K or V head in the KV cache: the wider of a key and a
    /// value (the narrower is zero-padded).
    pub fn cache_head_dim(&self) -> usize {
        self.qk_head_dim().max(self.v_head_dim)
    }
}

/// How a router scores experts (see `wring_backend::moe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum MoeScoringFunc {
    #[default]
    Softmax,
    Sigmoid,
}

fn one() -> f32 {
    1.0
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
    /// `mlp_only_layers`, and the layers `decoder_sparse_step` skips; DeepSeek's first
    /// `first_k_dense_replace` layers and those `moe_layer_freq` skips).
    pub dense_layers: Vec<usize>,
    /// Softmax (Qwen3-MoE, Mixtral) or sigmoid scores chosen with a correction bias
    /// (DeepSeek-V3's `scoring_func`).
    #[serde(default)]
    pub scoring: MoeScoringFunc,
    /// The router has a per-expert correction bias (DeepSeek's `e_score_correction_bias`).
    #[serde(default)]
    pub correction_bias: bool,
    /// Expert groups (`n_group`; 1: none) and how many a token draws from (`topk_group`).
    #[serde(default = "one_group")]
    pub groups: usize,
    #[serde(default = "one_group")]
    pub top_groups: usize,
    /// Factor on the routed weights (`routed_scaling_factor`).
    #[serde(default = "one")]
    pub routed_scaling_factor: f32,
    /// Intermediate size of the shared experts every token runs (`n_shared_experts ×
    /// moe_intermediate_size`); 0: none.
    #[serde(default)]
    pub shared_intermediate_size: usize,
}

fn one_group() -> usize {
    1
}

impl MoeConfig {
    /// Softmax routing over `num_experts` with nothing beside it (Qwen3-MoE, Mixtral).
    pub fn softmax(
        num_experts: usize,
        top_k: usize,
        expert_intermediate_size: usize,
        norm_topk_prob: bool,
        dense_layers: Vec<usize>,
    ) -> Self {
        Self {
            num_experts,
            top_k,
            expert_intermediate_size,
            norm_topk_prob,
            dense_layers,
            scoring: MoeScoringFunc::Softmax,
            correction_bias: false,
            groups: 1,
            top_groups: 1,
            routed_scaling_factor: 1.0,
            shared_intermediate_size: 0,
        }
    }

    /// The backend's routing rule for these layers.
    pub fn routing(&self) -> wring_backend::MoeRouting {
        wring_backend::MoeRouting {
            top_k: self.top_k,
            renormalize: self.norm_topk_prob,
            scoring: match self.scoring {
                MoeScoringFunc::Softmax => wring_backend::MoeScoring::Softmax,
                MoeScoringFunc::Sigmoid => wring_backend::MoeScoring::Sigmoid,
            },
            groups: self.groups,
            top_groups: self.top_groups,
            scale: self.routed_scaling_factor,
        }
    }

    /// Whether the layers need more than plain softmax top-k routing.
    pub fn group_limited(&self) -> bool {
        !self.routing().is_plain_softmax()
            || self.correction_bias
            || self.shared_intermediate_size > 0
    }
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
    /// Multi-head latent attention (DeepSeek-V3) instead of q/k/v projections. Then
    /// `num_kv_heads` is `num_heads` and `head_dim` the width of a cached K/V head
    /// ([`MlaConfig::cache_head_dim`]): what the KV cache holds.
    #[serde(default)]
    pub mla: Option<MlaConfig>,
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
        if self.mla.is_some() {
            ops.push(wring_backend::ExtraOp::LatentAttention);
        }
        if (0..self.num_layers).any(|l| self.moe_layer(l).is_some()) {
            ops.push(wring_backend::ExtraOp::MixtureOfExperts);
            if self.moe.as_ref().is_some_and(|m| m.group_limited()) {
                ops.push(wring_backend::ExtraOp::GroupLimitedRouting);
            }
        }
        ops
    }

    /// Dimensions RoPE rotates in a head (`qk_rope_head_dim` under latent attention).
    pub fn rope_dim(&self) -> usize {
        self.mla
            .as_ref()
            .map_or(self.head_dim, |m| m.qk_rope_head_dim)
    }

    /// Values one token's K and V take in the KV cache across all layers, and what
    /// DeepSeek's latent cache would hold (`kv_lora_rank + qk_rope_head_dim` a layer;
    /// equal to the first for a model without latent attention).
    pub fn kv_values_per_token(&self) -> (usize, usize) {
        let cached = 2 * self.num_layers * self.num_kv_heads * self.head_dim;
        let latent = match &self.mla {
            Some(m) => self.num_layers * (m.kv_lora_rank + m.qk_rope_head_dim),
            None => cached,
        };
        (cached, latent)
    }

    /// Refuses, before any weight is read, a model that needs ops `device` does not run:
    /// the error names the `model_type` and every missing op, e.g. "qwen3_moe: q/k norms
    /// (per-head RMSNorm) and mixture-of-experts layers are not supported on cuda yet;
    /// run with --device cpu" (three or more: "a, b and c").
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
        let listed = match missing.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => missing.join(""),
        };
        anyhow::ensure!(
            missing.is_empty(),
            "{}: {listed} are not supported on {device} yet; run with --device cpu",
            self.architecture,
        );
        Ok(())
    }

    /// Per-pair inverse frequencies with the configured scaling applied.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let dim = self.rope_dim();
        let base = self.rope_base_freq();
        match &self.rope_scaling {
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                truncate,
                ..
            } => {
                let (factor, base_theta, d) = (*factor as f64, self.rope_theta as f64, dim as f64);
                let old = *original_max_position_embeddings as f64;
                // The dimension at which `rotations` full turns fit in the original context.
                let correction_dim = |rotations: f64| {
                    d * (old / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base_theta.ln())
                };
                let (mut low, mut high) = (
                    correction_dim(*beta_fast as f64),
                    correction_dim(*beta_slow as f64),
                );
                if *truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        (f / factor * (1.0 - extrapolation) + f * extrapolation) as f32
                    })
                    .collect()
            }
            RopeScaling::None => base.iter().map(|&f| f as f32).collect(),
            RopeScaling::Linear { factor } => {
                base.iter().map(|&f| (f / *factor as f64) as f32).collect()
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => llama3_inv_freq(
                &base,
                *factor as f64,
                *low_freq_factor as f64,
                *high_freq_factor as f64,
                *original_max_position_embeddings as f64,
            )
            .into_iter()
            .map(|f| f as f32)
            .collect(),
            RopeScaling::Factors(factors) => base
                .iter()
                .zip(factors)
                .map(|(&f, &d)| (f / d as f64) as f32)
                .collect(),
        }
    }

    /// The unscaled RoPE frequency of each rotated pair.
    pub fn rope_base_freq(&self) -> Vec<f64> {
        let dim = self.rope_dim();
        (0..dim / 2)
            .map(|i| 1.0 / (self.rope_theta as f64).powf(2.0 * i as f64 / dim as f64))
            .collect()
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
        let attn = match &self.mla {
            None => h * q + 2 * h * kv + q * h + bias + norms,
            Some(m) => {
                let heads = self.num_heads;
                let q = match m.q_lora_rank {
                    Some(r) => h * r + r + r * heads * m.qk_head_dim(),
                    None => h * heads * m.qk_head_dim(),
                };
                let kv = h * (m.kv_lora_rank + m.qk_rope_head_dim)
                    + m.kv_lora_rank
                    + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
                q + kv + heads * m.v_head_dim * h + 2 * h
            }
        };
        let layers: usize = (0..self.num_layers)
            .map(|l| match self.moe_layer(l) {
                None => attn + 3 * h * i,
                Some(m) => {
                    let experts = if active { m.top_k } else { m.num_experts };
                    let bias = if m.correction_bias { m.num_experts } else { 0 };
                    attn + m.num_experts * h
                        + bias
                        + experts * 3 * h * m.expert_intermediate_size
                        + 3 * h * m.shared_intermediate_size
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
                mla: None,
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
                moe: Some(MoeConfig::softmax(128, 8, 768, true, Vec::new())),
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
                moe: Some(MoeConfig::softmax(8, 2, 14336, true, Vec::new())),
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
            // deepseek-ai/DeepSeek-V3's config.json (R1 has the same shape): 61 layers, the
            // first 3 dense, 256 routed experts of 2048 in 8 groups (top 4 groups, 8
            // experts a token, sigmoid scores with a correction bias, weights × 2.5) and
            // one shared expert; latent attention (q LoRA 1536, KV LoRA 512, heads of
            // 128 + 64 rope for q/k and 128 for v); YaRN ×40 over 4096 positions.
            "deepseek-v3" => ModelConfig {
                architecture: "deepseek_v3".into(),
                num_kv_heads: 128,
                head_dim: 192,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 163840,
                rope_scaling: RopeScaling::Yarn {
                    factor: 40.0,
                    original_max_position_embeddings: 4096,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    mscale: 1.0,
                    mscale_all_dim: 1.0,
                    attention_factor: None,
                    truncate: true,
                },
                rope_interleaved: true,
                moe: Some(MoeConfig {
                    scoring: MoeScoringFunc::Sigmoid,
                    correction_bias: true,
                    groups: 8,
                    top_groups: 4,
                    routed_scaling_factor: 2.5,
                    shared_intermediate_size: 2048,
                    ..MoeConfig::softmax(256, 8, 2048, true, (0..3).collect())
                }),
                mla: Some(MlaConfig {
                    q_lora_rank: Some(1536),
                    kv_lora_rank: 512,
                    qk_nope_head_dim: 128,
                    qk_rope_head_dim: 64,
                    v_head_dim: 128,
                }),
                ..llama(
                    7168,
                    18432,
                    61,
                    128,
                    128,
                    129280,
                    10000.0,
                    false,
                    RopeScaling::None,
                )
            },
            _ => return None,
        })
    }

    /// A named shape, or its first layers: `<shape>` or `<shape>:<layers>`
    /// (`deepseek-v3:4`: three dense layers and one of experts at the real widths).
    pub fn shape_spec(spec: &str) -> anyhow::Result<Self> {
        let (name, layers) = match spec.split_once(':') {
            Some((n, l)) => (
                n,
                Some(l.parse::<usize>().map_err(|_| {
                    anyhow::anyhow!("model shape {spec:?}: the part after ':' is a layer count")
                })?),
            ),
            None => (spec, None),
        };
        let mut cfg = Self::named_shape(name).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown model shape {name:?} (known: {}; <shape>:<layers> keeps its first layers)",
                Self::NAMED_SHAPES.join(", ")
            )
        })?;
        if let Some(l) = layers {
            anyhow::ensure!(
                (1..=cfg.num_layers).contains(&l),
                "model shape {name} has {} layers; {spec:?} asks for {l}",
                cfg.num_layers
            );
            cfg.num_layers = l;
            if let Some(m) = &mut cfg.moe {
                m.dense_layers.retain(|&d| d < l);
            }
        }
        Ok(cfg)
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
        "deepseek-v3",
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
        // DeepSeek-V3: latent attention always; its routing even where plain
        // mixture-of-experts layers run.
        let ds = ModelConfig::named_shape("deepseek-v3").unwrap();
        assert_eq!(
            ds.refuse_unsupported("cuda", |_| false).unwrap_err().to_string(),
            "deepseek_v3: multi-head latent attention (MLA) layers, mixture-of-experts layers and sigmoid group-limited expert routing with shared experts are not supported on cuda yet; run with --device cpu"
        );
        assert_eq!(
            ds.refuse_unsupported("cuda", |op| op == ExtraOp::MixtureOfExperts)
                .unwrap_err()
                .to_string(),
            "deepseek_v3: multi-head latent attention (MLA) layers and sigmoid group-limited expert routing with shared experts are not supported on cuda yet; run with --device cpu"
        );
        assert!(ds.refuse_unsupported("cpu", |_| true).is_ok());
        // Its first three layers alone are dense: only the attention is missing.
        let dense = ModelConfig::shape_spec("deepseek-v3:3").unwrap();
        assert_eq!(
            dense.refuse_unsupported("cuda", |_| false).unwrap_err().to_string(),
            "deepseek_v3: multi-head latent attention (MLA) layers are not supported on cuda yet; run with --device cpu"
        );
    }
}
