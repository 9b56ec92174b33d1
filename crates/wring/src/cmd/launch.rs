//! The launch plan of `generate`, `chat` and `serve`: every start-up decision, resolved once
//! from the flags into one value that the commands and the engine read. Which model file
//! (worked out once; dummy weights name only where their tokenizer comes from), the gate
//! verdicts recorded for it (loaded once), the CPU weight format and prompt attention they
//! admit, the CUDA weight format, the KV cache's size, the step token cap, speculation and
//! fair steps, and where the adaptive K policy keeps its step timings under which key.
//! [`LaunchPlan::log`] prints one line per decision with its reason; [`LaunchPlan::start`]
//! loads the model and starts the engine with exactly what the plan says.

use std::path::{Path, PathBuf};

use anyhow::Context;
use wring_engine::{Engine, EngineConfig, EngineHandle, EngineInfo, KPolicy, TimingsCache};
use wring_gate::verdicts;
use wring_model::{CpuWeights, Device, LoadFormat, ModelSpec, PrefillAttention, RunnerOptions};

use super::common::{CommonArgs, ModelArgs};

/// The KV cache on the CPU (and on a GPU given neither size nor utilization): 2 GiB.
const DEFAULT_KV_CACHE_BYTES: usize = 2 << 30;

/// Every start-up decision of one engine, and why each was made.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    /// What to load; its `model` is [`Self::model_path`].
    pub spec: ModelSpec,
    /// The model file or directory `--model` names (the default model without it); for
    /// dummy weights, where their tokenizer and chat template come from.
    pub model_path: PathBuf,
    /// How the model runs; `max_model_len` 0 means the model's own context, known once
    /// it is loaded.
    pub runner: RunnerOptions,
    /// The engine's settings, the adaptive policy's timings cache included.
    pub engine: EngineConfig,
    /// One line per decision, in the order start-up logs them.
    pub notes: Vec<Note>,
}

/// A start-up line: a decision and its reason, or a flag the device cannot honour.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    Chose(String),
    Warn(String),
}

impl LaunchPlan {
    /// Resolves the flags: parses them, finds the model, reads its gate verdicts where a
    /// choice needs them and picks every default. Nothing is loaded yet.
    pub fn resolve(args: &CommonArgs) -> anyhow::Result<Self> {
        let m = &args.model;
        let device = m.device()?;
        let (mut engine, engine_lines) = args.engine.to_config(&device)?;
        let load_format = m.load_format()?;
        let dummy = load_format == LoadFormat::Dummy;
        let model_path =
            wring_model::resolve_model_path(m.model.as_deref()).with_context(|| {
                if dummy {
                    "the tokenizer of dummy weights"
                } else {
                    "the model"
                }
            })?;
        let mut notes = vec![Note::Chose(model_line(m, &model_path, dummy))];
        notes.extend(engine_lines.into_iter().map(Note::Chose));

        // The verdicts the CPU's automatic choices read, loaded once.
        let cpu_weights_auto = device == Device::Cpu && m.cpu_weights == CpuWeights::Auto && !dummy;
        let prefill_auto =
            device == Device::Cpu && m.cpu_prefill_attention == PrefillAttention::Auto;
        let gate = if cpu_weights_auto || prefill_auto {
            verdicts::load(&model_path)
        } else {
            None
        };
        let cpu_weights = if cpu_weights_auto {
            let (w, why) = verdicts::choose(gate.as_ref(), &model_path);
            notes.push(Note::Chose(why));
            w
        } else {
            m.cpu_weights
        };
        let amx = wring_runtime::cpu_bf16_attention_available();
        let cpu_prefill_attention = if prefill_auto {
            let (p, why) = verdicts::choose_prefill_attention(gate.as_ref(), cpu_weights, amx);
            notes.push(Note::Chose(why));
            p
        } else {
            let p = m.cpu_prefill_attention;
            if p == PrefillAttention::Bf16 {
                if device != Device::Cpu {
                    notes.push(Note::Warn(format!(
                        "--cpu-prefill-attention is a CPU setting; {device} ignores it"
                    )));
                } else if !amx {
                    notes.push(Note::Warn(
                        "--cpu-prefill-attention bf16: this CPU has no AMX-BF16 tiles (or WRING_CPU_AMX=0), so prompt attention runs f32".into(),
                    ));
                }
            }
            p
        };

        let (kv_cache_bytes, gpu_memory_utilization, kv_line) = kv_cache(m, device);
        notes.push(Note::Chose(kv_line));
        if let Device::Cuda(_) = device {
            notes.push(Note::Chose(gpu_weights_line(m.gpu_weights.as_deref())));
        }
        let runner = RunnerOptions {
            device,
            kv_cache_bytes,
            gpu_memory_utilization,
            max_step_tokens: engine.max_num_batched_tokens,
            block_size: m.block_size,
            max_num_seqs: engine.max_num_seqs,
            max_model_len: engine.max_model_len,
            cpu_weights,
            cpu_prefill_attention,
            tensor_parallel_size: m.tensor_parallel_size,
            gpu_weights: m.gpu_weights.clone(),
        };
        if engine.spec.enabled() && engine.spec.k_policy == KPolicy::Adaptive {
            engine.spec.step_timings =
                step_timings(&model_path, &runner, args.engine.spec.recalibrate);
        }
        let spec = ModelSpec {
            model: Some(model_path.to_string_lossy().into_owned()),
            load_format,
            model_shape: m.model_shape.clone(),
        };
        Ok(Self {
            spec,
            model_path,
            runner,
            engine,
            notes,
        })
    }

    /// [`Self::resolve`] for the commands that run one request at a time (`generate`,
    /// `chat`): at most one sequence, so the adaptive K policy's start-up probes time batch 1
    /// only instead of every batch size up to `--max-num-seqs`
    /// (results/2026-12-05-cpu-spec-malloc-thresholds).
    pub fn resolve_one_stream(args: &CommonArgs) -> anyhow::Result<Self> {
        let mut args = args.clone();
        args.engine.max_num_seqs = 1;
        Self::resolve(&args)
    }

    /// The checkpoint, for what is known about the model beyond its weights (sampling
    /// defaults, a measured system message, known-model facts); None for dummy weights,
    /// whose shape is not the named model's.
    pub fn checkpoint(&self) -> Option<&Path> {
        (self.spec.load_format != LoadFormat::Dummy).then_some(self.model_path.as_path())
    }

    /// Logs the plan: one line per decision with its reason.
    pub fn log(&self) {
        for note in &self.notes {
            match note {
                Note::Chose(line) => tracing::info!("{line}"),
                Note::Warn(line) => tracing::warn!("{line}"),
            }
        }
    }

    /// Logs the plan, loads the model, binds it to the device and starts the engine.
    pub fn start(self) -> anyhow::Result<(EngineHandle, EngineInfo)> {
        self.log();
        let model = wring_model::load_model(&self.spec)?;
        let mut runner = self.runner;
        if runner.max_model_len == 0 {
            runner.max_model_len = model.max_context();
        }
        let (handle, info) = Engine::start(model, runner, self.engine)?;
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
}

/// Which model, and why.
fn model_line(m: &ModelArgs, path: &Path, dummy: bool) -> String {
    let path = path.display();
    if dummy {
        let shape = m.model_shape.as_deref().unwrap_or("(none given)");
        return format!(
            "model: dummy weights of shape {shape}, tokenizer and chat template from {path}"
        );
    }
    match m.model.as_deref() {
        None => format!("model: {path} (the default model; --model names another)"),
        Some(given) if Path::new(given).exists() => format!("model: {path} (--model)"),
        Some(given) => format!("model: {path} (--model {given})"),
    }
}

/// The KV cache's budget in bytes, the GPU memory fraction that sizes it instead (on a GPU
/// given no size), and the line saying which.
fn kv_cache(m: &ModelArgs, device: Device) -> (usize, Option<f32>, String) {
    let per_rank = if m.tensor_parallel_size > 1 {
        " per rank"
    } else {
        ""
    };
    let sized = match (m.kv_cache_memory, m.kv_cache_mib) {
        (Some(bytes), _) => Some((bytes, "--kv-cache-memory")),
        (None, Some(mib)) => Some((mib << 20, "--kv-cache-mib")),
        (None, None) => None,
    };
    match (sized, device) {
        (Some((bytes, flag)), _) => (
            bytes,
            None,
            format!("KV cache: {}{per_rank} ({flag})", mib(bytes)),
        ),
        (None, Device::Cuda(_)) => (
            DEFAULT_KV_CACHE_BYTES,
            Some(m.gpu_memory_utilization),
            format!(
                "KV cache: what --gpu-memory-utilization {} of the GPU leaves{per_rank} after the weights and a step's needs (--kv-cache-memory sets a size)",
                m.gpu_memory_utilization
            ),
        ),
        (None, Device::Cpu) => (
            DEFAULT_KV_CACHE_BYTES,
            None,
            format!(
                "KV cache: {}{per_rank} (the CPU default; --kv-cache-memory sets another)",
                mib(DEFAULT_KV_CACHE_BYTES)
            ),
        ),
    }
}

fn mib(bytes: usize) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    }
}

/// The CUDA weight format, and why.
fn gpu_weights_line(flag: Option<&str>) -> String {
    match (flag, std::env::var("WRING_CUDA_WEIGHTS").ok()) {
        (Some("bf16"), _) => "GPU weights: bf16 (--gpu-weights)".into(),
        (Some(w), _) => format!("GPU weights: {w}, quantised at load (--gpu-weights)"),
        (None, Some(w)) if !w.trim().is_empty() => {
            format!("GPU weights: {} (WRING_CUDA_WEIGHTS)", w.trim())
        }
        (None, _) => {
            "GPU weights: bf16 (the default; --gpu-weights fp8, int4 or nvfp4 quantises at load)"
                .into()
        }
    }
}

/// Where the adaptive policy keeps its start-up step timings for this model, and what
/// besides the engine's own settings they depend on: the model file (name, size, mtime),
/// this binary (size, mtime), the formats and threads it runs with, the processor, and every
/// `WRING_*` setting in effect (the CUDA backend's switches; `--gpu-weights` counts as the
/// `WRING_CUDA_WEIGHTS` it overrides). None when the model file's metadata cannot be read.
fn step_timings(model: &Path, opts: &RunnerOptions, refresh: bool) -> Option<TimingsCache> {
    let meta = std::fs::metadata(model).ok()?;
    let mtime = mtime_secs(&meta);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    // This build: a rebuilt binary may have other kernels, so its timings are its own.
    let exe = std::env::current_exe()
        .and_then(std::fs::metadata)
        .map(|m| format!("{}:{}", m.len(), mtime_secs(&m)))
        .unwrap_or_default();
    let mut env: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("WRING_") && k != "WRING_HOME")
        .filter(|(k, _)| opts.gpu_weights.is_none() || k != "WRING_CUDA_WEIGHTS")
        .map(|(k, v)| format!("{k}={v}"))
        .chain(
            opts.gpu_weights
                .iter()
                .map(|w| format!("WRING_CUDA_WEIGHTS={w}")),
        )
        .collect();
    env.sort();
    let key = format!(
        "model={}:{}:{mtime}|exe={exe}|device={:?}|cpu_weights={:?}|prefill_attention={:?}|tp={}|block={}|threads={}|cpu={cpu}|env={}",
        model.file_name().unwrap_or_default().to_string_lossy(),
        meta.len(),
        opts.device,
        opts.cpu_weights,
        opts.cpu_prefill_attention,
        opts.tensor_parallel_size,
        opts.block_size,
        rayon::current_num_threads(),
        env.join(",")
    );
    Some(TimingsCache {
        path: wring_model::beside_model(model, "wring-step-costs.json"),
        key,
        refresh,
    })
}

/// A file's modification time in whole seconds since the epoch (0 where unknown).
fn mtime_secs(meta: &std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CommonArgs,
    }

    fn plan(flags: &[&str]) -> LaunchPlan {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(flags.iter().copied())).unwrap();
        LaunchPlan::resolve(&cli.args).unwrap()
    }

    fn chose<'a>(p: &'a LaunchPlan, prefix: &str) -> Vec<&'a str> {
        p.notes
            .iter()
            .filter_map(|n| match n {
                Note::Chose(l) if l.starts_with(prefix) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_default_model_on_the_cpu_is_resolved_once_into_what_loads() {
        let p = plan(&[]);
        assert!(p.model_path.is_file(), "{}", p.model_path.display());
        assert_eq!(p.spec.model.as_deref(), p.model_path.to_str());
        assert_eq!(p.checkpoint(), Some(p.model_path.as_path()));
        let model = chose(&p, "model: ");
        assert_eq!(model.len(), 1);
        assert!(model[0].ends_with("(the default model; --model names another)"));
        for line in [
            "speculation: off",
            "fair steps: ",
            "CPU weights: ",
            "CPU prefill attention: ",
        ] {
            assert_eq!(chose(&p, line).len(), 1, "{line} in {:?}", p.notes);
        }
        assert_eq!(
            chose(&p, "KV cache: "),
            ["KV cache: 2048 MiB (the CPU default; --kv-cache-memory sets another)"]
        );
        assert!(chose(&p, "GPU weights").is_empty(), "a CUDA decision");
        assert_ne!(p.runner.cpu_weights, CpuWeights::Auto, "auto is decided");
        assert_ne!(p.runner.cpu_prefill_attention, PrefillAttention::Auto);
        assert_eq!(p.runner.kv_cache_bytes, 2 << 30);
        assert_eq!(p.runner.gpu_memory_utilization, None);
        assert_eq!(p.runner.max_step_tokens, 2048);
        assert_eq!(p.runner.max_model_len, 0, "the model's own, once loaded");
        assert!(p.engine.spec.step_timings.is_none(), "no adaptive policy");
    }

    #[test]
    fn the_gpu_weight_format_travels_in_the_plan_and_keys_the_step_timings() {
        let before = std::env::var("WRING_CUDA_WEIGHTS").ok();
        let p = plan(&[
            "--device",
            "cuda",
            "--gpu-weights",
            "fp8",
            "--speculative",
            "suffix",
            "--max-num-batched-tokens",
            "512",
        ]);
        assert_eq!(
            std::env::var("WRING_CUDA_WEIGHTS").ok(),
            before,
            "no side channel"
        );
        assert_eq!(p.runner.gpu_weights.as_deref(), Some("fp8"));
        assert_eq!(p.runner.gpu_memory_utilization, Some(0.9));
        assert_eq!(p.runner.max_step_tokens, 512);
        assert_eq!(
            chose(&p, "GPU weights: "),
            ["GPU weights: fp8, quantised at load (--gpu-weights)"]
        );
        assert!(chose(&p, "KV cache: what --gpu-memory-utilization 0.9 ").len() == 1);
        assert!(chose(&p, "CPU weights").is_empty(), "a CPU decision");
        let timings = p.engine.spec.step_timings.as_ref().expect("adaptive K");
        assert!(timings.key.contains("device=Cuda(0)"), "{}", timings.key);
        assert!(
            timings.key.contains("WRING_CUDA_WEIGHTS=fp8"),
            "the weight format is part of the key: {}",
            timings.key
        );
        assert_eq!(
            timings.path,
            wring_model::beside_model(&p.model_path, "wring-step-costs.json")
        );
        let bf16 = plan(&["--device", "cuda", "--speculative", "suffix"]);
        assert_ne!(
            bf16.engine.spec.step_timings.unwrap().key,
            timings.key,
            "other weights, other timings"
        );
    }

    #[test]
    fn kv_sizes_dummy_weights_and_flags_a_device_ignores() {
        let p = plan(&["--kv-cache-memory", "1.5GB"]);
        assert_eq!(p.runner.kv_cache_bytes, 1_500_000_000);
        assert_eq!(
            chose(&p, "KV cache: "),
            ["KV cache: 1430.5 MiB (--kv-cache-memory)"]
        );
        let p = plan(&["--device", "cuda", "--kv-cache-mib", "512", "--tp", "2"]);
        assert_eq!(
            (p.runner.kv_cache_bytes, p.runner.gpu_memory_utilization),
            (512 << 20, None)
        );
        assert_eq!(
            chose(&p, "KV cache: "),
            ["KV cache: 512 MiB per rank (--kv-cache-mib)"]
        );
        let p = plan(&[
            "--load-format",
            "dummy",
            "--model-shape",
            "llama-3.1-8b",
            "--device",
            "cuda",
            "--cpu-prefill-attention",
            "bf16",
        ]);
        assert_eq!(
            p.checkpoint(),
            None,
            "dummy weights are not the named model"
        );
        assert_eq!(p.spec.model_shape.as_deref(), Some("llama-3.1-8b"));
        assert!(chose(&p, "model: dummy weights of shape llama-3.1-8b, tokenizer").len() == 1);
        assert!(p.notes.contains(&Note::Warn(
            "--cpu-prefill-attention is a CPU setting; cuda:0 ignores it".into()
        )));
        let cli = Cli::try_parse_from(["x", "--model", "/nonexistent/m.gguf"]).unwrap();
        let e = format!("{:#}", LaunchPlan::resolve(&cli.args).unwrap_err());
        assert!(e.contains("does not exist"), "{e}");
    }
}
