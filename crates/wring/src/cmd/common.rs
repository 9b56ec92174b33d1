//! Flags shared by `generate`, `chat` and `serve`: which model, how the engine
//! runs (batching limits, speculative decoding), and sampling for the CLI
//! commands; the engine and speculation settings they give on a device, with the lines
//! that say what defaults chose. `launch.rs` resolves them into the launch plan.

use std::path::Path;

use anyhow::Context;
use wring_engine::{
    EngineConfig, EngineInfo, KPolicy, ProposerKind, SamplingParams, SpecConfig, SuffixParams,
};
use wring_model::{ChatMessage, Device, LoadFormat};

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
    /// Shape for --load-format dummy, e.g. smollm2-135m, llama-3.1-8b, deepseek-v3;
    /// <shape>:<layers> keeps its first layers (deepseek-v3:4).
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
    /// Memory for the KV cache, in MiB. Default: 2048 on the CPU; on a GPU what
    /// --gpu-memory-utilization leaves.
    #[arg(long)]
    pub kv_cache_mib: Option<usize>,
    /// Memory for the KV cache as a size (vLLM's flag): bytes, or with a unit (512MiB, 2GiB, 1.5GB);
    /// overrides --kv-cache-mib and --gpu-memory-utilization.
    #[arg(long, value_parser = parse_byte_size, conflicts_with = "kv_cache_mib")]
    pub kv_cache_memory: Option<usize>,
    /// On a GPU, the fraction of its memory wring may use (vLLM's flag): the KV cache takes
    /// what is left of it after the weights, the CUDA context, other processes and what a
    /// step of --max-num-batched-tokens tokens needs. Start-up says how it was split and
    /// fails with the numbers when nothing is left. Ignored when --kv-cache-memory or
    /// --kv-cache-mib gives the KV cache's size.
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f32,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// CPU weight format: auto (the fastest of q4, q8 whose `wring gate` verdict against the f32
    /// reference is PASS for this model: verdicts cached beside the model by `wring gate
    /// --save-verdict`, shipped for the default model; f32 when none passed; start-up says which
    /// and why), f32 (the float32 reference the golden outputs were made with), q8 (8-bit blocks, ~4x less
    /// memory traffic than f32) or q4 (4-bit blocks with scale and minimum, Q4_1's shape; the
    /// embedding/lm head stay q8). q8 and q4 quantise each activation row to 8 bits, as llama.cpp does.
    #[arg(long, default_value = "auto")]
    pub cpu_weights: wring_model::CpuWeights,
    /// Attention precision of prompt rows (prefill) on the CPU: auto (bf16 where this CPU has
    /// AMX-BF16 tiles and the `wring gate` verdict of the chosen weight format with them is PASS
    /// for this model, else f32; start-up says which and why), f32 (the reference's bits), or
    /// bf16 (AMX tiles; f32 on a CPU without them). Decode and verify rows always run f32, so
    /// speculation stays lossless. `WRING_CPU_AMX=0` turns the tiles off.
    #[arg(long, default_value = "auto")]
    pub cpu_prefill_attention: wring_model::PrefillAttention,
    /// CUDA weight format, quantised at load by round-to-nearest (the embedding and a separate
    /// lm head stay bf16): bf16, fp8 (W8A8 through cuBLASLt), int4 (W4A16, group 128) or nvfp4
    /// (weight-only on Hopper: no FP4 tensor cores before Blackwell). Overrides WRING_CUDA_WEIGHTS.
    /// Saves memory (int4 2.7x less than bf16); on the H200 every scheme was slower than bf16
    /// before fp8's fused activation path (results/2026-11-30-cuda-h200, run 9). A `wring quantize`
    /// checkpoint or a published FP8 checkpoint runs dequantised to bf16 unless
    /// WRING_CUDA_QUANT_KERNELS=on. `wring tune --weights` sweeps these as a configuration axis.
    #[arg(long, value_parser = ["bf16", "fp8", "int4", "nvfp4"])]
    pub gpu_weights: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 32)]
    pub max_num_seqs: usize,
    /// Token budget of one step (prefill chunks + decode/verify tokens): the hard cap, whatever
    /// --step-time-target-ms says.
    #[arg(long, default_value_t = 2048)]
    pub max_num_batched_tokens: usize,
    /// Fair steps: size each step's prefill chunk from measured step times so a step takes about
    /// this many milliseconds, which bounds the gap between two tokens of the other streams while
    /// a long prompt is prefilled (decode/verify rows are never cut). Default: 120 on the CPU;
    /// off on CUDA (its steps are short; it keeps the whole --max-num-batched-tokens). 0 = off.
    #[arg(long, value_name = "MS")]
    pub step_time_target_ms: Option<u64>,
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
    /// Write one JSONL line per engine step to this file: sequences, tokens, prompt tokens,
    /// logit rows, model and host milliseconds (for studying where a run's time goes).
    #[arg(long, value_name = "FILE")]
    pub step_log: Option<std::path::PathBuf>,
    /// Before serving, run the step shapes whose first use is slow (on CUDA: every graph key
    /// and eager token bucket, three times: sighting, capture, replay), so the first requests
    /// do not pay for them. ~0.8 s of start-up on an H200, and the first
    /// requests' time to first token is lower (BENCHMARKS.md); nothing to warm on the CPU.
    /// Default: on for `serve`, off for one-shot `generate` and `chat`; `--warm-up=false`
    /// (or WRING_WARM_UP=0) skips it.
    #[arg(long, env = "WRING_WARM_UP", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub warm_up: Option<bool>,
    /// Accept recorded outputs with requests (`serve --replay-outputs` sets it).
    #[arg(skip)]
    pub replay_outputs: bool,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Block-hash chaining and KV-event sink (set by `serve`'s --kv-events-* flags).
    #[arg(skip)]
    pub kv_events: wring_engine::KvEventsConfig,
}

#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Speculative decoding")]
pub struct SpecArgs {
    /// Drafter: none | suffix (suffix trees over the request and past outputs) |
    /// ngram (prompt lookup).
    #[arg(long, default_value = "none")]
    pub speculative: String,
    /// Measure the adaptive K policy's step costs again at start-up instead of reading the
    /// timings a previous start on this machine, model and settings kept beside the model
    /// (`<model>.wring-step-costs.json`; the probes take seconds on a CPU).
    #[arg(long)]
    pub recalibrate: bool,
    /// How K (draft tokens per verify step) is chosen: fixed:K | profile:FILE |
    /// dynamic | adaptive. Default: adaptive (the fastest measured on both backends: BENCHMARKS.md).
    #[arg(long)]
    pub k_policy: Option<String>,
    /// Variable-length drafts instead of padding every sequence to 1 + K tokens. Default on
    /// the CPU, where every padded slot costs a row of work.
    #[arg(long, conflicts_with = "pad")]
    pub no_pad: bool,
    /// Pad every sequence of a verify step to 1 + K tokens (one shape per step). Default on
    /// CUDA, where that shape replays a captured graph.
    #[arg(long)]
    pub pad: bool,
    /// Longest context the suffix trees index and match.
    #[arg(long, default_value_t = 24)]
    pub suffix_max_depth: usize,
    /// Draft length cap = match length × this. Default: 1 unpadded (ArcticInference's),
    /// 100 (no cap below K) padded, where a shorter draft only leaves slots empty.
    #[arg(long, env = "WRING_SUFFIX_MAX_SPEC_FACTOR")]
    pub suffix_max_spec_factor: Option<f32>,
    /// Stop a draft when its estimated probability falls below this. Default: 0.1
    /// unpadded, 0.05 padded.
    #[arg(long, env = "WRING_SUFFIX_MIN_TOKEN_PROB")]
    pub suffix_min_token_prob: Option<f32>,
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
    /// 0 = greedy. Default: greedy for plain `wring generate`; for chat (`wring chat`, `wring
    /// generate --chat`) the model's own: its generation config, else for a model wring knows its
    /// publisher's model card (SmolLM2 instruct, the default model: 0.2); else 0.7.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Default: 1 (off) for plain generate; for chat the model's own (SmolLM2's card: 0.9),
    /// else 0.95.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// 0 = off. Default: off, or the model's own for chat.
    #[arg(long)]
    pub top_k: Option<u32>,
    /// 0 = off. Default: off for plain generate; for chat the model's own, else 0.05.
    #[arg(long)]
    pub min_p: Option<f32>,
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
    /// DRY loop penalty (llama.cpp's): a token that would extend a sequence repeated from
    /// earlier in the context by n >= --dry-allowed-length tokens loses multiplier ·
    /// base^(n - allowed) from its logit. 0 = off. Default: off for plain generate; for chat
    /// 0.8 (a wring chat default: it stops the default model's loops, BENCHMARKS.md).
    #[arg(long)]
    pub dry_multiplier: Option<f32>,
    /// DRY's growth per repeated token past the allowed length.
    #[arg(long, default_value_t = wring_engine::api::DRY_BASE)]
    pub dry_base: f32,
    /// Repeats up to this many tokens go unpenalised by DRY.
    #[arg(long, default_value_t = wring_engine::api::DRY_ALLOWED_LENGTH)]
    pub dry_allowed_length: u32,
    /// How many of the last context tokens DRY searches: -1 = all (prompt and output), 0 = off.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub dry_penalty_last_n: i32,
    /// Stop when this text appears (repeatable); the text itself is not printed.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Keep going past the end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
}

/// Chat sampling when neither the flags nor the model (generation config or model card) say otherwise: a conventional moderate
/// temperature with nucleus and min-p truncation (the combination llama.cpp's and most chat
/// front ends' defaults are near). Greedy decoding of small quantized models falls into loops
/// at near-tied tokens; sampling from the truncated distribution does not follow a flip forever.
pub const CHAT_TEMPERATURE: f32 = 0.7;
pub const CHAT_TOP_P: f32 = 0.95;
pub const CHAT_MIN_P: f32 = 0.05;
/// DRY for chat (no model card or generation config sets it): the default model under any
/// chat sampling falls into phrase loops ("la France, la France, …") that DRY penalises
/// without touching single repeated tokens (results/2026-12-01-chat-defaults).
pub const CHAT_DRY_MULTIPLIER: f32 = 0.8;

impl SamplingArgs {
    /// Plain completion (`wring generate` without --chat): greedy unless the flags say otherwise.
    pub fn params(&self) -> SamplingParams {
        self.resolve(None).0
    }

    /// Chat sampling: each setting from the flags, else the model's own (generation config, or
    /// the model card of a known model), else wring's chat defaults; and a line saying which.
    pub fn chat_params(&self, model: &wring_model::ModelSampling) -> (SamplingParams, String) {
        self.resolve(Some(model))
    }

    fn resolve(&self, chat: Option<&wring_model::ModelSampling>) -> (SamplingParams, String) {
        let mut sources = vec![];
        let model_source = chat.map_or("", |m| m.source.label());
        let mut pick =
            |name: &str, flag: Option<f32>, model: Option<f32>, chat_default: f32, plain: f32| {
                let (v, from) = match (flag, model, chat) {
                    (Some(v), _, _) => (v, "flag"),
                    (None, Some(v), Some(_)) => (v, model_source),
                    (None, None, Some(_)) => (chat_default, "wring chat default"),
                    (None, _, None) => (plain, "default"),
                };
                sources.push(format!("{name} {v} ({from})"));
                v
            };
        let m = chat.map(|m| m.defaults).unwrap_or_default();
        let temperature = pick(
            "temperature",
            self.temperature,
            m.temperature,
            CHAT_TEMPERATURE,
            0.0,
        );
        let top_p = pick("top_p", self.top_p, m.top_p, CHAT_TOP_P, 1.0);
        let min_p = pick("min_p", self.min_p, m.min_p, CHAT_MIN_P, 0.0);
        let top_k = pick(
            "top_k",
            self.top_k.map(|k| k as f32),
            m.top_k.map(|k| k as f32),
            0.0,
            0.0,
        ) as u32;
        let (dry_multiplier, dry_from) = match (self.dry_multiplier, chat) {
            (Some(v), _) => (v, "flag"),
            (None, Some(_)) => (CHAT_DRY_MULTIPLIER, "wring chat default"),
            (None, None) => (0.0, "default"),
        };
        let params = SamplingParams {
            temperature,
            top_p,
            top_k,
            min_p,
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            ..SamplingParams::default()
        };
        let mut line = if temperature == 0.0 {
            format!("sampling: greedy ({})", sources[0])
        } else {
            format!("sampling: {}", sources.join(", "))
        };
        if params.dry_enabled() {
            let window = match self.dry_penalty_last_n {
                -1 => "whole context".to_string(),
                n => format!("last {n} tokens"),
            };
            line += &format!(
                ", DRY {dry_multiplier} ({dry_from}; base {}, allowed length {}, {window})",
                self.dry_base, self.dry_allowed_length
            );
        } else if chat.is_some() {
            line += &format!(", DRY off ({dry_from})");
        }
        (params, line)
    }
}

/// The sampling defaults of the checkpoint (the launch plan's; none for dummy weights), and
/// their source.
pub fn model_sampling_defaults(checkpoint: Option<&Path>) -> wring_model::ModelSampling {
    checkpoint
        .map(wring_model::ModelSampling::of_model)
        .unwrap_or_default()
}

/// The leading turn of a chat command's conversation: `--system` when given, else the system
/// message measured better for the checkpoint (`wring_model::cli_system_default`), else none
/// (the template inserts its own). Logs which.
pub fn system_turn(given: Option<&str>, checkpoint: Option<&Path>) -> Vec<ChatMessage> {
    let (system, why) = match given {
        Some(s) => (Some(s), "--system"),
        None => match checkpoint.and_then(wring_model::cli_system_default) {
            Some(s) => (
                Some(s),
                "measured better for this model than its template's own (--system sets another)",
            ),
            None => (None, "the template's own"),
        },
    };
    match system {
        Some(s) => tracing::info!("system message {s:?}: {why}"),
        None => tracing::info!("system message: {why}"),
    }
    system
        .map(|s| ChatMessage::new("system", s))
        .into_iter()
        .collect()
}

/// The K policy and padding speculation uses on `device` when the flags leave them open:
/// what measured fastest there (BENCHMARKS.md: on the CPU padding loses and unpadded adaptive
/// K wins, 1.38–1.54× over no speculation; on the H200 padded steps replay graphs, +22–31 %
/// over unpadded, and adaptive K is the best or within 3 % of the best fixed K).
pub fn default_spec_choice(device: &Device) -> (&'static str, bool) {
    match device {
        Device::Cpu => ("adaptive", false),
        Device::Cuda(_) => ("adaptive", true),
    }
}

/// The step-time target on `device` when `--step-time-target-ms` is not given.
pub fn default_step_time_target(device: &Device) -> Option<std::time::Duration> {
    match device {
        // ≈ 2× a plain decode step of the default model on a 2-core CPU: a chunk large enough
        // to prefill near full speed, a gap well under 250 ms.
        Device::Cpu => Some(std::time::Duration::from_millis(120)),
        Device::Cuda(_) => None,
    }
}

impl SpecArgs {
    /// The speculation settings on `device`, and a line saying what was chosen and why.
    pub fn to_config(&self, device: &Device) -> anyhow::Result<(SpecConfig, String)> {
        let method = self.speculative.parse::<ProposerKind>()?;
        let (default_k, default_pad) = default_spec_choice(device);
        let backend = match device {
            Device::Cpu => "CPU",
            Device::Cuda(_) => "CUDA",
        };
        let k_policy = KPolicy::parse(self.k_policy.as_deref().unwrap_or(default_k))?;
        let pad = if self.pad {
            true
        } else if self.no_pad {
            false
        } else {
            default_pad
        };
        let why = |given: bool| {
            if given {
                "given".to_string()
            } else {
                format!("{backend} default")
            }
        };
        let drafts = SuffixParams::for_padding(pad);
        let suffix = SuffixParams {
            max_depth: self.suffix_max_depth,
            max_spec_factor: self
                .suffix_max_spec_factor
                .unwrap_or(drafts.max_spec_factor),
            min_token_prob: self.suffix_min_token_prob.unwrap_or(drafts.min_token_prob),
            cache_tokens: self.suffix_cache_tokens,
        };
        let summary = if method == ProposerKind::None {
            "speculation: off".to_string()
        } else {
            format!(
                "speculation: {}, K policy {} ({}), {} ({}); suffix drafts capped at match length × {}, probability floor {}",
                method.as_str(),
                k_policy.label(),
                why(self.k_policy.is_some()),
                if pad { "padded" } else { "unpadded" },
                why(self.pad || self.no_pad),
                suffix.max_spec_factor,
                suffix.min_token_prob,
            )
        };
        let cfg = SpecConfig {
            method,
            k_policy,
            pad,
            suffix,
            ..SpecConfig::default()
        };
        Ok((cfg, summary))
    }
}

impl EngineArgs {
    /// The engine settings on `device`, and the start-up lines that say what defaults chose.
    pub fn to_config(&self, device: &Device) -> anyhow::Result<(EngineConfig, Vec<String>)> {
        let (spec, spec_line) = self.spec.to_config(device)?;
        let step_time_target = match self.step_time_target_ms {
            Some(0) => None,
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
            None => default_step_time_target(device),
        };
        let steps_line = match step_time_target {
            Some(t) => format!(
                "fair steps: prefill chunks sized for {} ms steps{} ({} ms for a prompt alone; hard cap {} tokens)",
                t.as_millis(),
                if self.step_time_target_ms.is_some() {
                    ""
                } else {
                    ", the default here"
                },
                t.max(wring_engine::step_budget::PREFILL_ALONE_TARGET).as_millis(),
                self.max_num_batched_tokens
            ),
            None => format!(
                "step budget: {} tokens (no step-time target)",
                self.max_num_batched_tokens
            ),
        };
        let cfg = EngineConfig {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            step_time_target,
            max_model_len: self.max_model_len,
            max_waiting: self.max_waiting,
            enable_prefix_caching: !self.no_prefix_caching,
            spec,
            trace_out: self.trace_out.clone(),
            step_log: self.step_log.clone(),
            warm_up: self.warm_up.unwrap_or(false),
            replay_outputs: self.replay_outputs,
            kv_events: self.kv_events.clone(),
        };
        cfg.validate()?;
        Ok((cfg, vec![spec_line, steps_line]))
    }
}

impl ModelArgs {
    pub fn load_format(&self) -> anyhow::Result<LoadFormat> {
        self.load_format
            .parse::<LoadFormat>()
            .with_context(|| format!("--load-format {:?}", self.load_format))
    }

    pub fn device(&self) -> anyhow::Result<Device> {
        self.device
            .parse::<Device>()
            .with_context(|| format!("--device {:?}", self.device))
    }
}

/// Turns user text into prompt ids: BOS first when the model wants it and the text (a chat
/// template's rendering, as DeepSeek's and Llama 3's write it) does not already begin with
/// it — the server's rule.
pub fn encode_prompt(info: &EngineInfo, text: &str) -> anyhow::Result<Vec<u32>> {
    let mut ids = info.tokenizer.encode(text)?;
    if let (true, Some(bos)) = (info.tokenizer.add_bos(), info.tokenizer.bos_token_id()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
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
mod sampling_tests {
    use super::SamplingArgs;
    use clap::Parser;
    use wring_model::{GenerationDefaults, ModelSampling, SamplingSource};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SamplingArgs,
    }

    fn line(flags: &[&str], model: ModelSampling) -> String {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(flags.iter().copied())).unwrap();
        cli.args.chat_params(&model).1
    }

    #[test]
    fn each_chat_setting_says_where_it_came_from() {
        assert_eq!(
            line(&[], ModelSampling::default()),
            "sampling: temperature 0.7 (wring chat default), top_p 0.95 (wring chat default), \
             min_p 0.05 (wring chat default), top_k 0 (wring chat default), \
             DRY 0.8 (wring chat default; base 1.75, allowed length 2, whole context)"
        );
        let card = ModelSampling {
            defaults: GenerationDefaults {
                temperature: Some(0.2),
                top_p: Some(0.9),
                ..Default::default()
            },
            source: SamplingSource::ModelCard,
        };
        assert_eq!(
            line(&["--min-p", "0"], card),
            "sampling: temperature 0.2 (model card), top_p 0.9 (model card), min_p 0 (flag), \
             top_k 0 (wring chat default), DRY 0.8 (wring chat default; base 1.75, allowed length \
             2, whole context)"
        );
        let config = ModelSampling {
            defaults: GenerationDefaults {
                temperature: Some(0.6),
                top_k: Some(20),
                ..Default::default()
            },
            source: SamplingSource::GenerationConfig,
        };
        assert_eq!(
            line(&[], config),
            "sampling: temperature 0.6 (generation config), top_p 0.95 (wring chat default), \
             min_p 0.05 (wring chat default), top_k 20 (generation config), DRY 0.8 (wring chat \
             default; base 1.75, allowed length 2, whole context)"
        );
        assert_eq!(
            line(&["--temperature", "0"], card),
            "sampling: greedy (temperature 0 (flag)), DRY 0.8 (wring chat default; base 1.75, \
             allowed length 2, whole context)",
        );
        assert_eq!(
            line(
                &[
                    "--temperature",
                    "0",
                    "--dry-multiplier",
                    "1",
                    "--dry-penalty-last-n",
                    "-1"
                ],
                card
            ),
            "sampling: greedy (temperature 0 (flag)), DRY 1 (flag; base 1.75, allowed length 2, \
             whole context)",
        );
        assert_eq!(
            line(&["--temperature", "0", "--dry-multiplier", "0"], card),
            "sampling: greedy (temperature 0 (flag)), DRY off (flag)",
        );
        let (chat, _) = Cli::try_parse_from(["x", "--dry-penalty-last-n", "256"])
            .unwrap()
            .args
            .chat_params(&card);
        assert_eq!((chat.dry_multiplier, chat.dry_penalty_last_n), (0.8, 256));
        let (plain, _) = Cli::try_parse_from(["x"]).unwrap().args.resolve(None);
        assert_eq!(plain.temperature, 0.0, "plain generate stays greedy");
        assert_eq!(plain.dry_multiplier, 0.0, "and without DRY");
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        spec: SpecArgs,
    }

    fn suffix(args: &[&str], device: Device) -> (bool, f32, f32) {
        let cli = Cli::try_parse_from(args).unwrap();
        let (cfg, line) = cli.spec.to_config(&device).unwrap();
        assert!(
            line.contains(&format!("× {}", cfg.suffix.max_spec_factor)),
            "{line}"
        );
        (
            cfg.pad,
            cfg.suffix.max_spec_factor,
            cfg.suffix.min_token_prob,
        )
    }

    #[test]
    fn padded_drafts_fill_their_k_and_unpadded_ones_keep_arctic_caps() {
        let s = ["x", "--speculative", "suffix"];
        assert_eq!(suffix(&s, Device::Cpu), (false, 1.0, 0.1));
        assert_eq!(suffix(&s, Device::Cuda(0)), (true, 100.0, 0.05));
        assert_eq!(
            suffix(&[&s[..], &["--pad"]].concat(), Device::Cpu),
            (true, 100.0, 0.05)
        );
        assert_eq!(
            suffix(&[&s[..], &["--no-pad"]].concat(), Device::Cuda(0)),
            (false, 1.0, 0.1)
        );
        let given = [
            "--suffix-max-spec-factor",
            "2",
            "--suffix-min-token-prob",
            "0.2",
        ];
        assert_eq!(
            suffix(&[&s[..], &given].concat(), Device::Cuda(0)),
            (true, 2.0, 0.2)
        );
    }
}
