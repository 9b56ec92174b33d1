//! Architecture hyper-parameters of a Llama-family model, from GGUF metadata,
//! a Hugging Face `config.json`, or a named shape for dummy weights.

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// "llama" or "qwen2" (Qwen2 has biases on q/k/v).
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
}

impl ModelConfig {
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

    /// Parameters in the transformer (embeddings counted once when tied).
    pub fn num_params(&self) -> usize {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let q = self.num_heads * self.head_dim;
        let kv = self.num_kv_heads * self.head_dim;
        let layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h;
        let emb = self.vocab_size * h * if self.tie_word_embeddings { 1 } else { 2 };
        self.num_layers * layer + emb + h
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
    ];
}
