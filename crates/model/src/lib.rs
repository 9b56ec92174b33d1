//! Models: configs, weight loading (GGUF, safetensors, dummy), tokenizers, chat
//! templates, and the Llama-family forward pass written against the backend trait.

pub mod byte_level;
pub mod catalog;
pub mod chat;
pub mod config;
pub mod export;
pub mod ggml_type;
pub mod gguf;
pub mod hub;
pub mod llama;
pub mod quant;
pub mod runner;
pub mod shard;
pub mod tokenizer;
pub mod weight_slice;
pub mod weights;

pub use catalog::{cli_system_default, ModelSampling, SamplingSource};
pub use chat::{ChatMessage, ChatTemplate};
pub use config::{
    GenerationDefaults, MlaConfig, ModelConfig, MoeConfig, MoeScoringFunc, RopeScaling,
};
pub use runner::{
    greedy_continuation, KvPoolSize, Logits, ModelRunner, SeqInput, ShardRunner, StepInput,
};
pub use tokenizer::{IncrementalDecoder, Tokenizer};
pub use wring_backend::cpu::{CpuWeights, PrefillAttention};

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use weights::{SafetensorsSet, WeightSource};
use wring_backend::Backend;

pub const DEFAULT_MODEL_NAME: &str = "SmolLM2-135M-Instruct";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadFormat {
    #[default]
    Auto,
    Gguf,
    Safetensors,
    Dummy,
}

impl FromStr for LoadFormat {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Self::Auto,
            "gguf" => Self::Gguf,
            "safetensors" => Self::Safetensors,
            "dummy" => Self::Dummy,
            _ => bail!("unknown load format {s:?} (auto, gguf, safetensors, dummy)"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(usize),
}

impl FromStr for Device {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(n)) => Ok(Self::Cuda(n)),
                _ => bail!("unknown device {s:?} (cpu, cuda, cuda:N)"),
            },
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// What to load: `model` is a `.gguf` file, a Hugging Face directory, an `ORG/NAME`
/// hub id, or None for the default model.
#[derive(Debug, Clone, Default)]
pub struct ModelSpec {
    pub model: Option<String>,
    pub load_format: LoadFormat,
    pub model_shape: Option<String>,
}

#[derive(Debug, Clone)]
pub struct RunnerOptions {
    pub device: Device,
    pub kv_cache_bytes: usize,
    pub block_size: usize,
    pub max_num_seqs: usize,
    pub max_model_len: usize,
    /// Weight storage of the CPU backend (f32 reference, 8- or 4-bit, or the checkpoint's own).
    pub cpu_weights: CpuWeights,
    /// Attention precision of prompt rows on the CPU (bf16 AMX tiles only where the CPU has
    /// them); decode and verify rows always run f32.
    pub cpu_prefill_attention: PrefillAttention,
    /// Ranks the model is split over (tensor parallelism, [`shard`]); 1: one device.
    /// `kv_cache_bytes` is then each rank's budget for its own KV heads.
    pub tensor_parallel_size: usize,
    /// On a GPU: the KV cache takes the memory left under this fraction of the device's
    /// total once the weights and a step's needs are counted (vLLM's
    /// `--gpu-memory-utilization`), and `kv_cache_bytes` is ignored. None: `kv_cache_bytes`.
    pub gpu_memory_utilization: Option<f32>,
    /// Most tokens one step carries (the engine's `max_num_batched_tokens`): a GPU sizes
    /// its activations for it.
    pub max_step_tokens: usize,
    /// On a GPU, the weight format dense weights are quantised to at load, by name (bf16,
    /// fp8, int4, nvfp4: `--gpu-weights`). None: the backend's own setting.
    pub gpu_weights: Option<String>,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            kv_cache_bytes: 2 << 30,
            block_size: 16,
            max_num_seqs: 64,
            max_model_len: 8192,
            cpu_weights: CpuWeights::F32,
            cpu_prefill_attention: PrefillAttention::F32,
            tensor_parallel_size: 1,
            gpu_memory_utilization: None,
            max_step_tokens: 8192,
            gpu_weights: None,
        }
    }
}

pub struct LoadedModel {
    pub name: String,
    pub config: ModelConfig,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    pub eos_token_ids: Vec<u32>,
    weights: WeightSource,
}

impl LoadedModel {
    /// What `CpuWeights::Auto` becomes for this checkpoint (its own precision).
    pub fn native_cpu_weights(&self) -> CpuWeights {
        self.weights.native_cpu_weights()
    }

    pub fn max_context(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// Bytes one KV block takes on the given device.
    pub fn kv_block_bytes(&self, device: Device, block_size: usize) -> usize {
        let elem = if device == Device::Cpu { 4 } else { 2 };
        wring_backend::KvSpec::bytes_per_block(
            self.config.num_layers,
            block_size,
            self.config.num_kv_heads,
            self.config.head_dim,
            elem,
        )
    }

    /// The KV pool `opts` asks for: the blocks of its byte budget, or (on a GPU with
    /// `gpu_memory_utilization`) what the device holds once the weights are on it, either
    /// way at least one sequence of `max_model_len` tokens.
    pub fn kv_pool_size(&self, opts: &RunnerOptions) -> Result<KvPoolSize> {
        match (opts.device, opts.gpu_memory_utilization) {
            (Device::Cuda(_), Some(utilization)) => Ok(KvPoolSize::DeviceShare {
                utilization,
                min_blocks: self.min_kv_blocks(opts),
            }),
            _ => self.kv_blocks(opts).map(KvPoolSize::Blocks),
        }
    }

    /// Blocks one sequence of `max_model_len` tokens (capped by the model's context) needs.
    fn min_kv_blocks(&self, opts: &RunnerOptions) -> usize {
        opts.max_model_len
            .min(self.max_context())
            .div_ceil(opts.block_size)
    }

    /// KV blocks the memory budget holds on `opts.device` (on each rank, whose pool holds
    /// only its KV heads, when the model is split); an error when that is fewer than one
    /// sequence of `max_model_len` tokens needs.
    pub fn kv_blocks(&self, opts: &RunnerOptions) -> Result<usize> {
        let block_bytes = match opts.tensor_parallel_size {
            0 | 1 => self.kv_block_bytes(opts.device, opts.block_size),
            n => {
                let heads = shard::max_kv_heads_per_rank(&self.config, n)?;
                self.kv_block_bytes(opts.device, opts.block_size) / self.config.num_kv_heads * heads
            }
        };
        let num_blocks = opts.kv_cache_bytes / block_bytes;
        let min_blocks = self.min_kv_blocks(opts);
        if num_blocks < min_blocks {
            bail!(
                "a KV cache of {} MiB holds {num_blocks} blocks of {} tokens, fewer than one sequence of {} tokens needs ({min_blocks}); raise --kv-cache-memory (or --kv-cache-mib) or lower --max-model-len",
                opts.kv_cache_bytes >> 20,
                opts.block_size,
                opts.max_model_len
            );
        }
        Ok(num_blocks)
    }

    /// Uploads the weights to `backend` and sizes its KV pool from the memory budget.
    /// Any device: `wring-runtime` opens the backend, this builds the runner on it.
    pub fn runner_on<B: Backend + 'static>(
        self,
        backend: B,
        opts: &RunnerOptions,
    ) -> Result<Box<dyn ModelRunner>> {
        let kv = self.kv_pool_size(opts)?;
        let shard = shard::RankShard::whole(&self.config);
        Ok(Box::new(llama::LlamaRunner::new_shard(
            backend,
            self.config,
            &self.weights,
            shard,
            kv,
            opts.block_size,
        )?))
    }

    /// The runner on the CPU backend. GPUs are opened by `wring_runtime::open_runner`
    /// (this crate never links a GPU backend).
    pub fn into_runner(self, opts: &RunnerOptions) -> Result<Box<dyn ModelRunner>> {
        if let Device::Cuda(_) = opts.device {
            bail!("wring_model::LoadedModel::into_runner runs on the CPU only; open CUDA devices with wring_runtime::open_runner");
        }
        if opts.tensor_parallel_size > 1 {
            bail!("wring_model::LoadedModel::into_runner runs one rank; split a model with wring_runtime::open_runner");
        }
        let weights = self.cpu_weights(opts.cpu_weights);
        let backend = wring_backend::cpu::CpuBackend::new(weights)
            .with_prefill_attention(opts.cpu_prefill_attention);
        self.runner_on(backend, opts)
    }

    /// The CPU weight format `asked` resolves to for this checkpoint (`Auto`: its own).
    pub fn cpu_weights(&self, asked: CpuWeights) -> CpuWeights {
        match asked {
            CpuWeights::Auto => {
                let w = self.weights.native_cpu_weights();
                tracing::info!(
                    "CPU weights: {} (the checkpoint's own precision; --cpu-weights f32 for the float32 reference)",
                    format!("{w:?}").to_lowercase()
                );
                w
            }
            w => w,
        }
    }

    /// The configuration and weights, for tensor-parallel ranks that load their shards
    /// from them in parallel (share it in an `Arc`).
    pub fn into_weights(self) -> ModelWeights {
        ModelWeights {
            config: self.config,
            weights: self.weights,
        }
    }
}

/// A model's configuration and weight source, shared by the ranks of a split model.
pub struct ModelWeights {
    pub config: ModelConfig,
    weights: WeightSource,
}

impl ModelWeights {
    pub fn new(config: ModelConfig, weights: WeightSource) -> Self {
        Self { config, weights }
    }

    /// Rank `shard.rank`'s runner on `backend`: its shard of every weight, a KV pool of
    /// `num_blocks` blocks for its KV heads.
    pub fn rank_runner<B: Backend>(
        &self,
        backend: B,
        shard: shard::RankShard,
        num_blocks: impl Into<KvPoolSize>,
        block_size: usize,
    ) -> Result<llama::LlamaRunner<B>> {
        llama::LlamaRunner::new_shard(
            backend,
            self.config.clone(),
            &self.weights,
            shard,
            num_blocks.into(),
            block_size,
        )
    }
}

/// Resolves and loads a model (weights stay mapped until [`LoadedModel::into_runner`]).
pub fn load_model(spec: &ModelSpec) -> Result<LoadedModel> {
    if spec.load_format == LoadFormat::Dummy {
        return load_dummy(spec);
    }
    let path = resolve_model_path(spec.model.as_deref())?;
    let is_gguf = path.is_file();
    match (spec.load_format, is_gguf) {
        (LoadFormat::Safetensors, true) => bail!(
            "{} is a file; --load-format safetensors needs a model directory",
            path.display()
        ),
        (LoadFormat::Gguf, false) => bail!(
            "{} is a directory; --load-format gguf needs a .gguf file",
            path.display()
        ),
        _ => {}
    }
    if is_gguf {
        load_gguf(&path)
    } else {
        load_hf_dir(&path)
    }
}

/// A file wring keeps about a model beside it: `<model file>.<name>` beside a file (a GGUF),
/// `<dir>/<name>` inside a model directory (gate verdicts, step timings).
pub fn beside_model(model: &Path, name: &str) -> PathBuf {
    if model.is_dir() {
        return model.join(name);
    }
    let mut file = model.file_name().unwrap_or_default().to_os_string();
    file.push(".");
    file.push(name);
    model.with_file_name(file)
}

/// The file or directory a `--model` value names (None: the default model, fetched if needed).
pub fn resolve_model_path(model: Option<&str>) -> Result<PathBuf> {
    let Some(m) = model else {
        return hub::ensure_default_model(false);
    };
    let p = Path::new(m);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    if m.eq_ignore_ascii_case(DEFAULT_MODEL_NAME)
        || m.eq_ignore_ascii_case("HuggingFaceTB/SmolLM2-135M-Instruct")
        || m == "default"
    {
        return hub::ensure_default_model(false);
    }
    if m.ends_with(".gguf") || m.starts_with('/') || m.starts_with('.') {
        bail!("model file {m} does not exist");
    }
    if m.split('/').count() == 2 {
        return hub::hub_snapshot(m).with_context(|| format!("cannot get model {m}"));
    }
    bail!("unknown model {m:?}: not a .gguf file, not a model directory, and not a Hugging Face ORG/NAME id")
}

/// A GGUF file as llama.cpp writes it: configuration from its metadata
/// ([`gguf::GgufFile::model_config`]), every tensor checked against it, the tokenizer and
/// chat template from its `tokenizer.*` keys. A file without tensors (vocab-only, what
/// dummy weights borrow a tokenizer from) is not checked.
fn load_gguf(path: &Path) -> Result<LoadedModel> {
    let g = gguf::GgufFile::open(path)?;
    let config = g
        .model_config()
        .with_context(|| format!("{}", path.display()))?;
    let tokenizer = Arc::new(
        Tokenizer::from_gguf(&g).with_context(|| format!("{}: tokenizer", path.display()))?,
    );
    if !g.tensors.is_empty() {
        g.check_tensors(&config)
            .with_context(|| format!("{}", path.display()))?;
    }
    let tok_str = |key: &str| {
        g.get_u64(key)
            .and_then(|id| tokenizer.id_to_token(id as u32))
            .unwrap_or_default()
    };
    let (bos, eos) = (
        tok_str("tokenizer.ggml.bos_token_id"),
        tok_str("tokenizer.ggml.eos_token_id"),
    );
    let chat_template = match g.get_str("tokenizer.chat_template") {
        Some(src) => Some(Arc::new(ChatTemplate::new(src, &bos, &eos)?)),
        None => None,
    };
    let mut eos_ids: Vec<u32> = g
        .get_u64("tokenizer.ggml.eos_token_id")
        .map(|v| v as u32)
        .into_iter()
        .collect();
    if let Some(id) = g.get_u64("tokenizer.ggml.eot_token_id") {
        eos_ids.push(id as u32);
    }
    add_template_end_tokens(
        &mut eos_ids,
        g.get_str("tokenizer.chat_template"),
        &tokenizer,
    );
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let name = name.split('.').next().unwrap_or(&name).to_string();
    Ok(LoadedModel {
        name,
        config,
        tokenizer,
        chat_template,
        eos_token_ids: eos_ids,
        weights: WeightSource::Gguf(g),
    })
}

/// Turn-end tokens a chat template emits (e.g. `<|im_end|>`) also stop generation.
fn add_template_end_tokens(eos: &mut Vec<u32>, template: Option<&str>, tok: &Tokenizer) {
    for end in [
        "<|im_end|>",
        "<|eot_id|>",
        "<|end_of_text|>",
        "<|endoftext|>",
        "<｜end▁of▁sentence｜>",
    ] {
        if template.is_some_and(|t| t.contains(end)) {
            if let Some(id) = tok.token_to_id(end) {
                eos.push(id);
            }
        }
    }
    eos.sort_unstable();
    eos.dedup();
}

fn load_hf_dir(dir: &Path) -> Result<LoadedModel> {
    let cfg_json = tokenizer::read_json(&dir.join("config.json"))
        .with_context(|| format!("{} is not a Hugging Face model directory", dir.display()))?;
    let config = hf_config(&cfg_json).with_context(|| format!("{}/config.json", dir.display()))?;
    let tok_cfg = tokenizer::read_json(&dir.join("tokenizer_config.json")).ok();
    let tokenizer = Arc::new(Tokenizer::from_file(
        &dir.join("tokenizer.json"),
        tok_cfg.as_ref(),
    )?);
    let tok_field = |k: &str| {
        tok_cfg
            .as_ref()
            .and_then(|c| tokenizer::token_string(c.get(k)?))
            .unwrap_or_default()
    };
    let template_src = tok_cfg
        .as_ref()
        .and_then(|c| match c.get("chat_template")? {
            Value::String(s) => Some(s.clone()),
            // A list of named templates: take "default".
            Value::Array(a) => a
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str().map(str::to_string)),
            _ => None,
        })
        // Newer `transformers` save it beside the config, as `chat_template.jinja`.
        .or_else(|| std::fs::read_to_string(dir.join("chat_template.jinja")).ok());
    let chat_template = match &template_src {
        Some(src) => Some(Arc::new(ChatTemplate::new(
            src,
            &tok_field("bos_token"),
            &tok_field("eos_token"),
        )?)),
        None => None,
    };
    let mut eos_ids = vec![];
    if let Ok(gen) = tokenizer::read_json(&dir.join("generation_config.json")) {
        match &gen["eos_token_id"] {
            Value::Number(n) => eos_ids.extend(n.as_u64().map(|v| v as u32)),
            Value::Array(a) => {
                eos_ids.extend(a.iter().filter_map(|v| v.as_u64().map(|v| v as u32)))
            }
            _ => {}
        }
    }
    if let Some(id) = tokenizer.token_to_id(&tok_field("eos_token")) {
        eos_ids.push(id);
    }
    add_template_end_tokens(&mut eos_ids, template_src.as_deref(), &tokenizer);
    let weights = WeightSource::Safetensors(SafetensorsSet::open(dir)?);
    let name = cfg_json
        .get("_name_or_path")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(|s| s.rsplit('/').next().unwrap_or(s).to_string());
    let name = name.unwrap_or_else(|| {
        dir.file_name()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default()
    });
    let name = name
        .replace("--", "/")
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    Ok(LoadedModel {
        name,
        config,
        tokenizer,
        chat_template,
        eos_token_ids: eos_ids,
        weights,
    })
}

/// The Hugging Face `model_type`s wring runs (what a refusal lists).
pub const SUPPORTED_MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "deepseek_v3",
];

/// Parses a Hugging Face `config.json` of the Llama family: Llama, Mistral, Qwen2,
/// Qwen3 (q/k norms), the mixture-of-experts Qwen3-MoE and Mixtral, and DeepSeek-V3/R1
/// (latent attention, experts with sigmoid group-limited routing and shared experts).
pub fn hf_config(c: &Value) -> Result<ModelConfig> {
    let get = |k: &str| {
        c.get(k)
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
            .ok_or_else(|| anyhow!("field {k} is missing or not an integer"))
    };
    let flag = |k: &str| c.get(k).and_then(|v| v.as_bool());
    let model_type = c
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("llama");
    let arch = match model_type {
        "llama" | "mistral" => "llama",
        "qwen2" | "qwen3" | "qwen3_moe" | "mixtral" | "deepseek_v3" => model_type,
        other => bail!(
            "model_type {other:?} is not supported (supported: {})",
            SUPPORTED_MODEL_TYPES.join(", ")
        ),
    };
    let hidden = get("hidden_size")?;
    let heads = get("num_attention_heads")?;
    let num_layers = get("num_hidden_layers")?;
    let mut max_pos = get("max_position_embeddings").unwrap_or(4096);
    // Sliding-window attention is exact as long as no sequence exceeds the window: the
    // context is capped to it. Mistral and Mixtral window every layer when they name a
    // window; Qwen only with `use_sliding_window`.
    let window = match model_type {
        "mistral" | "mixtral" => true,
        "qwen2" | "qwen3" | "qwen3_moe" => flag("use_sliding_window") == Some(true),
        _ => false,
    };
    if window {
        if let Some(w) = c.get("sliding_window").and_then(|v| v.as_u64()) {
            max_pos = max_pos.min(w as usize);
        }
    }
    if let Some(act) = c.get("hidden_act").and_then(|v| v.as_str()) {
        ensure!(
            act == "silu",
            "hidden_act {act:?} is not supported (the feed-forward is SwiGLU: silu)"
        );
    }
    let moe = match model_type {
        "mixtral" => Some(MoeConfig::softmax(
            get("num_local_experts")?,
            get("num_experts_per_tok")?,
            get("intermediate_size")?,
            true,
            Vec::new(),
        )),
        "deepseek_v3" => deepseek_moe(c, num_layers)?,
        "qwen3_moe" => {
            let step = get("decoder_sparse_step").unwrap_or(1);
            let only: Vec<usize> = match c.get("mlp_only_layers") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_u64().map(|v| v as usize))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        anyhow!("mlp_only_layers holds a value that is not a layer index")
                    })?,
                Some(v) => bail!("mlp_only_layers is {v}, not a list of layer indices"),
            };
            // `num_local_experts` is where newer `transformers` write it.
            let experts = get("num_experts").or_else(|_| get("num_local_experts"))?;
            // Hugging Face's Qwen3-MoE decoder layer: sparse when the layer is not in
            // mlp_only_layers, there are experts, and (layer + 1) % decoder_sparse_step == 0.
            let dense_layers = (0..num_layers)
                .filter(|l| only.contains(l) || experts == 0 || step == 0 || (l + 1) % step != 0)
                .collect();
            ensure!(
                c.get("shared_expert_intermediate_size").is_none(),
                "shared experts are not supported (qwen3_moe models have none)"
            );
            Some(MoeConfig::softmax(
                experts,
                get("num_experts_per_tok")?,
                get("moe_intermediate_size")?,
                flag("norm_topk_prob").unwrap_or(false),
                dense_layers,
            ))
        }
        _ => None,
    };
    if let Some(m) = &moe {
        ensure!(
            m.top_k >= 1 && m.top_k <= m.num_experts,
            "num_experts_per_tok {} must lie in 1..={} (the experts)",
            m.top_k,
            m.num_experts
        );
    }
    // `rope_parameters` is where newer `transformers` write rope_theta and the scaling.
    let rope_parameters = c.get("rope_parameters").filter(|v| v.is_object());
    let rope_scaling = match c
        .get("rope_scaling")
        .filter(|v| !v.is_null())
        .or(rope_parameters)
    {
        None => RopeScaling::None,
        Some(rs) => {
            let ty = rs
                .get("rope_type")
                .or_else(|| rs.get("type"))
                .and_then(|v| v.as_str())
                .unwrap_or("");
            let f = |k: &str, d: f64| rs.get(k).and_then(|v| v.as_f64()).unwrap_or(d) as f32;
            match ty {
                "llama3" => RopeScaling::Llama3 {
                    factor: f("factor", 8.0),
                    low_freq_factor: f("low_freq_factor", 1.0),
                    high_freq_factor: f("high_freq_factor", 4.0),
                    original_max_position_embeddings: rs
                        .get("original_max_position_embeddings")
                        .and_then(|v| v.as_u64())
                        .unwrap_or(8192)
                        as usize,
                },
                "linear" => RopeScaling::Linear {
                    factor: f("factor", 1.0),
                },
                // YaRN scales the rotated values too (`attention_factor`), which only the
                // latent attention applies so far.
                "yarn" if model_type == "deepseek_v3" => {
                    let original = rs
                        .get("original_max_position_embeddings")
                        .and_then(|v| v.as_u64())
                        .ok_or_else(|| {
                            anyhow!("rope_scaling (yarn): original_max_position_embeddings is missing")
                        })? as usize;
                    let opt = |k: &str| rs.get(k).and_then(|v| v.as_f64()).map(|v| v as f32);
                    RopeScaling::Yarn {
                        factor: opt("factor")
                            .unwrap_or(get("max_position_embeddings")? as f32 / original as f32),
                        original_max_position_embeddings: original,
                        beta_fast: opt("beta_fast").filter(|&b| b != 0.0).unwrap_or(32.0),
                        beta_slow: opt("beta_slow").filter(|&b| b != 0.0).unwrap_or(1.0),
                        mscale: opt("mscale").unwrap_or(0.0),
                        mscale_all_dim: opt("mscale_all_dim").unwrap_or(0.0),
                        attention_factor: opt("attention_factor"),
                        truncate: rs.get("truncate").and_then(|v| v.as_bool()).unwrap_or(true),
                    }
                }
                "default" | "" => RopeScaling::None,
                other => bail!(
                    "rope_scaling type {other:?} is not supported (llama3, linear; yarn for deepseek_v3)"
                ),
            }
        }
    };
    let rope_theta = c
        .get("rope_theta")
        .or_else(|| rope_parameters.and_then(|r| r.get("rope_theta")))
        .and_then(|v| v.as_f64())
        .unwrap_or(10000.0) as f32;
    let mla = match model_type {
        "deepseek_v3" => Some(deepseek_mla(c)?),
        _ => None,
    };
    let head_dim = match &mla {
        // The cache holds materialised heads (`ModelConfig::mla`); `head_dim` in a
        // DeepSeek config.json is the rope part.
        Some(m) => m.cache_head_dim(),
        None => c
            .get("head_dim")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
            .unwrap_or(hidden / heads),
    };
    Ok(ModelConfig {
        architecture: arch.into(),
        hidden_size: hidden,
        intermediate_size: get("intermediate_size")?,
        num_layers,
        num_heads: heads,
        num_kv_heads: if mla.is_some() {
            heads
        } else {
            get("num_key_value_heads").unwrap_or(heads)
        },
        head_dim,
        vocab_size: get("vocab_size")?,
        max_position_embeddings: max_pos,
        rms_norm_eps: c
            .get("rms_norm_eps")
            .and_then(|v| v.as_f64())
            .unwrap_or(1e-5) as f32,
        rope_theta,
        rope_scaling,
        // DeepSeek rotates adjacent pairs of the rope dimensions unless its config says
        // `rope_interleave: false` (transformers' default is true).
        rope_interleaved: mla.is_some() && flag("rope_interleave").unwrap_or(true),
        tie_word_embeddings: flag("tie_word_embeddings").unwrap_or(false),
        attention_bias: flag("attention_bias").unwrap_or(arch == "qwen2"),
        qk_norm: matches!(arch, "qwen3" | "qwen3_moe"),
        moe,
        mla,
    })
}

/// DeepSeek-V3's latent attention dimensions.
fn deepseek_mla(c: &Value) -> Result<MlaConfig> {
    let get = |k: &str| {
        c.get(k)
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
            .ok_or_else(|| anyhow!("field {k} is missing or not an integer"))
    };
    let q_lora_rank = match c.get("q_lora_rank") {
        None | Some(Value::Null) => None,
        Some(_) => Some(get("q_lora_rank")?),
    };
    ensure!(
        c.get("attention_bias").and_then(|v| v.as_bool()) != Some(true),
        "deepseek_v3 with attention_bias is not supported (DeepSeek-V3 has no attention biases)"
    );
    let m = MlaConfig {
        q_lora_rank,
        kv_lora_rank: get("kv_lora_rank")?,
        qk_nope_head_dim: get("qk_nope_head_dim")?,
        qk_rope_head_dim: get("qk_rope_head_dim")?,
        v_head_dim: get("v_head_dim")?,
    };
    ensure!(
        m.qk_rope_head_dim.is_multiple_of(2) && m.qk_rope_head_dim > 0,
        "qk_rope_head_dim {} must be even and positive",
        m.qk_rope_head_dim
    );
    Ok(m)
}

/// DeepSeek-V3's experts: `n_routed_experts` from layer `first_k_dense_replace` on (every
/// `moe_layer_freq`-th), sigmoid scores with `e_score_correction_bias` (`scoring_func`
/// sigmoid, `topk_method` noaux_tc: the only ones `transformers` runs), `n_group` groups of
/// which `topk_group` are eligible, `routed_scaling_factor`, and `n_shared_experts` shared
/// experts of `moe_intermediate_size` each; a field the config leaves out takes
/// `transformers`' default (DeepSeek-V3's value). None when it has no routed experts.
fn deepseek_moe(c: &Value, num_layers: usize) -> Result<Option<MoeConfig>> {
    let get = |k: &str| {
        c.get(k)
            .and_then(|v| v.as_u64())
            .map(|v| v as usize)
            .ok_or_else(|| anyhow!("field {k} is missing or not an integer"))
    };
    let opt = |k: &str, d: usize| match c.get(k) {
        None | Some(Value::Null) => Ok(d),
        Some(_) => get(k),
    };
    let experts = match c
        .get("n_routed_experts")
        .or_else(|| c.get("num_local_experts"))
    {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| anyhow!("n_routed_experts is {v}, not an integer"))?
            as usize,
    };
    if let Some(f) = c.get("scoring_func").and_then(|v| v.as_str()) {
        ensure!(
            f == "sigmoid",
            "scoring_func {f:?} is not supported for deepseek_v3 (sigmoid)"
        );
    }
    if let Some(t) = c.get("topk_method").and_then(|v| v.as_str()) {
        ensure!(
            t == "noaux_tc",
            "topk_method {t:?} is not supported for deepseek_v3 (noaux_tc)"
        );
    }
    let first_dense = opt("first_k_dense_replace", 3)?;
    let freq = opt("moe_layer_freq", 1)?.max(1);
    // DeepSeek's decoder layer: experts when layer ≥ first_k_dense_replace and
    // layer % moe_layer_freq == 0.
    let dense_layers = (0..num_layers)
        .filter(|&l| experts == 0 || l < first_dense || l % freq != 0)
        .collect();
    let inter = get("moe_intermediate_size")?;
    let groups = opt("n_group", 8)?.max(1);
    let top_groups = opt("topk_group", 4)?;
    let top_k = get("num_experts_per_tok")?;
    ensure!(
        experts.is_multiple_of(groups) && experts / groups >= 2,
        "n_routed_experts {experts} must form n_group {groups} groups of at least 2 experts"
    );
    ensure!(
        (1..=groups).contains(&top_groups) && top_groups * (experts / groups) >= top_k,
        "topk_group {top_groups} of {groups} groups of {} experts cannot hold num_experts_per_tok {top_k}",
        experts / groups
    );
    Ok(Some(MoeConfig {
        scoring: MoeScoringFunc::Sigmoid,
        correction_bias: true,
        groups,
        top_groups,
        routed_scaling_factor: c
            .get("routed_scaling_factor")
            .and_then(|v| v.as_f64())
            .unwrap_or(2.5) as f32,
        shared_intermediate_size: opt("n_shared_experts", 1)? * inter,
        ..MoeConfig::softmax(
            experts,
            top_k,
            inter,
            c.get("norm_topk_prob")
                .and_then(|v| v.as_bool())
                .unwrap_or(true),
            dense_layers,
        )
    }))
}

/// Real shapes with deterministic random weights; the tokenizer and chat template of
/// `spec.model` (default: the default model) stand in (outputs are meaningless; only
/// speed is).
fn load_dummy(spec: &ModelSpec) -> Result<LoadedModel> {
    let shape = spec.model_shape.as_deref().ok_or_else(|| {
        anyhow!(
            "--load-format dummy needs --model-shape (one of: {})",
            ModelConfig::NAMED_SHAPES.join(", ")
        )
    })?;
    let config = ModelConfig::shape_spec(shape)?;
    // The tokenizer and chat template: --model's when given (a small vocab-only GGUF
    // will do, where the default model cannot be fetched), else the default model's.
    let base = match &spec.model {
        Some(m) => {
            let path = resolve_model_path(Some(m))?;
            if path.is_file() {
                load_gguf(&path)
            } else {
                load_hf_dir(&path)
            }
        }
        None => load_gguf(&hub::ensure_default_model(false)?),
    }
    .context("the tokenizer of dummy weights")?;
    Ok(LoadedModel {
        name: format!("dummy-{shape}"),
        config,
        tokenizer: base.tokenizer,
        chat_template: base.chat_template,
        eos_token_ids: base.eos_token_ids,
        weights: WeightSource::Dummy { seed: 0 },
    })
}
