//! GGUF v2/v3 reader: metadata, tensor directory, and dequantisation of the tensor
//! types wring supports; the model configuration a file's metadata describes, by the
//! keys and tensor names llama.cpp writes (llama, qwen2, qwen3, qwen3moe; Mixtral as
//! llama with experts). Errors name the tensor or key and the problem.

use anyhow::{anyhow, bail, ensure, Context, Result};
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::path::Path;

use crate::config::{
    GenerationDefaults, MlaConfig, ModelConfig, MoeConfig, MoeScoringFunc, RopeScaling,
};
use crate::ggml_type::ggml_type_name;
pub use crate::ggml_type::GgmlType;
use crate::quant;

#[derive(Debug, Clone)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            MetaValue::U8(v) => v as u64,
            MetaValue::I8(v) => v as u64,
            MetaValue::U16(v) => v as u64,
            MetaValue::I16(v) => v as u64,
            MetaValue::U32(v) => v as u64,
            MetaValue::I32(v) => v as u64,
            MetaValue::U64(v) => v,
            MetaValue::I64(v) => v as u64,
            _ => return None,
        })
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// GGML order: `dims[0]` is the contiguous (column) dimension.
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Byte offset from the start of the file.
    pub offset: usize,
    pub nbytes: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

pub struct GgufFile {
    pub version: u32,
    pub meta: BTreeMap<String, MetaValue>,
    pub tensors: BTreeMap<String, TensorInfo>,
    mmap: Mmap,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(
            self.pos.checked_add(n).is_some_and(|e| e <= self.buf.len()),
            "file ends at byte {} while reading {n} bytes at {} (truncated?)",
            self.buf.len(),
            self.pos
        );
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u64()? as usize;
        ensure!(
            n < 1 << 30,
            "string length {n} is implausible (corrupt file?)"
        );
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn value(&mut self, ty: u32, depth: usize) -> Result<MetaValue> {
        Ok(match ty {
            0 => MetaValue::U8(self.u8()?),
            1 => MetaValue::I8(self.u8()? as i8),
            2 => MetaValue::U16(self.u16()?),
            3 => MetaValue::I16(self.u16()? as i16),
            4 => MetaValue::U32(self.u32()?),
            5 => MetaValue::I32(self.u32()? as i32),
            6 => MetaValue::F32(f32::from_bits(self.u32()?)),
            7 => MetaValue::Bool(self.u8()? != 0),
            8 => MetaValue::Str(self.string()?),
            9 => {
                ensure!(depth < 4, "nested arrays too deep");
                let ety = self.u32()?;
                let n = self.u64()? as usize;
                ensure!(
                    n < 1 << 28,
                    "array length {n} is implausible (corrupt file?)"
                );
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, depth + 1)?);
                }
                MetaValue::Array(v)
            }
            10 => MetaValue::U64(self.u64()?),
            11 => MetaValue::I64(self.u64()? as i64),
            12 => MetaValue::F64(f64::from_bits(self.u64()?)),
            t => bail!("unknown metadata value type {t}"),
        })
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: the file is opened read-only; wring never writes model files it maps.
        let mmap = unsafe { Mmap::map(&file) }
            .with_context(|| format!("cannot map {}", path.display()))?;
        Self::parse(mmap).with_context(|| format!("{} is not a valid GGUF file", path.display()))
    }

    fn parse(mmap: Mmap) -> Result<Self> {
        let mut c = Cursor { buf: &mmap, pos: 0 };
        let magic = c.take(4).context("reading the magic number")?;
        ensure!(
            magic == b"GGUF",
            "bad magic {:?} (expected \"GGUF\")",
            String::from_utf8_lossy(magic)
        );
        let version = c.u32()?;
        ensure!(
            version == 2 || version == 3,
            "GGUF version {version} is not supported (2 or 3)"
        );
        let n_tensors = c.u64()? as usize;
        let n_kv = c.u64()? as usize;
        ensure!(
            n_tensors < 1 << 20 && n_kv < 1 << 20,
            "header counts implausible ({n_tensors} tensors, {n_kv} keys)"
        );
        let mut meta = BTreeMap::new();
        for i in 0..n_kv {
            let key = c.string().with_context(|| format!("metadata key #{i}"))?;
            let ty = c.u32()?;
            let v = c
                .value(ty, 0)
                .with_context(|| format!("metadata value of {key}"))?;
            meta.insert(key, v);
        }
        let mut infos = Vec::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let name = c.string().with_context(|| format!("tensor #{i} name"))?;
            let nd = c.u32()? as usize;
            ensure!(nd <= 4, "tensor {name}: {nd} dimensions");
            let mut dims = Vec::with_capacity(nd);
            for _ in 0..nd {
                dims.push(c.u64()? as usize);
            }
            let tid = c.u32()?;
            let off = c.u64()? as usize;
            infos.push((name, dims, tid, off));
        }
        let align = meta
            .get("general.alignment")
            .and_then(|v| v.as_u64())
            .unwrap_or(32) as usize;
        ensure!(
            align.is_power_of_two(),
            "general.alignment {align} is not a power of two"
        );
        let data_start = c.pos.div_ceil(align) * align;
        let mut tensors = BTreeMap::new();
        for (name, dims, tid, off) in infos {
            let ty = GgmlType::from_id(tid).ok_or_else(|| anyhow::anyhow!("tensor {name}: type {} (id {tid}) is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)", ggml_type_name(tid)))?;
            let numel: usize = dims.iter().product();
            let (be, bb) = ty.block();
            ensure!(numel.is_multiple_of(be), "tensor {name}: {numel} elements is not a multiple of the {be}-element block of {ty:?}");
            let nbytes = numel / be * bb;
            let offset = data_start + off;
            ensure!(offset + nbytes <= mmap.len(), "tensor {name}: data at bytes {offset}..{} lies past the end of the file ({} bytes): the file is truncated", offset + nbytes, mmap.len());
            tensors.insert(
                name.clone(),
                TensorInfo {
                    name,
                    dims,
                    ty,
                    offset,
                    nbytes,
                },
            );
        }
        Ok(Self {
            version,
            meta,
            tensors,
            mmap,
        })
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta.get(key)
    }
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.meta.get(key).and_then(|v| v.as_u64())
    }
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.meta.get(key).and_then(|v| v.as_f64())
    }
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.meta.get(key).and_then(|v| v.as_str())
    }
    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key)
            .ok_or_else(|| anyhow::anyhow!("metadata key {key} is missing or not an integer"))
    }

    pub fn raw(&self, t: &TensorInfo) -> &[u8] {
        &self.mmap[t.offset..t.offset + t.nbytes]
    }

    /// Whether [`GgufFile::tensor`] finds `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
            || (expert_name(name).is_some() && self.tensor(name).is_ok())
    }

    /// The tensor wring's canonical `name` reads: a tensor of the file, or one expert of a
    /// layer's stacked experts. llama.cpp stores a layer's experts as one 3-D tensor,
    /// `blk.N.ffn_gate_exps.weight` with dims `[in, out, experts]` (each expert's matrix
    /// contiguous, expert-major, in any GGML type); expert E of it is the canonical
    /// `blk.N.ffn_gate_exps.E.weight`, a `[in, out]` view of its bytes. Files written
    /// before llama.cpp stacked experts hold them apart, as `blk.N.ffn_gate.E.weight`.
    pub fn tensor(&self, name: &str) -> Result<TensorInfo> {
        if let Some(t) = self.tensors.get(name) {
            return Ok(t.clone());
        }
        let Some((layer, kind, e)) = expert_name(name) else {
            bail!("tensor {name} is missing from the file");
        };
        let stacked = stacked_name(layer, kind);
        let Some(t) = self.tensors.get(&stacked) else {
            if let Some(t) = self.tensors.get(&legacy_expert_name(layer, kind, e)) {
                return Ok(t.clone());
            }
            bail!("tensor {stacked} is missing from the file (the experts of layer {layer})");
        };
        let [cols, rows, n] = t.dims[..] else {
            bail!(
                "tensor {stacked}: shape {:?} in the file, expected 3 dimensions [in, out, experts]",
                t.dims
            );
        };
        ensure!(
            e < n,
            "tensor {stacked} stacks {n} experts; expert {e} is not among them"
        );
        let (be, bb) = t.ty.block();
        ensure!(
            cols.is_multiple_of(be),
            "tensor {stacked}: rows of {cols} values are not whole {be}-value blocks of {:?}",
            t.ty
        );
        let nbytes = rows * cols / be * bb;
        Ok(TensorInfo {
            name: name.to_string(),
            dims: vec![cols, rows],
            ty: t.ty,
            offset: t.offset + e * nbytes,
            nbytes,
        })
    }

    /// Dequantises a tensor ([`GgufFile::tensor`]: one expert of stacked experts too) to
    /// f32 in GGML order (row-major with `dims[0]` contiguous).
    pub fn dequantize(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self.tensor(name)?;
        let data = quant::dequantize(t.ty, self.raw(&t), t.numel())
            .with_context(|| format!("tensor {name}"))?;
        if let Some(i) = data.iter().position(|x| !x.is_finite()) {
            bail!("tensor {name}: value #{i} is not finite (corrupt file?)");
        }
        Ok((t.dims.clone(), data))
    }
}

/// Per-pair RoPE frequency divisors (llama.cpp's converter writes them for Llama 3.x).
const ROPE_FREQS: &str = "rope_freqs.weight";

/// The `general.architecture`s wring reads (what a refusal lists).
pub const GGUF_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3", "qwen3moe", "deepseek2"];

impl GgufFile {
    /// The sampling settings the file's publisher recorded (`general.sampling.*`).
    pub fn generation_defaults(&self) -> GenerationDefaults {
        let f = |k: &str| self.get_f64(k).map(|x| x as f32);
        GenerationDefaults {
            temperature: f("general.sampling.temp"),
            top_p: f("general.sampling.top_p"),
            top_k: self.get_u64("general.sampling.top_k").map(|x| x as u32),
            min_p: f("general.sampling.min_p"),
        }
    }

    /// The model configuration the metadata describes, as llama.cpp's converter writes it
    /// (`{arch}.embedding_length`, `.attention.head_count`, `.expert_count`, ...); the
    /// vocabulary is `{arch}.vocab_size`, else the tokens of `tokenizer.ggml.tokens`.
    ///
    /// The `architecture` is named as Hugging Face's `model_type` would name it: a
    /// `qwen3moe` file runs as "qwen3_moe", a `llama` file with experts (Mixtral) as
    /// "mixtral". llama.cpp's converter permutes q/k rows of `llama` files for
    /// adjacent-pair RoPE (`rope_interleaved`); qwen2/qwen3 files keep Hugging Face's
    /// order (NEOX rotation of halves). Experts route as llama.cpp routes both
    /// architectures: softmax over all experts, the top `expert_used_count`, weights
    /// renormalised to sum 1 (unless `{arch}.expert_weights_norm` says false). A layer
    /// without a router (`blk.N.ffn_gate_inp.weight`) but with `blk.N.ffn_gate.weight`
    /// is dense (a Qwen3-MoE's `mlp_only_layers`, which llama.cpp itself does not load).
    pub fn model_config(&self) -> Result<ModelConfig> {
        let arch = self
            .get_str("general.architecture")
            .ok_or_else(|| anyhow!("metadata key general.architecture is missing"))?;
        ensure!(
            GGUF_ARCHITECTURES.contains(&arch),
            "architecture {arch:?} is not supported (supported: llama (Llama, Mistral, Mixtral), qwen2, qwen3, qwen3moe, deepseek2 (DeepSeek-V3, R1))"
        );
        if arch == "deepseek2" {
            return self.deepseek2_config();
        }
        let k = |s: &str| format!("{arch}.{s}");
        let req = |s: &str| self.require_u64(&k(s)).map(|v| v as usize);
        let opt = |s: &str| self.get_u64(&k(s)).map(|v| v as usize);
        let (hidden, heads, num_layers) = self.block_dims(arch)?;
        let kv_heads = opt("attention.head_count_kv").unwrap_or(heads);
        ensure!(
            kv_heads > 0 && heads.is_multiple_of(kv_heads),
            "{arch}.attention.head_count_kv {kv_heads} does not divide the {heads} heads"
        );
        let head_dim = opt("attention.key_length").unwrap_or(hidden / heads);
        if let Some(v) = opt("attention.value_length") {
            ensure!(
                v == head_dim,
                "{arch}.attention.value_length {v} differs from the key length {head_dim} (not supported)"
            );
        }
        if let Some(r) = opt("rope.dimension_count") {
            ensure!(
                r == head_dim,
                "{arch}.rope.dimension_count {r}: RoPE over part of a {head_dim}-value head is not supported"
            );
        }
        let experts = opt("expert_count").unwrap_or(0);
        let model_type = match (arch, experts) {
            ("llama", 0) => "llama",
            ("llama", _) => "mixtral",
            ("qwen3moe", 0) => bail!("metadata key qwen3moe.expert_count is missing or 0"),
            ("qwen3moe", _) => "qwen3_moe",
            (other, 0) => other,
            (other, n) => bail!(
                "{other}.expert_count is {n}: experts are read for llama (Mixtral) and qwen3moe files only"
            ),
        };
        let ffn = if model_type == "qwen3_moe" {
            // Only the dense layers use it (llama.cpp does not require it here).
            opt("feed_forward_length")
        } else {
            Some(req("feed_forward_length")?)
        };
        let moe = if experts == 0 {
            None
        } else {
            Some(self.moe_config(arch, experts, num_layers, ffn)?)
        };
        let intermediate_size = match (ffn, &moe) {
            (Some(f), _) => f,
            (None, Some(m)) if m.dense_layers.is_empty() => m.expert_intermediate_size,
            (None, _) => bail!(
                "metadata key {arch}.feed_forward_length is missing (the dense layers need it)"
            ),
        };
        let rope_scaling = match self.get_str(&k("rope.scaling.type")) {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear {
                factor: self.get_f64(&k("rope.scaling.factor")).unwrap_or(1.0) as f32,
            },
            Some(other) => {
                bail!("{arch}.rope.scaling.type {other:?} is not supported (none, linear)")
            }
        };
        let rope_freqs = self.has_tensor(ROPE_FREQS);
        ensure!(
            !rope_freqs || rope_scaling == RopeScaling::None,
            "{arch}: {ROPE_FREQS} together with {arch}.rope.scaling.type is not supported"
        );
        let mut config = ModelConfig {
            architecture: model_type.into(),
            hidden_size: hidden,
            intermediate_size,
            num_layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            vocab_size: self.vocab_size(arch)?,
            max_position_embeddings: opt("context_length").unwrap_or(4096),
            rms_norm_eps: self
                .get_f64(&k("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5) as f32,
            rope_theta: self.get_f64(&k("rope.freq_base")).unwrap_or(10000.0) as f32,
            rope_scaling,
            rope_interleaved: arch == "llama",
            tie_word_embeddings: !self.tensors.contains_key("output.weight"),
            attention_bias: self.tensors.contains_key("blk.0.attn_q.bias"),
            qk_norm: matches!(arch, "qwen3" | "qwen3moe"),
            moe,
            mla: None,
        };
        if rope_freqs {
            config.rope_scaling = self.rope_factors(&config)?;
        }
        Ok(config)
    }

    /// The scaling `rope_freqs.weight` spells for `config` (a divisor per rotated pair):
    /// Llama 3's where the factors are its formula with one of the published parameter
    /// sets (what llama.cpp's converter writes for Llama 3.1, 3.2 and 3.3), else the
    /// factors themselves.
    fn rope_factors(&self, config: &ModelConfig) -> Result<RopeScaling> {
        let (shape, factors) = self.dequantize(ROPE_FREQS)?;
        let pairs = config.rope_dim() / 2;
        ensure!(
            factors.len() == pairs,
            "{ROPE_FREQS} has shape {shape:?}: {} values, expected one per rotated pair ({pairs})",
            factors.len()
        );
        ensure!(
            factors.iter().all(|f| f.is_finite() && *f > 0.0),
            "{ROPE_FREQS} holds a value that is not a positive number"
        );
        let base = config.rope_base_freq();
        let factor = factors.iter().copied().fold(1.0f32, f32::max);
        // Llama 3.1, 3.2 and 3.3 all publish low_freq_factor 1, high_freq_factor 4 and
        // 8,192 original positions (the factor is the largest divisor: 8 or 32).
        let llama3 = RopeScaling::Llama3 {
            factor,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        };
        let scaled = crate::config::llama3_inv_freq(&base, factor as f64, 1.0, 4.0, 8192.0);
        let same = base.iter().zip(&scaled).zip(&factors).all(|((b, s), f)| {
            let want = (b / s) as f32;
            (want - f).abs() <= 1e-5 * want.abs()
        });
        if same {
            return Ok(llama3);
        }
        Ok(RopeScaling::Factors(factors))
    }

    /// Hidden size, heads and layers (`{arch}.embedding_length`, `.attention.head_count`,
    /// `.block_count`), each positive.
    fn block_dims(&self, arch: &str) -> Result<(usize, usize, usize)> {
        let req = |s: &str| self.require_u64(&format!("{arch}.{s}")).map(|v| v as usize);
        let dims = (
            req("embedding_length")?,
            req("attention.head_count")?,
            req("block_count")?,
        );
        ensure!(
            dims.0 > 0 && dims.1 > 0 && dims.2 > 0,
            "{arch}.embedding_length, .attention.head_count and .block_count must be positive"
        );
        Ok(dims)
    }

    /// `{arch}.vocab_size`, else the number of `tokenizer.ggml.tokens`.
    fn vocab_size(&self, arch: &str) -> Result<usize> {
        if let Some(v) = self.get_u64(&format!("{arch}.vocab_size")) {
            return Ok(v as usize);
        }
        self.get("tokenizer.ggml.tokens")
            .and_then(|t| t.as_array())
            .map(|t| t.len())
            .ok_or_else(|| {
                anyhow!("metadata keys {arch}.vocab_size and tokenizer.ggml.tokens are missing")
            })
    }

    /// DeepSeek-V3/R1 as llama.cpp's converter writes them (`deepseek2`): latent attention
    /// from `.attention.q_lora_rank` / `.kv_lora_rank` and the per-head lengths
    /// (`.key_length_mla` / `.value_length_mla` where the file also writes the MQA form, else
    /// `.key_length` / `.value_length`), RoPE on `.rope.dimension_count` values of adjacent
    /// pairs, YaRN from `.rope.scaling.*` (`yarn_log_multiplier` is 0.1 × `mscale_all_dim`;
    /// the rotated values stay unscaled, as llama.cpp runs them), and the experts from
    /// `.leading_dense_block_count` on: sigmoid gating (`expert_gating_func` 2) with the
    /// correction bias `blk.N.exp_probs_b.bias`, `.expert_group_count` groups of which
    /// `.expert_group_used_count` are eligible, `.expert_weights_scale`, and
    /// `.expert_shared_count` shared experts. DeepSeek-V2's softmax gating is refused.
    fn deepseek2_config(&self) -> Result<ModelConfig> {
        let arch = "deepseek2";
        let k = |s: &str| format!("{arch}.{s}");
        let req = |s: &str| self.require_u64(&k(s)).map(|v| v as usize);
        let opt = |s: &str| self.get_u64(&k(s)).map(|v| v as usize);
        let (hidden, heads, num_layers) = self.block_dims(arch)?;
        let rope = req("rope.dimension_count")?;
        let (key, value) = match opt("attention.key_length_mla") {
            Some(key) => (key, req("attention.value_length_mla")?),
            None => (req("attention.key_length")?, req("attention.value_length")?),
        };
        ensure!(
            rope > 0 && rope.is_multiple_of(2) && key > rope,
            "{arch}: the key length {key} must exceed the RoPE dimension count {rope}, which must be even and positive"
        );
        let mla = MlaConfig {
            q_lora_rank: opt("attention.q_lora_rank").filter(|&r| r > 0),
            kv_lora_rank: req("attention.kv_lora_rank")?,
            qk_nope_head_dim: key - rope,
            qk_rope_head_dim: rope,
            v_head_dim: value,
        };
        let gating = self.get_u64(&k("expert_gating_func"));
        ensure!(
            gating == Some(2),
            "{arch}.expert_gating_func {}: only sigmoid gating (2: DeepSeek-V3, R1) is supported; DeepSeek-V2's softmax gating is not",
            gating.map_or("missing (softmax, DeepSeek-V2)".into(), |g| g.to_string())
        );
        let experts = req("expert_count")?;
        let top_k = req("expert_used_count")?;
        let leading_dense = opt("leading_dense_block_count").unwrap_or(0);
        let expert_ffn = req("expert_feed_forward_length")?;
        let groups = opt("expert_group_count").unwrap_or(1).max(1);
        let top_groups = opt("expert_group_used_count").unwrap_or(groups);
        ensure!(
            (1..=experts).contains(&top_k),
            "{arch}.expert_used_count {top_k} must lie in 1..={experts} (the experts)"
        );
        ensure!(
            experts.is_multiple_of(groups)
                && (1..=groups).contains(&top_groups)
                && top_groups * (experts / groups) >= top_k,
            "{arch}: {experts} experts in {groups} groups, {top_groups} of them eligible, cannot route {top_k} a token"
        );
        let moe = MoeConfig {
            scoring: MoeScoringFunc::Sigmoid,
            // Then every expert layer must have one (`check_tensors`).
            correction_bias: (leading_dense..num_layers)
                .any(|l| self.has_tensor(&format!("blk.{l}.exp_probs_b.bias"))),
            groups,
            top_groups,
            routed_scaling_factor: self
                .get_f64(&k("expert_weights_scale"))
                .filter(|&s| s != 0.0)
                .unwrap_or(1.0) as f32,
            shared_intermediate_size: opt("expert_shared_count").unwrap_or(0) * expert_ffn,
            ..MoeConfig::softmax(
                experts,
                top_k,
                expert_ffn,
                self.get(&k("expert_weights_norm"))
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                (0..leading_dense.min(num_layers)).collect(),
            )
        };
        let rope_scaling = match self.get_str(&k("rope.scaling.type")) {
            None | Some("none") => RopeScaling::None,
            Some("yarn") => {
                let f = |s: &str| self.get_f64(&k(s)).map(|v| v as f32);
                // The rotated values unscaled: mscale = mscale_all_dim.
                // The multiplier is 0.1 × mscale_all_dim rounded to f32: the config's
                // short decimal (1.0, 0.707, ...) comes back at 6 decimals.
                let log_mul = self
                    .get_f64(&k("rope.scaling.yarn_log_multiplier"))
                    .unwrap_or(0.0);
                let all_dim = ((log_mul / 0.1 * 1e6).round() / 1e6) as f32;
                RopeScaling::Yarn {
                    factor: f("rope.scaling.factor").unwrap_or(1.0),
                    original_max_position_embeddings: req("rope.scaling.original_context_length")?,
                    beta_fast: f("rope.scaling.yarn_beta_fast")
                        .filter(|&b| b != 0.0)
                        .unwrap_or(32.0),
                    beta_slow: f("rope.scaling.yarn_beta_slow")
                        .filter(|&b| b != 0.0)
                        .unwrap_or(1.0),
                    mscale: all_dim,
                    mscale_all_dim: all_dim,
                    attention_factor: None,
                    truncate: true,
                }
            }
            Some(other) => {
                bail!("{arch}.rope.scaling.type {other:?} is not supported (none, yarn)")
            }
        };
        let intermediate_size = match opt("feed_forward_length") {
            Some(f) => f,
            None if leading_dense == 0 => expert_ffn,
            None => bail!(
                "metadata key {arch}.feed_forward_length is missing (the dense layers need it)"
            ),
        };
        Ok(ModelConfig {
            architecture: "deepseek_v3".into(),
            hidden_size: hidden,
            intermediate_size,
            num_layers,
            num_heads: heads,
            // The cache holds materialised heads (`ModelConfig::mla`).
            num_kv_heads: heads,
            head_dim: mla.cache_head_dim(),
            vocab_size: self.vocab_size(arch)?,
            max_position_embeddings: opt("context_length").unwrap_or(4096),
            rms_norm_eps: self
                .get_f64(&k("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-6) as f32,
            rope_theta: self.get_f64(&k("rope.freq_base")).unwrap_or(10000.0) as f32,
            rope_scaling,
            // llama.cpp rotates DeepSeek's adjacent pairs, the weights as Hugging Face keeps them.
            rope_interleaved: true,
            tie_word_embeddings: !self.tensors.contains_key("output.weight"),
            attention_bias: false,
            qk_norm: false,
            moe: Some(moe),
            mla: Some(mla),
        })
    }

    /// DeepSeek's `kv_b` (`[heads × (nope + v)]` rows of the latent) from the halves
    /// llama.cpp's converter splits it into: `attn_k_b` (GGML `[nope, latent, heads]`: each
    /// head's k rows transposed) and `attn_v_b` (`[latent, v, heads]`). Dims as `dequantize`
    /// gives them: `[latent, rows]`.
    pub fn joined_kv_b(&self, prefix: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let (kd, k_b) = self.dequantize(&format!("{prefix}attn_k_b.weight"))?;
        let (vd, v_b) = self.dequantize(&format!("{prefix}attn_v_b.weight"))?;
        let (&[nope, r, heads], &[r2, v, heads2]) = (&kd[..], &vd[..]) else {
            bail!("tensors {prefix}attn_k_b / attn_v_b: shapes {kd:?} / {vd:?}, expected [nope, latent, heads] / [latent, v, heads]");
        };
        ensure!(
            r == r2 && heads == heads2,
            "tensors {prefix}attn_k_b / attn_v_b: shapes {kd:?} / {vd:?} disagree on the latent width or the heads"
        );
        let per_head = nope + v;
        let mut kv_b = vec![0f32; heads * per_head * r];
        for h in 0..heads {
            for c in 0..r {
                for j in 0..nope {
                    kv_b[(h * per_head + j) * r + c] = k_b[(h * r + c) * nope + j];
                }
            }
            let rows = (h * per_head + nope) * r;
            kv_b[rows..rows + v * r].copy_from_slice(&v_b[h * v * r..(h + 1) * v * r]);
        }
        Ok((vec![r, heads * per_head], kv_b))
    }

    fn moe_config(
        &self,
        arch: &str,
        experts: usize,
        num_layers: usize,
        ffn: Option<usize>,
    ) -> Result<MoeConfig> {
        let k = |s: &str| format!("{arch}.{s}");
        let top_k = self.require_u64(&k("expert_used_count"))? as usize;
        ensure!(
            (1..=experts).contains(&top_k),
            "{arch}.expert_used_count {top_k} must lie in 1..={experts} (the experts)"
        );
        // llama.cpp: qwen3moe experts are expert_feed_forward_length wide (else the
        // feed-forward length over the experts used); llama's (Mixtral's) are the
        // feed-forward length.
        let expert_ffn = match (self.get_u64(&k("expert_feed_forward_length")), ffn) {
            (Some(v), _) => v as usize,
            (None, Some(f)) if arch == "qwen3moe" => f / top_k,
            (None, Some(f)) => f,
            (None, None) => bail!("metadata key {arch}.expert_feed_forward_length is missing"),
        };
        if let Some(n) = self.get_u64(&k("expert_shared_count")).filter(|&n| n > 0) {
            bail!("{arch}.expert_shared_count is {n}: shared experts are not supported");
        }
        if let Some(f) = self.get_u64(&k("expert_gating_func")) {
            ensure!(
                f == 1,
                "{arch}.expert_gating_func {f} is not supported (1: softmax)"
            );
        }
        if let Some(s) = self.get_f64(&k("expert_weights_scale")) {
            ensure!(
                s == 0.0 || s == 1.0,
                "{arch}.expert_weights_scale {s} is not supported (routing weights are not scaled)"
            );
        }
        let norm_topk_prob = self
            .get(&k("expert_weights_norm"))
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        let dense_layers = (0..num_layers)
            .filter(|l| {
                !self
                    .tensors
                    .contains_key(&format!("blk.{l}.ffn_gate_inp.weight"))
                    && self
                        .tensors
                        .contains_key(&format!("blk.{l}.ffn_gate.weight"))
            })
            .collect();
        Ok(MoeConfig::softmax(
            experts,
            top_k,
            expert_ffn,
            norm_topk_prob,
            dense_layers,
        ))
    }

    /// Checks that every tensor `cfg` reads is in the file with the shape it implies
    /// (GGML order: `[in, out]`, stacked experts `[in, out, experts]`), so a file that
    /// does not hold the model its metadata describes is refused at load, by tensor name.
    pub fn check_tensors(&self, cfg: &ModelConfig) -> Result<()> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (qd, kvd) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let expect = |name: &str, dims: &[usize], what: &str| -> Result<()> {
            let t = self.tensors.get(name).ok_or_else(|| {
                anyhow!(
                    "tensor {name} is missing from the file ({what} of this {} model)",
                    cfg.architecture
                )
            })?;
            ensure!(
                t.dims == dims,
                "tensor {name}: shape {:?} in the file, expected {dims:?} ({what})",
                t.dims
            );
            Ok(())
        };
        expect(
            "token_embd.weight",
            &[h, cfg.vocab_size],
            "the token embedding: [hidden, vocabulary]",
        )?;
        expect("output_norm.weight", &[h], "the final norm")?;
        if !cfg.tie_word_embeddings {
            expect(
                "output.weight",
                &[h, cfg.vocab_size],
                "the output projection: [hidden, vocabulary]",
            )?;
        }
        for l in 0..cfg.num_layers {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            expect(&n("attn_norm"), &[h], "the attention norm")?;
            if let Some(m) = &cfg.mla {
                self.check_latent_attention(cfg, m, l, &expect)?;
            } else {
                expect(&n("attn_q"), &[h, qd], "q: [hidden, heads × head_dim]")?;
                expect(&n("attn_k"), &[h, kvd], "k: [hidden, kv heads × head_dim]")?;
                expect(&n("attn_v"), &[h, kvd], "v: [hidden, kv heads × head_dim]")?;
                expect(
                    &n("attn_output"),
                    &[qd, h],
                    "the attention output: [heads × head_dim, hidden]",
                )?;
            }
            if cfg.qk_norm {
                expect(&n("attn_q_norm"), &[hd], "the per-head q norm")?;
                expect(&n("attn_k_norm"), &[hd], "the per-head k norm")?;
            }
            expect(&n("ffn_norm"), &[h], "the feed-forward norm")?;
            match cfg.moe_layer(l) {
                None => {
                    let i = cfg.intermediate_size;
                    expect(
                        &n("ffn_gate"),
                        &[h, i],
                        "the gate projection: [hidden, ffn]",
                    )?;
                    expect(&n("ffn_up"), &[h, i], "the up projection: [hidden, ffn]")?;
                    expect(
                        &n("ffn_down"),
                        &[i, h],
                        "the down projection: [ffn, hidden]",
                    )?;
                }
                Some(m) => {
                    let (e, ei) = (m.num_experts, m.expert_intermediate_size);
                    expect(&n("ffn_gate_inp"), &[h, e], "the router: [hidden, experts]")?;
                    if m.correction_bias {
                        let bias = format!("blk.{l}.exp_probs_b.bias");
                        expect(&bias, &[e], "the router's correction bias: [experts]")?;
                    }
                    let si = m.shared_intermediate_size;
                    if si > 0 {
                        expect(
                            &n("ffn_gate_shexp"),
                            &[h, si],
                            "the shared experts' gate: [hidden, ffn]",
                        )?;
                        expect(
                            &n("ffn_up_shexp"),
                            &[h, si],
                            "the shared experts' up: [hidden, ffn]",
                        )?;
                        expect(
                            &n("ffn_down_shexp"),
                            &[si, h],
                            "the shared experts' down: [ffn, hidden]",
                        )?;
                    }
                    for (kind, dims) in [
                        ("ffn_gate_exps", [h, ei]),
                        ("ffn_up_exps", [h, ei]),
                        ("ffn_down_exps", [ei, h]),
                    ] {
                        let stacked = n(kind);
                        if self.tensors.contains_key(&stacked) {
                            expect(
                                &stacked,
                                &[dims[0], dims[1], e],
                                "stacked experts: [in, out, experts]",
                            )?;
                            continue;
                        }
                        for x in 0..e {
                            let apart = legacy_expert_name(l, kind, x);
                            if !self.tensors.contains_key(&apart) {
                                bail!("tensor {stacked} is missing from the file (the experts of layer {l})");
                            }
                            expect(&apart, &dims, "one expert: [in, out]")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// `check_tensors`' check of one tensor: (name, GGML dims, what it is).
type ExpectTensor<'a> = dyn Fn(&str, &[usize], &str) -> Result<()> + 'a;

impl GgufFile {
    /// Layer `l`'s latent-attention tensors (`check_tensors`): q whole or through its
    /// low-rank pair, the latent and rope-key projection, its norm, `kv_b` whole or split
    /// in two, and the output.
    fn check_latent_attention(
        &self,
        cfg: &ModelConfig,
        m: &MlaConfig,
        l: usize,
        expect: &ExpectTensor,
    ) -> Result<()> {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        let (h, heads, r) = (cfg.hidden_size, cfg.num_heads, m.kv_lora_rank);
        let (nope, rope, v) = (m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim);
        let qk = heads * (nope + rope);
        match m.q_lora_rank {
            None => expect(&n("attn_q"), &[h, qk], "q: [hidden, heads × (nope + rope)]")?,
            Some(q) => {
                expect(&n("attn_q_a"), &[h, q], "q's first half: [hidden, q rank]")?;
                expect(&n("attn_q_a_norm"), &[q], "q's latent norm")?;
                expect(
                    &n("attn_q_b"),
                    &[q, qk],
                    "q's second half: [q rank, heads × (nope + rope)]",
                )?;
            }
        }
        expect(
            &n("attn_kv_a_mqa"),
            &[h, r + rope],
            "the latent and rope key: [hidden, latent + rope]",
        )?;
        expect(&n("attn_kv_a_norm"), &[r], "the latent norm")?;
        if self.tensors.contains_key(&n("attn_kv_b")) {
            expect(
                &n("attn_kv_b"),
                &[r, heads * (nope + v)],
                "kv_b: [latent, heads × (nope + v)]",
            )?;
        } else {
            expect(
                &n("attn_k_b"),
                &[nope, r, heads],
                "k_b: [nope, latent, heads]",
            )?;
            expect(&n("attn_v_b"), &[r, v, heads], "v_b: [latent, v, heads]")?;
        }
        expect(
            &n("attn_output"),
            &[heads * v, h],
            "the attention output: [heads × v, hidden]",
        )
    }
}

/// The stacked expert kinds: llama.cpp's stacked name and the name of one expert apart in
/// files from before experts were stacked.
const EXPERT_KINDS: [(&str, &str); 3] = [
    ("ffn_gate_exps", "ffn_gate"),
    ("ffn_up_exps", "ffn_up"),
    ("ffn_down_exps", "ffn_down"),
];

/// (layer, stacked kind, expert) of a canonical expert name `blk.N.ffn_gate_exps.E.weight`.
fn expert_name(name: &str) -> Option<(usize, &'static str, usize)> {
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
    let (layer, rest) = rest.split_once('.')?;
    let (kind, e) = rest.split_once('.')?;
    let kind = EXPERT_KINDS.iter().find(|(k, _)| *k == kind)?.0;
    Some((layer.parse().ok()?, kind, e.parse().ok()?))
}

fn stacked_name(layer: usize, kind: &str) -> String {
    format!("blk.{layer}.{kind}.weight")
}

fn legacy_expert_name(layer: usize, kind: &str, e: usize) -> String {
    let apart = EXPERT_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(kind, |(_, a)| a);
    format!("blk.{layer}.{apart}.{e}.weight")
}
