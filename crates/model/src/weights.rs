//! Where weights come from: a GGUF file, a Hugging Face safetensors directory, or
//! deterministic random ("dummy") values. Every source answers by canonical GGUF-style
//! tensor name (`blk.3.attn_q.weight`; experts `blk.3.ffn_gate_exps.5.weight`, their
//! router `blk.3.ffn_gate_inp.weight`; DeepSeek's latent attention and shared experts by
//! llama.cpp's names, `blk.3.attn_kv_b.weight`, `blk.3.ffn_up_shexp.weight`, its router's
//! correction bias `blk.3.exp_probs_b.bias`) with f32 host data; the runner uploads each
//! tensor to its backend and drops the host copy. A GGUF file stacks a layer's experts
//! in one tensor (`blk.3.ffn_gate_exps.weight`): expert 5 is a view of its bytes
//! ([`GgufFile::tensor`]), dequantised like any other matrix. Mixtral's own tensor names
//! (`block_sparse_moe.experts.5.w1`) are read under the names Qwen3-MoE uses
//! (`mlp.experts.5.gate_proj`).

use crate::config::ModelConfig;
use crate::gguf::GgufFile;
use anyhow::{anyhow, bail, ensure, Context, Result};
use half::{bf16, f16};
use memmap2::Mmap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use wring_backend::cpu::CpuWeights;
use wring_backend::quant::{PartDtype, QuantData, QuantMatrix, Scheme};
use wring_backend::{Backend, HostMatrix};

pub enum WeightSource {
    Gguf(GgufFile),
    Safetensors(SafetensorsSet),
    Dummy { seed: u64 },
}

/// The mapped shards of a safetensors checkpoint and which shard holds which tensor.
pub struct SafetensorsSet {
    shards: Vec<(PathBuf, Mmap)>,
    /// Tensor name (or its alias, [`hf_alias`]) → (shard, name stored in the shard).
    index: HashMap<String, (usize, String)>,
    /// Set when `config.json` says the linear weights are quantized by `wring quantize`.
    pub quant: Option<QuantConfig>,
}

/// A stored tensor as it is in the file: (dtype, shape, little-endian bytes).
type RawTensor<'a> = (safetensors::Dtype, Vec<usize>, &'a [u8]);

/// `quantization_config` of a quantized checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantConfig {
    pub scheme: Scheme,
    pub group_size: Option<usize>,
    /// How the quantized tensors are stored.
    pub format: QuantFormat,
    /// Published FP8 with block-wise scales (transformers' `fp8` with `weight_block_size`,
    /// DeepSeek-V3's and Qwen3's FP8 releases): the [rows, cols] of one scale's block.
    pub block: Option<[usize; 2]>,
}

/// The tensor layout of a quantized checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantFormat {
    /// `wring quantize`: `<prefix>.qweight`, `.scales`, … (`wring_backend::quant` parts).
    Wring,
    /// Published FP8 checkpoints (compressed-tensors, fbgemm_fp8, transformers' fp8; the
    /// Llama-3.1-405B-FP8 style): `<prefix>.weight` as `float8_e4m3fn` codes and
    /// `<prefix>.weight_scale` per tensor or per output channel, or (`weight_block_size`)
    /// `<prefix>.weight_scale_inv` per block, which is read as the exact f32 values
    /// `code × scale` (no per-row FP8 holds them); an `input_scale` is ignored
    /// (activations are scaled per token at run time).
    Fp8Published,
}

impl QuantConfig {
    /// Reads `quantization_config` (None when absent); formats wring cannot run exactly
    /// are refused with the reason.
    pub fn from_config_json(cfg: &serde_json::Value) -> Result<Option<Self>> {
        let Some(q) = cfg.get("quantization_config").filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let method = q.get("quant_method").and_then(|v| v.as_str()).unwrap_or("");
        match method {
            "wring" => {}
            "compressed-tensors" | "fbgemm_fp8" | "fp8" => {
                let block = check_fp8_config(method, q)?;
                return Ok(Some(Self {
                    scheme: Scheme::Fp8,
                    group_size: None,
                    format: QuantFormat::Fp8Published,
                    block,
                }));
            }
            _ => bail!(
                "quantization_config.quant_method {method:?} is not supported: wring runs checkpoints quantized by `wring quantize` (quant_method \"wring\") and FP8 checkpoints (\"compressed-tensors\", \"fbgemm_fp8\" with per-tensor or per-channel scales, \"fp8\" with those or block-wise scales); use the unquantized checkpoint"
            ),
        }
        let scheme: Scheme = q
            .get("scheme")
            .and_then(|v| v.as_str())
            .ok_or_else(|| anyhow!("quantization_config.scheme is missing"))?
            .parse()?;
        let group_size = q
            .get("group_size")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize);
        Ok(Some(Self {
            scheme,
            group_size,
            format: QuantFormat::Wring,
            block: None,
        }))
    }
}

/// Refuses the FP8 checkpoint variants wring does not run: E5M2, integer or 4-bit
/// compressed-tensors schemes, group scales, blocks outside transformers' `fp8`. The block
/// of block-wise scales, where the config has one.
fn check_fp8_config(method: &str, q: &serde_json::Value) -> Result<Option<[usize; 2]>> {
    let block = match q.get("weight_block_size").filter(|v| !v.is_null()) {
        None => None,
        Some(b) if method == "fp8" => {
            let dims: Option<Vec<usize>> = b
                .as_array()
                .map(|a| a.iter().map(|v| v.as_u64().map(|v| v as usize)).collect())
                .unwrap_or(None);
            match dims.as_deref() {
                Some(&[r, c]) if r > 0 && c > 0 => Some([r, c]),
                _ => bail!("quantization_config (fp8): weight_block_size {b} is not two positive integers"),
            }
        }
        Some(b) => bail!("quantization_config ({method}): block-wise FP8 weight scales (weight_block_size {b}) are read for quant_method \"fp8\" only"),
    };
    if method == "fp8" {
        if let Some(fmt) = q.get("fmt").and_then(|v| v.as_str()) {
            ensure!(
                fmt == "e4m3",
                "quantization_config (fp8): fmt {fmt:?} is not supported (only e4m3)"
            );
        }
    }
    if method != "compressed-tensors" {
        return Ok(block);
    }
    if let Some(fmt) = q.get("format").and_then(|v| v.as_str()) {
        ensure!(
            matches!(fmt, "float-quantized" | "naive-quantized"),
            "quantization_config (compressed-tensors): format {fmt:?} is not supported; wring reads float-quantized FP8 weights"
        );
    }
    let groups = q
        .get("config_groups")
        .and_then(|g| g.as_object())
        .ok_or_else(|| {
            anyhow!("quantization_config (compressed-tensors): config_groups is missing")
        })?;
    for (name, g) in groups {
        let w = g.get("weights").filter(|v| !v.is_null()).ok_or_else(|| {
            anyhow!("quantization_config (compressed-tensors): config_groups.{name} has no weights scheme")
        })?;
        let ty = w.get("type").and_then(|v| v.as_str()).unwrap_or("");
        let bits = w.get("num_bits").and_then(|v| v.as_u64()).unwrap_or(0);
        ensure!(
            ty == "float" && bits == 8,
            "quantization_config (compressed-tensors): config_groups.{name} stores {bits}-bit {ty:?} weights; wring reads 8-bit float (FP8 E4M3) weights only"
        );
        let strategy = w
            .get("strategy")
            .and_then(|v| v.as_str())
            .unwrap_or("tensor");
        ensure!(
            matches!(strategy, "tensor" | "channel"),
            "quantization_config (compressed-tensors): config_groups.{name} has weight scales per {strategy:?}; wring reads per-tensor or per-channel FP8 scales"
        );
    }
    Ok(block)
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

/// F32, BF16 or F16 values as f32 (None for another dtype).
fn float_values(dtype: safetensors::Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    use safetensors::Dtype;
    Some(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return None,
    })
}

/// FP8 scales stored as F32, BF16 or F16.
fn scale_values(name: &str, dtype: safetensors::Dtype, bytes: &[u8]) -> Result<Vec<f32>> {
    float_values(dtype, bytes)
        .ok_or_else(|| anyhow!("tensor {name}: dtype {dtype:?}; expected F32, BF16 or F16 scales"))
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
                if let Some(alias) = hf_alias(name) {
                    index.insert(alias, (i, name.to_string()));
                }
                index.insert(name.to_string(), (i, name.to_string()));
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
        let Some((i, stored)) = self.index.get(name) else {
            return Ok(None);
        };
        let (path, mmap) = &self.shards[*i];
        let st = safetensors::SafeTensors::deserialize(mmap)
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let t = st
            .tensor(stored)
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
        if self.quant.as_ref().map(|q| q.format) == Some(QuantFormat::Fp8Published) {
            return self.fp8_published(hf, rows, cols);
        }
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

    /// A published FP8 weight: `hf` as E4M3 codes and `<prefix>.weight_scale` (one value,
    /// or one per output row) — exactly the values `w = e4m3(q) · scale[row]` of wring's
    /// own fp8 format. None when `hf` is stored unquantized (e.g. an ignored lm head).
    fn fp8_published(&self, hf: &str, rows: usize, cols: usize) -> Result<Option<QuantMatrix>> {
        use safetensors::Dtype;
        let Some((dtype, shape, codes)) = self.raw(hf)? else {
            return Ok(None);
        };
        match dtype {
            Dtype::F8_E4M3 => {}
            Dtype::F8_E5M2 => {
                bail!("tensor {hf} is float8_e5m2; wring reads FP8 weights as float8_e4m3fn only")
            }
            _ => return Ok(None),
        }
        ensure!(
            shape == [rows, cols],
            "tensor {hf}: shape {shape:?} in the checkpoint, expected [{rows}, {cols}]"
        );
        let prefix = quant_prefix(hf);
        if self
            .index
            .contains_key(&format!("{prefix}.weight_scale_inv"))
        {
            ensure!(
                self.quant.as_ref().and_then(|q| q.block).is_some(),
                "tensor {prefix}.weight_scale_inv: block-wise FP8 scales, but quantization_config has no weight_block_size"
            );
            // Read as dense values (`fp8_block_values`).
            return Ok(None);
        }
        let sname = format!("{prefix}.weight_scale");
        let (sd, sshape, sbytes) = self
            .raw(&sname)?
            .ok_or_else(|| anyhow!("tensor {hf} is FP8 but {sname} is missing"))?;
        let scales = scale_values(&sname, sd, sbytes)?;
        let per_row = match (sshape.as_slice(), scales.len()) {
            ([] | [1] | [1, 1], 1) => vec![scales[0]; rows],
            ([r] | [r, 1], n) if *r == rows && n == rows => scales,
            _ => bail!(
                "tensor {sname}: shape {sshape:?}; expected one scale per tensor ([] or [1]) or per output channel ([{rows}] or [{rows}, 1]) (group or block scales are not supported)"
            ),
        };
        ensure!(
            per_row.iter().all(|s| s.is_finite()),
            "tensor {sname}: holds non-finite values"
        );
        ensure!(
            !codes.iter().any(|&b| b & 0x7F == 0x7F),
            "tensor {hf}: holds E4M3 NaN codes"
        );
        let m = QuantMatrix {
            rows,
            cols,
            data: QuantData::Fp8 {
                q: codes.to_vec(),
                scale: per_row,
            },
            smooth: None,
        };
        self.release(codes);
        Ok(Some(m))
    }

    /// A block-scaled FP8 weight (`hf` as E4M3 codes, `<prefix>.weight_scale_inv` one
    /// scale per block of the config's `weight_block_size`, the last blocks of a row or
    /// column cut short) as the exact f32 values `code × scale`. None when `hf` is not
    /// stored so.
    pub(crate) fn fp8_block_values(
        &self,
        hf: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Option<Vec<f32>>> {
        use safetensors::Dtype;
        let Some([br, bc]) = self.quant.as_ref().and_then(|q| q.block) else {
            return Ok(None);
        };
        let sname = format!("{}.weight_scale_inv", quant_prefix(hf));
        if !self.index.contains_key(&sname) {
            return Ok(None);
        }
        let Some((dtype, shape, codes)) = self.raw(hf)? else {
            return Ok(None);
        };
        ensure!(
            dtype == Dtype::F8_E4M3,
            "tensor {hf}: dtype {dtype:?} beside {sname}; expected float8_e4m3fn codes"
        );
        ensure!(
            shape == [rows, cols],
            "tensor {hf}: shape {shape:?} in the checkpoint, expected [{rows}, {cols}]"
        );
        let (sd, sshape, sbytes) = self.raw(&sname)?.expect("indexed");
        let scales = scale_values(&sname, sd, sbytes)?;
        let (sr, sc) = (rows.div_ceil(br), cols.div_ceil(bc));
        ensure!(
            sshape == [sr, sc],
            "tensor {sname}: shape {sshape:?}; expected [{sr}, {sc}] (blocks of [{br}, {bc}] over [{rows}, {cols}])"
        );
        ensure!(
            scales.iter().all(|s| s.is_finite()),
            "tensor {sname}: holds non-finite values"
        );
        ensure!(
            !codes.iter().any(|&b| b & 0x7F == 0x7F),
            "tensor {hf}: holds E4M3 NaN codes"
        );
        use rayon::prelude::*;
        let mut out = vec![0f32; rows * cols];
        out.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
            let codes = &codes[r * cols..(r + 1) * cols];
            let block_scales = &scales[(r / br) * sc..(r / br + 1) * sc];
            for (c, (v, &q)) in row.iter_mut().zip(codes).enumerate() {
                *v = wring_backend::quant::e4m3_to_f32(q) * block_scales[c / bc];
            }
        });
        self.release(codes);
        Ok(Some(out))
    }

    fn tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let Some((dtype, shape, b)) = self.raw(name)? else {
            return Ok(None);
        };
        let Some(data) = float_values(dtype, b) else {
            bail!(
                "{}: tensor {name} has dtype {dtype:?}; wring reads F32, F16 and BF16",
                self.shards[self.index[name].0].0.display()
            );
        };
        self.release(b);
        Ok(Some((shape, data)))
    }
}

/// The name a Mixtral tensor is read under: its router and experts by Qwen3-MoE's names
/// (`block_sparse_moe.gate` → `mlp.gate`, `block_sparse_moe.experts.E.w1|w2|w3` →
/// `mlp.experts.E.gate_proj|down_proj|up_proj`); None for every other name.
fn hf_alias(stored: &str) -> Option<String> {
    let (head, tail) = stored.split_once(".block_sparse_moe.")?;
    let tail = match tail.strip_prefix("experts.") {
        None => tail.to_string(),
        Some(rest) => {
            let (e, rest) = rest.split_once('.')?;
            let (w, suffix) = rest.split_once('.')?;
            let p = match w {
                "w1" => "gate_proj",
                "w2" => "down_proj",
                "w3" => "up_proj",
                _ => return None,
            };
            format!("experts.{e}.{p}.{suffix}")
        }
    };
    Some(format!("{head}.mlp.{tail}"))
}

/// Hugging Face name of a canonical tensor name.
pub(crate) fn hf_name(canonical: &str) -> String {
    // DeepSeek's router correction bias (llama.cpp: `exp_probs_b.bias`) is a buffer of the
    // router, not a `.bias` of a linear.
    if let Some(layer) = canonical
        .strip_prefix("blk.")
        .and_then(|r| r.strip_suffix(".exp_probs_b.bias"))
    {
        return format!("model.layers.{layer}.mlp.gate.e_score_correction_bias");
    }
    let (stem, suffix) = canonical.rsplit_once('.').unwrap_or((canonical, "weight"));
    let mapped = if let Some(rest) = stem.strip_prefix("blk.") {
        let (layer, part) = rest.split_once('.').unwrap_or((rest, ""));
        let expert = |p: &str| {
            let (kind, e) = p.split_once('.')?;
            let proj = match kind {
                "ffn_gate_exps" => "gate_proj",
                "ffn_up_exps" => "up_proj",
                "ffn_down_exps" => "down_proj",
                _ => return None,
            };
            Some(format!("model.layers.{layer}.mlp.experts.{e}.{proj}"))
        };
        if let Some(name) = expert(part) {
            return format!("{name}.{suffix}");
        }
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
            "attn_q_norm" => "self_attn.q_norm",
            "attn_k_norm" => "self_attn.k_norm",
            "ffn_gate_inp" => "mlp.gate",
            // DeepSeek-V3's latent attention and shared experts (llama.cpp's names).
            "attn_q_a" => "self_attn.q_a_proj",
            "attn_q_a_norm" => "self_attn.q_a_layernorm",
            "attn_q_b" => "self_attn.q_b_proj",
            "attn_kv_a_mqa" => "self_attn.kv_a_proj_with_mqa",
            "attn_kv_a_norm" => "self_attn.kv_a_layernorm",
            "attn_kv_b" => "self_attn.kv_b_proj",
            "ffn_gate_shexp" => "mlp.shared_experts.gate_proj",
            "ffn_up_shexp" => "mlp.shared_experts.up_proj",
            "ffn_down_shexp" => "mlp.shared_experts.down_proj",
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
    /// precision ([`CpuWeights::Auto`]): judged by the first layer's gate projection, its
    /// experts' in a mixture-of-experts file (a mixed file such as Q4_K_M has 4-bit gates
    /// and some 6-bit matrices, which then go to 4 bits too; experts take the format the
    /// dense weights would).
    pub fn native_cpu_weights(&self) -> CpuWeights {
        use crate::ggml_type::GgmlType;
        match self {
            WeightSource::Gguf(g) => match [
                "blk.0.ffn_gate_exps.weight",
                "blk.0.ffn_gate.0.weight",
                "blk.0.ffn_gate.weight",
            ]
            .iter()
            .find_map(|n| g.tensors.get(*n))
            .map(|t| t.ty)
            {
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
            WeightSource::Gguf(g) => g.has_tensor(name),
            WeightSource::Safetensors(s) => {
                let hf = hf_name(name);
                s.index.contains_key(&hf)
                    || s.index
                        .contains_key(&format!("{}.qweight", quant_prefix(&hf)))
            }
            WeightSource::Dummy { .. } => {
                !(name == "output.weight" && cfg.tie_word_embeddings)
                    && (cfg.attention_bias || !name.ends_with(".bias"))
                    && (cfg.qk_norm
                        || !(name.ends_with(".attn_q_norm.weight")
                            || name.ends_with(".attn_k_norm.weight")))
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
                let (dims, data) = match name.strip_suffix("attn_kv_b.weight") {
                    // Newer DeepSeek files split it in two.
                    Some(prefix) if !g.has_tensor(name) => g.joined_kv_b(prefix)?,
                    _ => g.dequantize(name)?,
                };
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
                if let Some(data) = s.fp8_block_values(&hf, rows, cols)? {
                    return Ok(HostMatrix { rows, cols, data });
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
        assert_eq!(
            hf_name("blk.2.attn_k_norm.weight"),
            "model.layers.2.self_attn.k_norm.weight"
        );
        assert_eq!(
            hf_name("blk.1.ffn_gate_inp.weight"),
            "model.layers.1.mlp.gate.weight"
        );
        assert_eq!(
            hf_name("blk.1.ffn_down_exps.17.weight"),
            "model.layers.1.mlp.experts.17.down_proj.weight"
        );
        assert_eq!(
            hf_name("blk.4.attn_kv_a_mqa.weight"),
            "model.layers.4.self_attn.kv_a_proj_with_mqa.weight"
        );
        assert_eq!(
            hf_name("blk.4.ffn_down_shexp.weight"),
            "model.layers.4.mlp.shared_experts.down_proj.weight"
        );
        assert_eq!(
            hf_name("blk.4.exp_probs_b.bias"),
            "model.layers.4.mlp.gate.e_score_correction_bias"
        );
        assert_eq!(
            hf_alias("model.layers.4.block_sparse_moe.experts.7.w3.weight").as_deref(),
            Some("model.layers.4.mlp.experts.7.up_proj.weight")
        );
        assert_eq!(
            hf_alias("model.layers.4.block_sparse_moe.gate.weight").as_deref(),
            Some("model.layers.4.mlp.gate.weight")
        );
        assert_eq!(hf_alias("model.layers.4.mlp.gate_proj.weight"), None);
    }

    fn ct_config(strategy: &str) -> serde_json::Value {
        serde_json::json!({"quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": strategy, "dynamic": false, "symmetric": true},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true},
            }},
            "ignore": ["lm_head"],
        }})
    }

    #[test]
    fn fp8_configs_are_read_or_refused_with_the_reason() {
        for cfg in [
            ct_config("channel"),
            ct_config("tensor"),
            serde_json::json!({"quantization_config": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}}),
            serde_json::json!({"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}),
        ] {
            let q = QuantConfig::from_config_json(&cfg).unwrap().unwrap();
            assert_eq!(
                (q.scheme, q.format),
                (Scheme::Fp8, QuantFormat::Fp8Published)
            );
        }
        let err = |cfg: serde_json::Value| {
            format!("{:#}", QuantConfig::from_config_json(&cfg).unwrap_err())
        };
        assert!(err(ct_config("block")).contains("per \"block\""));
        assert!(err(ct_config("group")).contains("per \"group\""));
        let block = serde_json::json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}});
        assert_eq!(
            QuantConfig::from_config_json(&block)
                .unwrap()
                .unwrap()
                .block,
            Some([128, 128])
        );
        let mut ct_block = ct_config("channel");
        ct_block["quantization_config"]["weight_block_size"] = serde_json::json!([128, 128]);
        assert!(err(ct_block).contains("read for quant_method \"fp8\" only"));
        let bad = serde_json::json!({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}});
        assert!(err(bad).contains("is not two positive integers"));
        let mut int4 = ct_config("channel");
        int4["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4.into();
        int4["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int".into();
        assert!(err(int4).contains("4-bit \"int\""));
        let mut packed = ct_config("channel");
        packed["quantization_config"]["format"] = "pack-quantized".into();
        assert!(err(packed).contains("pack-quantized"));
        let e5m2 =
            serde_json::json!({"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}});
        assert!(err(e5m2).contains("e5m2"));
        let awq = serde_json::json!({"quantization_config": {"quant_method": "awq"}});
        assert!(err(awq).contains("\"awq\" is not supported"));
    }

    /// A one-file checkpoint of `tensors` with an FP8 `quantization_config`.
    fn fp8_dir(tensors: Vec<(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)>) -> tempfile::TempDir {
        fp8_dir_with(ct_config("channel"), tensors)
    }

    fn fp8_dir_with(
        config: serde_json::Value,
        tensors: Vec<(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)>,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let views: Vec<_> = tensors
            .iter()
            .map(|(n, d, s, b)| {
                (
                    n.to_string(),
                    safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, &None, &dir.path().join("model.safetensors"))
            .unwrap();
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        dir
    }

    /// Block-scaled FP8 (DeepSeek-V3's and Qwen3's FP8 releases): each value is its E4M3
    /// code times its block's `weight_scale_inv`, the last blocks cut short; a scale grid of
    /// the wrong shape is named.
    #[test]
    fn block_scaled_fp8_reads_as_code_times_its_blocks_scale() {
        use safetensors::Dtype;
        let config = serde_json::json!({"quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [2, 2],
        }});
        // A [3, 5] matrix in [2, 2] blocks: a [2, 3] grid of scales. 0x38 = 1.0, 0x40 = 2.0.
        let codes: Vec<u8> = (0..15)
            .map(|i| if i % 2 == 0 { 0x38 } else { 0x40 })
            .collect();
        let scales = [1.0f32, 2.0, 4.0, 0.5, 0.25, 8.0];
        let w = "model.layers.0.mlp.down_proj.weight";
        let dir = fp8_dir_with(
            config,
            vec![
                (w, Dtype::F8_E4M3, vec![3, 5], codes.clone()),
                (
                    "model.layers.0.mlp.down_proj.weight_scale_inv",
                    Dtype::F32,
                    vec![2, 3],
                    f32_bytes(&scales),
                ),
                (
                    "model.layers.0.mlp.up_proj.weight",
                    Dtype::F8_E4M3,
                    vec![3, 5],
                    codes.clone(),
                ),
                (
                    "model.layers.0.mlp.up_proj.weight_scale_inv",
                    Dtype::F32,
                    vec![1, 3],
                    f32_bytes(&scales[..3]),
                ),
            ],
        );
        let s = SafetensorsSet::open(dir.path()).unwrap();
        assert!(
            s.quant_matrix(w, 3, 5).unwrap().is_none(),
            "no per-row FP8 holds it"
        );
        let src = WeightSource::Safetensors(s);
        let got = src.matrix("blk.0.ffn_down.weight", 3, 5).unwrap().data;
        let want: Vec<f32> = (0..15)
            .map(|i| {
                let (r, c) = (i / 5, i % 5);
                let code = if i % 2 == 0 { 1.0 } else { 2.0 };
                code * scales[(r / 2) * 3 + c / 2]
            })
            .collect();
        assert_eq!(got, want);
        // A tensor-parallel slice reads the same values.
        let part = src
            .matrix_part(
                "blk.0.ffn_down.weight",
                3,
                5,
                &crate::weight_slice::Part::Rows(1..3),
            )
            .unwrap();
        assert_eq!(part.data, want[5..]);
        let e = format!("{:#}", src.matrix("blk.0.ffn_up.weight", 3, 5).unwrap_err());
        assert!(
            e.contains("shape [1, 3]; expected [2, 3] (blocks of [2, 2] over [3, 5])"),
            "{e}"
        );
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn published_fp8_tensors_read_exactly_and_bad_ones_are_named() {
        use safetensors::Dtype;
        // E4M3 codes: 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0, 0x00 = 0.
        let codes = vec![0x38u8, 0x40, 0xB8, 0x00, 0x40, 0x38];
        let w = "model.layers.0.mlp.down_proj.weight";
        // Per channel ([rows, 1], bf16 scales) and per tensor ([] f32).
        let bf = |v: f32| half::bf16::from_f32(v).to_le_bytes().to_vec();
        let dir = fp8_dir(vec![
            (w, Dtype::F8_E4M3, vec![2, 3], codes.clone()),
            (
                "model.layers.0.mlp.down_proj.weight_scale",
                Dtype::BF16,
                vec![2, 1],
                [bf(0.5), bf(2.0)].concat(),
            ),
            (
                "model.layers.0.mlp.up_proj.weight",
                Dtype::F8_E4M3,
                vec![2, 3],
                codes.clone(),
            ),
            (
                "model.layers.0.mlp.up_proj.weight_scale",
                Dtype::F32,
                vec![],
                f32_bytes(&[0.25]),
            ),
            (
                "model.layers.0.mlp.up_proj.input_scale",
                Dtype::F32,
                vec![],
                f32_bytes(&[0.1]),
            ),
            (
                "lm_head.weight",
                Dtype::BF16,
                vec![2, 3],
                [bf(1.0), bf(2.0), bf(3.0), bf(4.0), bf(5.0), bf(6.0)].concat(),
            ),
            (
                "model.layers.0.mlp.gate_proj.weight",
                Dtype::F8_E4M3,
                vec![2, 3],
                codes.clone(),
            ),
            (
                "model.layers.1.mlp.gate_proj.weight",
                Dtype::F8_E5M2,
                vec![2, 3],
                codes.clone(),
            ),
            (
                "model.layers.1.mlp.gate_proj.weight_scale",
                Dtype::F32,
                vec![],
                f32_bytes(&[1.0]),
            ),
            (
                "model.layers.2.mlp.gate_proj.weight",
                Dtype::F8_E4M3,
                vec![2, 3],
                codes.clone(),
            ),
            (
                "model.layers.2.mlp.gate_proj.weight_scale",
                Dtype::F32,
                vec![1, 3],
                f32_bytes(&[1.0, 1.0, 1.0]),
            ),
            (
                "model.layers.3.mlp.gate_proj.weight",
                Dtype::F8_E4M3,
                vec![2, 3],
                codes.clone(),
            ),
            (
                "model.layers.3.mlp.gate_proj.weight_scale_inv",
                Dtype::F32,
                vec![1, 1],
                f32_bytes(&[1.0]),
            ),
        ]);
        let s = SafetensorsSet::open(dir.path()).unwrap();
        let q = s.quant_matrix(w, 2, 3).unwrap().unwrap();
        assert_eq!(
            q.data,
            QuantData::Fp8 {
                q: codes.clone(),
                scale: vec![0.5, 2.0]
            }
        );
        assert_eq!(q.dequantize(), vec![0.5, 1.0, -0.5, 0.0, 4.0, 2.0]);
        let q = s
            .quant_matrix("model.layers.0.mlp.up_proj.weight", 2, 3)
            .unwrap()
            .unwrap();
        assert_eq!(q.dequantize(), vec![0.25, 0.5, -0.25, 0.0, 0.5, 0.25]);
        // An unquantized tensor of the same checkpoint reads densely.
        assert!(s.quant_matrix("lm_head.weight", 2, 3).unwrap().is_none());
        let src = WeightSource::Safetensors(s);
        assert_eq!(
            src.matrix("output.weight", 2, 3).unwrap().data,
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        assert_eq!(
            src.matrix("blk.0.ffn_down.weight", 2, 3).unwrap().data,
            vec![0.5, 1.0, -0.5, 0.0, 4.0, 2.0]
        );
        let err = |name: &str| match src.matrix(name, 2, 3) {
            Ok(_) => panic!("{name} loaded"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err("blk.0.ffn_gate.weight").contains("weight_scale is missing"));
        assert!(err("blk.1.ffn_gate.weight").contains("float8_e5m2"));
        assert!(err("blk.2.ffn_gate.weight").contains("per output channel"));
        assert!(err("blk.3.ffn_gate.weight").contains("block-wise"));
        let e = format!(
            "{:#}",
            src.matrix("blk.0.ffn_down.weight", 3, 2).unwrap_err()
        );
        assert!(e.contains("expected [3, 2]"), "{e}");
    }
}
