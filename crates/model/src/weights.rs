//! Where weights come from: a GGUF file, a Hugging Face safetensors directory, or
//! deterministic random ("dummy") values. Every source answers by canonical GGUF-style
//! tensor name (`blk.3.attn_q.weight`) with f32 host data; the runner uploads each
//! tensor to its backend and drops the host copy.

use crate::config::ModelConfig;
use crate::gguf::GgufFile;
use anyhow::{anyhow, bail, ensure, Context, Result};
use half::{bf16, f16};
use memmap2::Mmap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use wring_backend::cpu::CpuWeights;
use wring_backend::quant::{PartDtype, QuantMatrix, Scheme};
use wring_backend::{Backend, HostMatrix};

pub enum WeightSource {
    Gguf(GgufFile),
    Safetensors(SafetensorsSet),
    Dummy { seed: u64 },
}

/// The mapped shards of a safetensors checkpoint and which shard holds which tensor.
pub struct SafetensorsSet {
    shards: Vec<(PathBuf, Mmap)>,
    index: HashMap<String, usize>,
    /// Set when `config.json` says the linear weights are quantized by `wring quantize`.
    pub quant: Option<QuantConfig>,
}

/// A stored tensor as it is in the file: (dtype, shape, little-endian bytes).
type RawTensor<'a> = (safetensors::Dtype, Vec<usize>, &'a [u8]);

/// `quantization_config` of a checkpoint written by `wring quantize`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantConfig {
    pub scheme: Scheme,
    pub group_size: Option<usize>,
}

impl QuantConfig {
    /// Reads `quantization_config` (None when absent); other tools' methods are refused.
    pub fn from_config_json(cfg: &serde_json::Value) -> Result<Option<Self>> {
        let Some(q) = cfg.get("quantization_config").filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let method = q.get("quant_method").and_then(|v| v.as_str()).unwrap_or("");
        ensure!(
            method == "wring",
            "quantization_config.quant_method {method:?} is not supported: wring runs checkpoints quantized by `wring quantize` (quant_method \"wring\"); use the unquantized checkpoint"
        );
        let scheme: Scheme = q
            .get("scheme")
            .and_then(|v| v.as_str())
            .ok_or_else(|| anyhow!("quantization_config.scheme is missing"))?
            .parse()?;
        let group_size = q
            .get("group_size")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize);
        Ok(Some(Self { scheme, group_size }))
    }
}

/// A linear weight as stored: dense f32 or quantized.
pub enum Weight {
    Dense(HostMatrix),
    Quant(QuantMatrix),
}

impl Weight {
    /// Hands the weight to the backend (quantized weights through `upload_quantized`).
    pub fn upload<B: Backend>(self, b: &mut B) -> Result<B::Matrix> {
        match self {
            Weight::Dense(m) => b.upload_matrix(m),
            Weight::Quant(m) => b.upload_quantized(m),
        }
    }
}

/// The name prefix of a quantized tensor's parts: `x.weight` → `x`.
fn quant_prefix(hf: &str) -> &str {
    hf.strip_suffix(".weight").unwrap_or(hf)
}

impl SafetensorsSet {
    /// `model.safetensors`, or the shards named by `model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self> {
        let single = dir.join("model.safetensors");
        let files: Vec<PathBuf> = if single.exists() {
            vec![single]
        } else {
            let idx_path = dir.join("model.safetensors.index.json");
            let idx = crate::tokenizer::read_json(&idx_path).with_context(|| {
                format!(
                    "{} has neither model.safetensors nor model.safetensors.index.json",
                    dir.display()
                )
            })?;
            let map = idx
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| anyhow!("{} has no weight_map", idx_path.display()))?;
            let mut names: Vec<String> = map
                .values()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            names.sort();
            names.dedup();
            names.into_iter().map(|n| dir.join(n)).collect()
        };
        let mut shards = vec![];
        let mut index = HashMap::new();
        for (i, path) in files.into_iter().enumerate() {
            let f = std::fs::File::open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            // SAFETY: read-only mapping of a weight file wring does not modify.
            let mmap = unsafe { Mmap::map(&f) }?;
            let st = safetensors::SafeTensors::deserialize(&mmap)
                .map_err(|e| anyhow!("{} is not a valid safetensors file: {e}", path.display()))?;
            for name in st.names() {
                index.insert(name.to_string(), i);
            }
            shards.push((path, mmap));
        }
        let quant = match crate::tokenizer::read_json(&dir.join("config.json")) {
            Ok(cfg) => QuantConfig::from_config_json(&cfg)
                .with_context(|| format!("{}/config.json", dir.display()))?,
            Err(_) => None,
        };
        Ok(Self {
            shards,
            index,
            quant,
        })
    }

    /// Drops the mapped pages of `data` (a tensor already copied out) from this process,
    /// so a load's resident memory is what the backend holds plus one tensor, not the
    /// whole file as well. A later read of the same bytes maps them in again.
    pub(crate) fn release(&self, data: &[u8]) {
        let p = data.as_ptr() as usize;
        for (_, mmap) in &self.shards {
            let base = mmap.as_ptr() as usize;
            if p >= base && p + data.len() <= base + mmap.len() {
                // SAFETY: read-only, file-backed mapping and no live borrow of these bytes
                // past this call (callers have copied them); MADV_DONTNEED only makes the
                // next access read the file again.
                #[cfg(unix)]
                let _ = unsafe {
                    mmap.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        p - base,
                        data.len(),
                    )
                };
                return;
            }
        }
    }

    /// Raw bytes of a tensor: (dtype, shape, data).
    pub(crate) fn raw(&self, name: &str) -> Result<Option<RawTensor<'_>>> {
        let Some(&i) = self.index.get(name) else {
            return Ok(None);
        };
        let (path, mmap) = &self.shards[i];
        let st = safetensors::SafeTensors::deserialize(mmap)
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let t = st
            .tensor(name)
            .map_err(|e| anyhow!("{}: tensor {name}: {e}", path.display()))?;
        Ok(Some((t.dtype(), t.shape().to_vec(), t.data())))
    }

    /// The quantized matrix stored as `<prefix>.qweight`, `.scales`, … (None when the
    /// checkpoint holds no `<prefix>.qweight`).
    pub(crate) fn quant_matrix(
        &self,
        hf: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<QuantMatrix>> {
        let prefix = quant_prefix(hf);
        if !self.index.contains_key(&format!("{prefix}.qweight")) {
            return Ok(None);
        }
        let q = self.quant.as_ref().ok_or_else(|| {
            anyhow!(
                "tensor {prefix}.qweight is quantized but config.json has no quantization_config"
            )
        })?;
        let mut parts = HashMap::new();
        for suffix in wring_backend::quant::part_suffixes(q.scheme)
            .iter()
            .chain(&["smooth"])
        {
            let name = format!("{prefix}.{suffix}");
            if let Some((dtype, shape, data)) = self.raw(&name)? {
                use safetensors::Dtype;
                let d = match dtype {
                    Dtype::I8 => PartDtype::I8,
                    Dtype::U8 => PartDtype::U8,
                    Dtype::F16 => PartDtype::F16,
                    Dtype::F32 => PartDtype::F32,
                    Dtype::F8_E4M3 => PartDtype::F8E4M3,
                    d => bail!("tensor {name}: dtype {d:?} is not a {} part", q.scheme),
                };
                parts.insert(*suffix, (d, shape, data));
            }
        }
        let m = QuantMatrix::from_parts(q.scheme, rows, cols, q.group_size, |s| {
            parts.get(s).cloned()
        });
        for (_, _, data) in parts.values() {
            self.release(data);
        }
        let m = m.map_err(|e| {
            anyhow!(
                "tensor {prefix}{e} ({} checkpoint, expected [{rows}, {cols}])",
                q.scheme
            )
        })?;
        Ok(Some(m))
    }

    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let Some((dtype, shape, b)) = self.raw(name)? else {
            return Ok(None);
        };
        use safetensors::Dtype;
        let data: Vec<f32> = match dtype {
            Dtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::F16 => b
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::BF16 => b
                .chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            d => bail!(
                "{}: tensor {name} has dtype {d:?}; wring reads F32, F16 and BF16",
                self.shards[self.index[name]].0.display()
            ),
        };
        self.release(b);
        Ok(Some((shape, data)))
    }
}

/// Hugging Face name of a canonical tensor name.
pub(crate) fn hf_name(canonical: &str) -> String {
    let (stem, suffix) = canonical.rsplit_once('.').unwrap_or((canonical, "weight"));
    let mapped = if let Some(rest) = stem.strip_prefix("blk.") {
        let (layer, part) = rest.split_once('.').unwrap_or((rest, ""));
        let p = match part {
            "attn_norm" => "input_layernorm",
            "attn_q" => "self_attn.q_proj",
            "attn_k" => "self_attn.k_proj",
            "attn_v" => "self_attn.v_proj",
            "attn_output" => "self_attn.o_proj",
            "ffn_norm" => "post_attention_layernorm",
            "ffn_gate" => "mlp.gate_proj",
            "ffn_up" => "mlp.up_proj",
            "ffn_down" => "mlp.down_proj",
            other => other,
        };
        format!("model.layers.{layer}.{p}")
    } else {
        match stem {
            "token_embd" => "model.embed_tokens".into(),
            "output_norm" => "model.norm".into(),
            "output" => "lm_head".into(),
            other => other.into(),
        }
    };
    format!("{mapped}.{suffix}")
}

impl WeightSource {
    /// The CPU weight format that holds this checkpoint's layer matrices at their own
    /// precision ([`CpuWeights::Auto`]): judged by the first layer's gate projection (a
    /// mixed file such as Q4_K_M has 4-bit gates and some 6-bit matrices, which then go
    /// to 4 bits too).
    pub fn native_cpu_weights(&self) -> CpuWeights {
        use crate::ggml_type::GgmlType;
        match self {
            WeightSource::Gguf(g) => match g.tensors.get("blk.0.ffn_gate.weight").map(|t| t.ty) {
                Some(GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4K) => CpuWeights::Q4,
                Some(GgmlType::Q8_0 | GgmlType::Q6K) => CpuWeights::Q8,
                _ => CpuWeights::F32,
            },
            WeightSource::Safetensors(_) | WeightSource::Dummy { .. } => CpuWeights::F32,
        }
    }

    /// Whether the source has this tensor (dummy sources have every tensor the config implies).
    pub fn has(&self, cfg: &ModelConfig, name: &str) -> bool {
        match self {
            WeightSource::Gguf(g) => g.tensors.contains_key(name),
            WeightSource::Safetensors(s) => {
                let hf = hf_name(name);
                s.index.contains_key(&hf)
                    || s.index
                        .contains_key(&format!("{}.qweight", quant_prefix(&hf)))
            }
            WeightSource::Dummy { .. } => {
                !(name == "output.weight" && cfg.tie_word_embeddings)
                    && (cfg.attention_bias || !name.ends_with(".bias"))
            }
        }
    }

    /// A linear weight `[rows=out][cols=in]` as stored: quantized when the checkpoint
    /// holds it quantized, else dense f32.
    pub fn weight(&self, name: &str, rows: usize, cols: usize) -> Result<Weight> {
        if let WeightSource::Safetensors(s) = self {
            if let Some(q) = s.quant_matrix(&hf_name(name), rows, cols)? {
                return Ok(Weight::Quant(q));
            }
        }
        Ok(Weight::Dense(self.matrix(name, rows, cols)?))
    }

    /// A linear weight `[rows=out][cols=in]` in f32 (quantized weights dequantised).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<HostMatrix> {
        let data = match self {
            WeightSource::Gguf(g) => {
                let (dims, data) = g.dequantize(name)?;
                ensure!(dims == [cols, rows], "tensor {name}: shape {dims:?} in the file, expected [{cols}, {rows}] for this config");
                data
            }
            WeightSource::Safetensors(s) => {
                let hf = hf_name(name);
                if let Some(q) = s.quant_matrix(&hf, rows, cols)? {
                    return Ok(HostMatrix {
                        rows,
                        cols,
                        data: q.dequantize(),
                    });
                }
                let (shape, data) = s
                    .tensor(&hf)?
                    .ok_or_else(|| anyhow!("tensor {hf} is missing from the checkpoint"))?;
                ensure!(
                    shape == [rows, cols],
                    "tensor {hf}: shape {shape:?} in the checkpoint, expected [{rows}, {cols}]"
                );
                data
            }
            // Value i of the row-major matrix is dummy value i: any part of it
            // (weight_slice.rs) holds the same numbers.
            WeightSource::Dummy { seed } => {
                dummy_values(*seed, name, rows * cols, 1.0 / (cols as f32).sqrt())
            }
        };
        Ok(HostMatrix { rows, cols, data })
    }

    /// A 1-D parameter (norm weight, bias).
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let data = match self {
            WeightSource::Gguf(g) => g.dequantize(name)?.1,
            WeightSource::Safetensors(s) => {
                let hf = hf_name(name);
                s.tensor(&hf)?
                    .ok_or_else(|| anyhow!("tensor {hf} is missing from the checkpoint"))?
                    .1
            }
            WeightSource::Dummy { seed } if name.contains("norm") => {
                let mut v = dummy_values(*seed, name, len, 0.1);
                v.iter_mut().for_each(|x| *x += 1.0);
                v
            }
            WeightSource::Dummy { seed } => dummy_values(*seed, name, len, 0.02),
        };
        ensure!(
            data.len() == len,
            "tensor {name}: {} values, expected {len}",
            data.len()
        );
        Ok(data)
    }
}

/// Deterministic uniform values in ±scale·√3 (unit variance × scale), seeded per tensor name.
fn dummy_values(seed: u64, name: &str, n: usize, scale: f32) -> Vec<f32> {
    let h = dummy_hash(seed, name);
    use rayon::prelude::*;
    (0..n as u64)
        .into_par_iter()
        .map(|i| dummy_value(h, i, scale))
        .collect()
}

/// The per-tensor seed of dummy values (FNV-1a of the name over the model's seed).
pub(crate) fn dummy_hash(seed: u64, name: &str) -> u64 {
    name.bytes().fold(seed ^ 0xcbf29ce484222325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Dummy value `i` of the tensor seeded `h`: uniform in ±scale·√3, a pure function of
/// (h, i) (SplitMix64's finaliser), so any slice of a tensor is computed on its own
/// (tensor-parallel ranks generate only their shard) and in parallel.
pub(crate) fn dummy_value(h: u64, i: u64, scale: f32) -> f32 {
    let mut z = h.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // 24 random bits → [0, 1) exactly representable in f32, then ±1.
    let u = (z >> 40) as f32 * (1.0 / (1u64 << 24) as f32);
    (2.0 * u - 1.0) * scale * 3f32.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn hf_names() {
        assert_eq!(
            hf_name("blk.3.attn_q.weight"),
            "model.layers.3.self_attn.q_proj.weight"
        );
        assert_eq!(
            hf_name("blk.0.attn_k.bias"),
            "model.layers.0.self_attn.k_proj.bias"
        );
        assert_eq!(hf_name("token_embd.weight"), "model.embed_tokens.weight");
        assert_eq!(hf_name("output.weight"), "lm_head.weight");
    }
}
