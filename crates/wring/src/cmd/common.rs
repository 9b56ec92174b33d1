//! Flags shared by `generate`, `chat` and `serve`: which model, how the engine
//! runs (batching limits, speculative decoding), and sampling for the CLI
//! commands; plus `start_engine`, which turns them into a running engine.

use anyhow::Context;
use wring_engine::{
    Engine, EngineConfig, EngineHandle, EngineInfo, KPolicy, ProposerKind, SamplingParams,
    SpecConfig, SuffixParams,
};
use wring_model::{Device, LoadFormat, ModelSpec, RunnerOptions};

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Model")]
pub struct ModelArgs {
    /// A .gguf file, a Hugging Face model directory, or ORG/NAME on the Hub.
    /// Default: SmolLM2-135M-Instruct Q4_1 (fetched on first use). With --load-format
    /// dummy: where the tokenizer and chat template come from (a vocab-only GGUF will do).
    #[arg(long, env = "WRING_MODEL")]
    pub model: Option<String>,
    /// auto | gguf | safetensors | dummy (random weights of a named shape).
    #[arg(long, default_value = "auto")]
    pub load_format: String,
    /// Shape for --load-format dummy, e.g. smollm2-135m, llama-3.1-8b.
    #[arg(long)]
    pub model_shape: Option<String>,
    /// cpu | cuda | cuda:N
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Split the model over this many GPUs (tensor parallelism: cuda:N..N+size-1, NCCL
    /// all-reduces, one scheduler for all). On the CPU it runs the same split on threads:
    /// a correctness reference, not a speed-up. Alias: --tp.
    #[arg(long, visible_alias = "tp", default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub tensor_parallel_size: usize,
    /// Memory for the KV cache, in MiB.
    #[arg(long, default_value_t = 2048)]
    pub kv_cache_mib: usize,
    /// Memory for the KV cache as a size (vLLM's flag): bytes, or with a unit (512MiB, 2GiB, 1.5GB);
    /// overrides --kv-cache-mib.
    #[arg(long, value_parser = parse_byte_size, conflicts_with = "kv_cache_mib")]
    pub kv_cache_memory: Option<usize>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// CPU weight format: auto (the checkpoint's own precision: q4 for a 4-bit GGUF such as the
    /// default model, whose Q4_1 values it holds exactly; q8 for 6-/8-bit GGUFs; f32 otherwise),
    /// f32 (the float32 reference the golden outputs were made with), q8 (8-bit blocks, ~4x less
    /// memory traffic than f32) or q4 (4-bit blocks with scale and minimum, Q4_1's shape; the
    /// embedding/lm head stay q8). q8 and q4 quantise each activation row to 8 bits, as llama.cpp does.
    #[arg(long, default_value = "auto")]
    pub cpu_weights: wring_model::CpuWeights,
    /// CUDA weight format, quantised at load by round-to-nearest (the embedding and a separate
    /// lm head stay bf16): bf16, fp8 (W8A8 through cuBLASLt), int4 (W4A16, group 128) or nvfp4
    /// (weight-only on Hopper: no FP4 tensor cores before Blackwell). Sets WRING_CUDA_WEIGHTS.
    /// Saves memory (int4 2.7x less than bf16), not time: on the H200 every scheme is slower
    /// than bf16 (BENCHMARKS run 9). A `wring quantize` checkpoint runs dequantised to bf16
    /// unless WRING_CUDA_QUANT_KERNELS=on.
    #[arg(long, value_parser = ["bf16", "fp8", "int4", "nvfp4"])]
    pub gpu_weights: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 32)]
    pub max_num_seqs: usize,
    /// Token budget of one step (prefill chunks + decode/verify tokens).
    #[arg(long, default_value_t = 2048)]
    pub max_num_batched_tokens: usize,
    /// Context length limit (prompt + output); 0 = the model's own.
    #[arg(long, default_value_t = 0)]
    pub max_model_len: usize,
    /// Most requests waiting for a slot; more are refused (HTTP 429).
    #[arg(long, default_value_t = 1024)]
    pub max_waiting: usize,
    /// Turn off automatic prefix caching of KV blocks.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Write each completed request's prompt and output token ids to this JSONL file (the trace
    /// format `wring drafter-eval --trace` replays; `corpus` is the request's workload tag).
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub spec: SpecArgs,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Speculative decoding")]
pub struct SpecArgs {
    /// Drafter: none | suffix (suffix trees over the request and past outputs) |
    /// ngram (prompt lookup).
    #[arg(long, default_value = "none")]
    pub speculative: String,
    /// How K (draft tokens per verify step) is chosen: fixed:K | profile:FILE |
    /// dynamic | adaptive.
    #[arg(long, default_value = "fixed:8")]
    pub k_policy: String,
    /// Variable-length drafts instead of padding every sequence to 1 + K tokens.
    #[arg(long)]
    pub no_pad: bool,
    /// Longest context the suffix trees index and match.
    #[arg(long, default_value_t = 24)]
    pub suffix_max_depth: usize,
    /// Draft length cap = match length × this.
    #[arg(long, default_value_t = 1.0)]
    pub suffix_max_spec_factor: f32,
    /// Stop a draft when its estimated probability falls below this.
    #[arg(long, default_value_t = 0.1)]
    pub suffix_min_token_prob: f32,
    /// Token budget of the global suffix tree (oldest outputs evicted first).
    #[arg(long)]
    pub suffix_cache_tokens: Option<usize>,
}

/// Both groups, for commands that start an engine.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: u32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Same seed, same output.
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// 1 = off.
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    /// Stop when this text appears (repeatable); the text itself is not printed.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Keep going past the end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            ..SamplingParams::default()
        }
    }
}

impl SpecArgs {
    pub fn to_config(&self) -> anyhow::Result<SpecConfig> {
        Ok(SpecConfig {
            method: self.speculative.parse::<ProposerKind>()?,
            k_policy: KPolicy::parse(&self.k_policy)?,
            pad: !self.no_pad,
            suffix: SuffixParams {
                max_depth: self.suffix_max_depth,
                max_spec_factor: self.suffix_max_spec_factor,
                min_token_prob: self.suffix_min_token_prob,
                cache_tokens: self.suffix_cache_tokens,
            },
            ..SpecConfig::default()
        })
    }
}

impl EngineArgs {
    pub fn to_config(&self) -> anyhow::Result<EngineConfig> {
        let cfg = EngineConfig {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_model_len: self.max_model_len,
            max_waiting: self.max_waiting,
            enable_prefix_caching: !self.no_prefix_caching,
            spec: self.spec.to_config()?,
            trace_out: self.trace_out.clone(),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl ModelArgs {
    pub fn spec(&self) -> anyhow::Result<ModelSpec> {
        Ok(ModelSpec {
            model: self.model.clone(),
            load_format: self
                .load_format
                .parse::<LoadFormat>()
                .with_context(|| format!("--load-format {:?}", self.load_format))?,
            model_shape: self.model_shape.clone(),
        })
    }

    pub fn device(&self) -> anyhow::Result<Device> {
        self.device
            .parse::<Device>()
            .with_context(|| format!("--device {:?}", self.device))
    }
}

/// Loads the model, binds it to the device and starts the engine.
pub fn start_engine(args: &CommonArgs) -> anyhow::Result<(EngineHandle, EngineInfo)> {
    let cfg = args.engine.to_config()?;
    let device = args.model.device()?;
    if let Some(w) = &args.model.gpu_weights {
        // The CUDA backend reads its settings from the environment (wring-cuda options.rs).
        std::env::set_var("WRING_CUDA_WEIGHTS", w);
    }
    let model = wring_model::load_model(&args.model.spec()?)?;
    let max_model_len = if cfg.max_model_len > 0 {
        cfg.max_model_len
    } else {
        model.max_context()
    };
    let runner_opts = RunnerOptions {
        device,
        kv_cache_bytes: args
            .model
            .kv_cache_memory
            .unwrap_or(args.model.kv_cache_mib << 20),
        block_size: args.model.block_size,
        max_num_seqs: cfg.max_num_seqs,
        max_model_len,
        cpu_weights: args.model.cpu_weights,
        tensor_parallel_size: args.model.tensor_parallel_size,
    };
    let (handle, info) = Engine::start(model, runner_opts, cfg)?;
    tracing::info!(
        "engine ready: {} on {}, context {} tokens, {} KV blocks of {}",
        info.model_name,
        info.device,
        info.max_model_len,
        info.num_kv_blocks,
        info.block_size
    );
    Ok((handle, info))
}

/// Turns user text into prompt ids (BOS first when the model wants it).
pub fn encode_prompt(info: &EngineInfo, text: &str) -> anyhow::Result<Vec<u32>> {
    let mut ids = Vec::new();
    if info.tokenizer.add_bos() {
        if let Some(b) = info.tokenizer.bos_token_id() {
            ids.push(b);
        }
    }
    ids.extend(info.tokenizer.encode(text)?);
    Ok(ids)
}

/// Parses a byte size: plain bytes, or a number with a unit (KiB/MiB/GiB/TiB binary, KB/MB/GB/TB decimal,
/// K/M/G/T read as binary like vLLM's human-readable sizes), case-insensitive.
pub fn parse_byte_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 2GiB, 512MiB, 1073741824)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(format!(
                "unknown size unit {u:?} in {s:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(format!("{s:?} is not a usable size"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod byte_size_tests {
    use super::parse_byte_size;
    #[test]
    fn sizes() {
        assert_eq!(parse_byte_size("1024"), Ok(1024));
        assert_eq!(parse_byte_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_byte_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_byte_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_byte_size("2GB"), Ok(2_000_000_000));
        assert!(parse_byte_size("lots").is_err());
        assert!(parse_byte_size("2 parsecs").is_err());
        assert!(parse_byte_size("0").is_err());
    }
}
