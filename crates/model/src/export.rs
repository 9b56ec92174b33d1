//! Writes a loaded model back out as a Hugging Face directory that `load_model` (and
//! `wring serve --model DIR`) reads: `config.json`, `model.safetensors`,
//! `tokenizer.json`, `tokenizer_config.json`, `generation_config.json`.
//!
//! Every tensor passes through a caller's callback with its f32 values in Hugging Face
//! layout; the callback returns the tensors to store for it. [`dense_tensor`] is the
//! plain choice (what [`export_plain`] does); `wring quantize` replaces the linear
//! weights by their quantized parts, and a test can write a deliberately broken model.
//!
//! GGUF llama checkpoints keep llama.cpp's permuted q/k rows (adjacent-pair RoPE); they
//! are permuted back here, so the directory rotates halves like every HF checkpoint.

use crate::config::{ModelConfig, RopeScaling};
use crate::weights::{hf_name, WeightSource};
use crate::LoadedModel;
use anyhow::{anyhow, bail, ensure, Context, Result};
use half::bf16;
pub use safetensors::Dtype;
use serde_json::{json, Value};
use std::path::Path;

/// What a tensor is in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorRole {
    /// The token embedding (also the output projection when tied).
    Embedding,
    /// The untied output projection (`lm_head`).
    LmHead,
    /// One of the seven linear weights of a decoder layer.
    Linear,
    /// A norm weight or a bias.
    Vector,
}

/// One tensor of the model, as the export callback sees it.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// wring's canonical (GGUF-style) name, e.g. `blk.3.attn_q.weight`.
    pub canonical: String,
    /// The Hugging Face name, e.g. `model.layers.3.self_attn.q_proj.weight`.
    pub hf: String,
    pub role: TensorRole,
    /// Decoder layer index, for layer tensors.
    pub layer: Option<usize>,
    /// `[rows=out, cols=in]` for matrices, `[len]` for vectors.
    pub shape: Vec<usize>,
}

/// One tensor to store in `model.safetensors`: raw little-endian bytes.
#[derive(Debug, Clone)]
pub struct OutTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl OutTensor {
    pub fn f32(name: impl Into<String>, shape: Vec<usize>, v: &[f32]) -> Self {
        Self {
            name: name.into(),
            dtype: Dtype::F32,
            shape,
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    pub fn bf16(name: impl Into<String>, shape: Vec<usize>, v: &[f32]) -> Self {
        Self {
            name: name.into(),
            dtype: Dtype::BF16,
            shape,
            data: v
                .iter()
                .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
                .collect(),
        }
    }
}

/// Storage of tensors written densely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DenseDtype {
    /// Exact: a GGUF model dequantised at load reloads bit-identically.
    #[default]
    F32,
    Bf16,
}

/// The tensor stored as it is, under its Hugging Face name.
pub fn dense_tensor(spec: &TensorSpec, data: &[f32], dtype: DenseDtype) -> OutTensor {
    match dtype {
        DenseDtype::F32 => OutTensor::f32(&spec.hf, spec.shape.clone(), data),
        DenseDtype::Bf16 => OutTensor::bf16(&spec.hf, spec.shape.clone(), data),
    }
}

#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Written as `quantization_config` in `config.json` when set.
    pub quantization_config: Option<Value>,
    /// `torch_dtype` in `config.json` (informative); defaults to "float32".
    pub torch_dtype: Option<String>,
}

/// What [`export_hf_dir`] wrote.
#[derive(Debug, Clone)]
pub struct ExportSummary {
    pub tensors: usize,
    pub safetensors_bytes: u64,
}

/// Every tensor of the model in load order, with shapes from the config.
pub fn tensor_specs(cfg: &ModelConfig, src: &WeightSource) -> Vec<TensorSpec> {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let (qd, kvd) = (
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
    );
    let spec = |canonical: String, role, layer, shape: Vec<usize>| TensorSpec {
        hf: hf_name(&canonical),
        canonical,
        role,
        layer,
        shape,
    };
    let mut out = vec![spec(
        "token_embd.weight".into(),
        TensorRole::Embedding,
        None,
        vec![cfg.vocab_size, h],
    )];
    for l in 0..cfg.num_layers {
        let n = |s: &str| format!("blk.{l}.{s}");
        for (s, rows, cols) in [
            ("attn_q.weight", qd, h),
            ("attn_k.weight", kvd, h),
            ("attn_v.weight", kvd, h),
            ("attn_output.weight", h, qd),
            ("ffn_gate.weight", i, h),
            ("ffn_up.weight", i, h),
            ("ffn_down.weight", h, i),
        ] {
            out.push(spec(n(s), TensorRole::Linear, Some(l), vec![rows, cols]));
        }
        for (s, len) in [
            ("attn_q.bias", qd),
            ("attn_k.bias", kvd),
            ("attn_v.bias", kvd),
        ] {
            if src.has(cfg, &n(s)) {
                out.push(spec(n(s), TensorRole::Vector, Some(l), vec![len]));
            }
        }
        for s in ["attn_norm.weight", "ffn_norm.weight"] {
            out.push(spec(n(s), TensorRole::Vector, Some(l), vec![h]));
        }
    }
    out.push(spec(
        "output_norm.weight".into(),
        TensorRole::Vector,
        None,
        vec![h],
    ));
    if src.has(cfg, "output.weight") {
        out.push(spec(
            "output.weight".into(),
            TensorRole::LmHead,
            None,
            vec![cfg.vocab_size, h],
        ));
    }
    out
}

/// Rows of a q or k weight (or bias: `cols` = 1) from llama.cpp's adjacent-pair order
/// back to Hugging Face's halves order, head by head.
pub fn unpermute_rows(data: &[f32], n_heads: usize, head_dim: usize, cols: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = vec![0.0; data.len()];
    for h in 0..n_heads {
        for j in 0..2 {
            for i in 0..half {
                let dst = h * head_dim + j * half + i;
                let src = h * head_dim + 2 * i + j;
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// f32 values of one tensor in Hugging Face layout.
pub fn read_tensor(model: &LoadedModel, spec: &TensorSpec) -> Result<Vec<f32>> {
    let cfg = &model.config;
    let src = &model.weights;
    let mut data = match spec.shape[..] {
        [rows, cols] => src.matrix(&spec.canonical, rows, cols)?.data,
        [len] => src.vector(&spec.canonical, len)?,
        _ => bail!(
            "tensor {}: unexpected shape {:?}",
            spec.canonical,
            spec.shape
        ),
    };
    if cfg.rope_interleaved {
        let cols = spec.shape.get(1).copied().unwrap_or(1);
        let heads = if spec.canonical.contains(".attn_q.") {
            Some(cfg.num_heads)
        } else if spec.canonical.contains(".attn_k.") {
            Some(cfg.num_kv_heads)
        } else {
            None
        };
        if let Some(n) = heads {
            data = unpermute_rows(&data, n, cfg.head_dim, cols);
        }
    }
    Ok(data)
}

/// `config.json` for `cfg` (rotating halves, as the exported tensors do).
pub fn hf_config_json(model: &LoadedModel, opts: &ExportOptions) -> Value {
    let c = &model.config;
    let (arch, model_type) = match c.architecture.as_str() {
        "qwen2" => ("Qwen2ForCausalLM", "qwen2"),
        _ => ("LlamaForCausalLM", "llama"),
    };
    let rope_scaling = match &c.rope_scaling {
        RopeScaling::None => Value::Null,
        RopeScaling::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => json!({
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_position_embeddings,
        }),
        // Only latent-attention models take YaRN, and `export_hf_dir` refuses them.
        RopeScaling::Yarn { .. } => Value::Null,
        // `export_hf_dir` refuses factors that no `rope_scaling` spells.
        RopeScaling::Factors(_) => Value::Null,
    };
    let mut v = json!({
        "_name_or_path": model.name,
        "architectures": [arch],
        "model_type": model_type,
        "hidden_act": "silu",
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "vocab_size": c.vocab_size,
        "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": rope_scaling,
        "tie_word_embeddings": c.tie_word_embeddings,
        "attention_bias": c.attention_bias,
        "torch_dtype": opts.torch_dtype.clone().unwrap_or_else(|| "float32".into()),
    });
    if let Some(id) = model.tokenizer.bos_token_id() {
        v["bos_token_id"] = json!(id);
    }
    if let Some(&id) = model.eos_token_ids.first() {
        v["eos_token_id"] = json!(id);
    }
    if let Some(q) = &opts.quantization_config {
        v["quantization_config"] = q.clone();
    }
    v
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Writes the model to `dir` (created if missing). `write` is called once per tensor
/// (in [`tensor_specs`] order) with its f32 values in Hugging Face layout and returns
/// the tensors stored for it (names must be unique across the whole model).
pub fn export_hf_dir(
    model: &LoadedModel,
    dir: &Path,
    opts: &ExportOptions,
    mut write: impl FnMut(&TensorSpec, Vec<f32>) -> Result<Vec<OutTensor>>,
) -> Result<ExportSummary> {
    ensure!(
        model.config.mla.is_none(),
        "{}: exporting or quantizing a latent-attention model is not supported",
        model.config.architecture
    );
    // The directory is written as Llama or Qwen2 (`hf_config_json`, `tensor_specs`): a
    // model with q/k norms or experts would lose them.
    let c = &model.config;
    ensure!(
        !c.qk_norm && c.moe.is_none(),
        "{}: exporting a model with q/k norms or mixture-of-experts layers is not supported yet (Llama and Qwen2 models are)",
        c.architecture
    );
    ensure!(
        !matches!(c.rope_scaling, RopeScaling::Factors(_)),
        "{}: the GGUF's rope_freqs.weight factors are not Llama 3's formula, and no Hugging Face rope_scaling spells them; exporting it is not supported",
        c.architecture
    );
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tensors: Vec<OutTensor> = vec![];
    let mut seen = std::collections::HashSet::new();
    for spec in tensor_specs(&model.config, &model.weights) {
        let data = read_tensor(model, &spec)?;
        for t in write(&spec, data).with_context(|| format!("tensor {}", spec.hf))? {
            let elems: usize = t.shape.iter().product();
            ensure!(
                elems * t.dtype.size() == t.data.len(),
                "tensor {}: {} bytes for shape {:?} of {:?}",
                t.name,
                t.data.len(),
                t.shape,
                t.dtype
            );
            ensure!(
                seen.insert(t.name.clone()),
                "tensor {} written twice",
                t.name
            );
            tensors.push(t);
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            safetensors::tensor::TensorView::new(t.dtype, t.shape.clone(), &t.data)
                .map(|v| (t.name.clone(), v))
                .map_err(|e| anyhow!("tensor {}: {e}", t.name))
        })
        .collect::<Result<_>>()?;
    let st_path = dir.join("model.safetensors");
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    safetensors::serialize_to_file(views, &Some(meta), &st_path)
        .map_err(|e| anyhow!("cannot write {}: {e}", st_path.display()))?;
    let safetensors_bytes = std::fs::metadata(&st_path)?.len();

    write_json(&dir.join("config.json"), &hf_config_json(model, opts))?;
    let tok = &model.tokenizer;
    std::fs::write(dir.join("tokenizer.json"), tok.to_json()?)
        .with_context(|| format!("cannot write {}/tokenizer.json", dir.display()))?;
    let id_str = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
    let bos = model
        .chat_template
        .as_ref()
        .map(|t| t.bos_token().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| id_str(tok.bos_token_id()));
    let eos = model
        .chat_template
        .as_ref()
        .map(|t| t.eos_token().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| id_str(model.eos_token_ids.first().copied()));
    let mut tc = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": tok.add_bos(),
        "add_eos_token": false,
        "model_max_length": model.config.max_position_embeddings,
        "clean_up_tokenization_spaces": false,
    });
    if let Some(b) = bos {
        tc["bos_token"] = json!(b);
    }
    if let Some(e) = eos {
        tc["eos_token"] = json!(e);
    }
    if let Some(t) = &model.chat_template {
        tc["chat_template"] = json!(t.source());
    }
    write_json(&dir.join("tokenizer_config.json"), &tc)?;
    let mut gen = json!({ "eos_token_id": model.eos_token_ids });
    if let Some(id) = tok.bos_token_id() {
        gen["bos_token_id"] = json!(id);
    }
    write_json(&dir.join("generation_config.json"), &gen)?;
    Ok(ExportSummary {
        tensors: tensors.len(),
        safetensors_bytes,
    })
}

/// Writes the model unquantized, every tensor as `dtype`.
pub fn export_plain(model: &LoadedModel, dir: &Path, dtype: DenseDtype) -> Result<ExportSummary> {
    let opts = ExportOptions {
        torch_dtype: Some(match dtype {
            DenseDtype::F32 => "float32".into(),
            DenseDtype::Bf16 => "bfloat16".into(),
        }),
        ..Default::default()
    };
    export_hf_dir(model, dir, &opts, |spec, data| {
        Ok(vec![dense_tensor(spec, &data, dtype)])
    })
}

impl LoadedModel {
    /// Where the weights come from (mapped until the model is turned into a runner).
    pub fn weight_source(&self) -> &WeightSource {
        &self.weights
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() {
        // llama.cpp: reshape(n_head, 2, hd/2, cols).swapaxes(1, 2) — HF row j*hd/2+i goes to 2i+j.
        let (heads, hd, cols) = (2, 8, 3);
        let hf: Vec<f32> = (0..heads * hd * cols).map(|x| x as f32).collect();
        let mut gguf = vec![0.0; hf.len()];
        for h in 0..heads {
            for j in 0..2 {
                for i in 0..hd / 2 {
                    let (s, d) = (h * hd + j * hd / 2 + i, h * hd + 2 * i + j);
                    gguf[d * cols..(d + 1) * cols].copy_from_slice(&hf[s * cols..(s + 1) * cols]);
                }
            }
        }
        assert_ne!(gguf, hf);
        assert_eq!(unpermute_rows(&gguf, heads, hd, cols), hf);
    }
}
