//! `wring bench serve`, `wring tune` and `wring report`: flags here, work in `wring-bench`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use wring_bench::bench::{run_bench, summary_table, BenchConfig};
use wring_bench::configs::{parse_config_list, with_weights, ServeConfig, REFERENCE_WEIGHTS};
use wring_bench::corpus::{parse_corpus_list, CorpusSource};
use wring_bench::replay::RequestConfig;
use wring_bench::replay_source::ReplaySources;
use wring_bench::tune::{self, discover_model, TuneConfig};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Replay real corpora closed-loop against a running OpenAI-compatible server.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Server root (a trailing /v1 is accepted).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,
    /// Model name for requests (default: the first id in the server's /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// Write the results (vLLM `bench serve` keys + spec-decode fields) to this JSON file.
    #[arg(long)]
    pub result_json: Option<PathBuf>,
    /// Configuration label stored in the results (e.g. the server flags' name).
    #[arg(long, default_value = "server")]
    pub label: String,
    /// Fixed draft length K of the server, recorded for reports.
    #[arg(long)]
    pub k: Option<u32>,
    #[command(flatten)]
    pub bench: BenchFlags,
}

/// Benchmark settings shared by `bench serve` and `tune`.
#[derive(clap::Args, Clone)]
pub struct BenchFlags {
    /// Corpus: sharegpt, humaneval, mbpp, swebench, wildchat, lmsys, mix, a comma list, or all.
    #[arg(long, default_value = "all")]
    pub corpus: String,
    /// Directory with the shared corpora (default: $WRING_SHARED/corpora, else ../shared/corpora).
    #[arg(long)]
    pub corpus_dir: Option<PathBuf>,
    /// Requests in flight at every moment (closed loop).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
    /// Prompts per corpus per run.
    #[arg(long, default_value_t = 200)]
    pub num_prompts: usize,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Warm-up requests per corpus before the measured runs (not measured).
    #[arg(long, default_value_t = 8)]
    pub warmup: usize,
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the server's suffix cache between runs (default: reset it before each run).
    #[arg(long)]
    pub warm_cache: bool,
    #[arg(long, env = "OPENAI_API_KEY")]
    pub api_key: Option<String>,
    /// Ask the server to ignore EOS so every request generates max_tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Request per-chunk usage (vLLM `continuous_usage_stats`) for exact token-normalised ITL.
    #[arg(long)]
    pub continuous_usage: bool,
    /// Redo the run farthest from the median while MAD/median of tok/s exceeds this.
    #[arg(long, default_value_t = 0.05)]
    pub max_spread: f64,
    #[arg(long, default_value_t = 2)]
    pub max_reruns: usize,
    /// Seed of the `mix` shuffle.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Skip prompts longer than this many characters (0 = keep all).
    #[arg(long, default_value_t = 0)]
    pub max_prompt_chars: usize,
    /// Device description recorded in the results (e.g. "cpu", "H200").
    #[arg(long, default_value = "unknown")]
    pub device: String,
    #[arg(long, default_value_t = 1800)]
    pub request_timeout_s: u64,
    #[arg(long)]
    pub no_progress: bool,
    /// Replay recorded outputs instead of letting the model choose its tokens (the server
    /// must run `wring serve --replay-outputs`; `tune` starts its servers so): `reference`
    /// (the responses that come with the corpora: ShareGPT's assistant turns, HumanEval's
    /// canonical solutions, MBPP's code, SWE-bench's patches, GPT-4's Arena-Hard answers),
    /// `own:FILE` (a real model's outputs for the same prompts, a `wring serve --trace-out`
    /// file from a run of this benchmark), or both in order of preference
    /// (`reference,own:FILE`; wildchat has no references). Every step still runs the model;
    /// only which tokens come out, and so which drafts are accepted, is scripted.
    #[arg(long, value_name = "SOURCE")]
    pub replay: Option<String>,
}

#[derive(clap::Args)]
pub struct TuneArgs {
    /// Model for `wring serve --model` (default: wring's default model).
    #[arg(long)]
    pub model: Option<String>,
    /// Comma list of configurations, or all: nospec, ngram, suffix-k{4,6,8,12}[-nopad], dynamic, adaptive (also dynamic-nopad, adaptive-nopad, and suffix = `--speculative suffix` with the backend's defaults; not in `all`).
    #[arg(long, default_value = "all")]
    pub configs: String,
    /// Output directory: raw result JSON per configuration, logs, k_profile.json, report.md, charts.
    #[arg(long)]
    pub out: PathBuf,
    /// Extra argument for every `wring serve` (repeatable), e.g. --serve-arg=--device=cpu.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    pub serve_args: Vec<String>,
    /// Configuration the report compares against.
    #[arg(long, default_value = "nospec")]
    pub baseline: String,
    /// Weight formats to sweep as a configuration axis: every configuration runs in each
    /// (`--weights bf16,fp8` → `bf16+nospec`, `fp8+nospec`, …; CUDA: bf16, fp8, int4, nvfp4
    /// via `--gpu-weights`; CPU: f32, q8, q4 via `--cpu-weights`). A configuration may also
    /// name its own (`fp8+suffix-k4`). The report prints each format's `wring gate` verdict for
    /// the model, and the decision tree only recommends a reference format or one that PASSed.
    #[arg(long, default_value = "")]
    pub weights: String,
    #[arg(long, default_value_t = 600)]
    pub startup_timeout_s: u64,
    /// Configurations that differ only in their K policy (suffix-k4 … suffix-k12, adaptive,
    /// dynamic: the padded ones, or the unpadded ones) run on one server, each sending its
    /// policy with every request (`k_policy`): one start per group instead of one per
    /// configuration, which for an 8B model saves most of a sweep's time.
    #[arg(long)]
    pub share_servers: bool,
    #[command(flatten)]
    pub bench: BenchFlags,
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Result files or directories of them.
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Where report.md and the charts go.
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
    #[arg(long, default_value = "nospec")]
    pub baseline: String,
}

fn default_corpus_dir() -> PathBuf {
    if let Some(shared) = std::env::var_os("WRING_SHARED") {
        return PathBuf::from(shared).join("corpora");
    }
    ["../shared/corpora", "shared/corpora"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from("../shared/corpora"))
}

fn bench_config(
    flags: &BenchFlags,
    base_url: String,
    model: String,
    label: String,
    k: Option<u32>,
) -> Result<BenchConfig> {
    Ok(BenchConfig {
        request: RequestConfig {
            base_url,
            model,
            api_key: flags.api_key.clone(),
            max_tokens: flags.max_tokens,
            temperature: flags.temperature,
            ignore_eos: flags.ignore_eos,
            continuous_usage: flags.continuous_usage,
            request_timeout: Duration::from_secs(flags.request_timeout_s),
            k_policy: None,
        },
        corpora: parse_corpus_list(&flags.corpus)?,
        source: CorpusSource::new(flags.corpus_dir.clone().unwrap_or_else(default_corpus_dir)),
        concurrency: flags.concurrency,
        num_prompts: flags.num_prompts,
        runs: flags.runs,
        warmup: flags.warmup,
        warm_cache: flags.warm_cache,
        max_spread: flags.max_spread,
        max_reruns: flags.max_reruns,
        seed: flags.seed,
        max_prompt_chars: flags.max_prompt_chars,
        label,
        k,
        device: flags.device.clone(),
        server_args: Vec::new(),
        show_progress: !flags.no_progress,
        replay: flags
            .replay
            .as_deref()
            .map(ReplaySources::parse)
            .transpose()?,
    })
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        BenchCommand::Serve(a) => run_serve(a),
    }
}

fn run_serve(args: ServeArgs) -> Result<()> {
    let model = match args.model {
        Some(m) => m,
        None => discover_model(&args.base_url).with_context(|| {
            format!(
                "no --model given and {}/v1/models lists none",
                args.base_url
            )
        })?,
    };
    let config = bench_config(&args.bench, args.base_url, model, args.label, args.k)?;
    let file = run_bench(&config)?;
    println!("{}", summary_table(&file));
    if let Some(path) = args.result_json {
        file.write(&path)?;
        println!("results: {}", path.display());
    }
    Ok(())
}

pub fn run_tune(args: TuneArgs) -> Result<()> {
    let wring_bin = std::env::current_exe().context("locating the wring executable")?;
    // The request model name comes from each server's /v1/models (empty = discover).
    let bench = bench_config(
        &args.bench,
        String::new(),
        String::new(),
        String::new(),
        None,
    )?;
    let configs = with_weights(parse_config_list(&args.configs)?, &args.weights)?;
    let gate_verdicts = gate_verdicts(args.model.as_deref(), &configs);
    let config = TuneConfig {
        wring_bin,
        model: args.model,
        configs,
        gate_verdicts,
        bench,
        out_dir: args.out,
        serve_args: args.serve_args,
        startup_timeout: Duration::from_secs(args.startup_timeout_s),
        baseline: args.baseline,
        share_servers: args.share_servers,
    };
    let outcome = tune::run_tune(&config)?;
    for path in &outcome.result_files {
        println!("result: {}", path.display());
    }
    for (name, error) in &outcome.failed_configs {
        println!("FAILED configuration {name}: {error}");
    }
    for p in &outcome.profile_paths {
        println!(
            "best-K profile: {} (use: wring serve --k-policy profile:{})",
            p.display(),
            p.display()
        );
    }
    if let Some(p) = &outcome.report_path {
        println!("report: {}", p.display());
    }
    Ok(())
}

/// The `wring gate` verdicts recorded for `model` (`wring gate --save-verdict`, or shipped
/// for the default model) of every non-reference weight format the configurations name.
fn gate_verdicts(model: Option<&str>, configs: &[ServeConfig]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let formats: Vec<&str> = configs
        .iter()
        .filter_map(|c| c.weights.as_deref())
        .filter(|w| !REFERENCE_WEIGHTS.contains(w))
        .collect();
    if formats.is_empty() {
        return out;
    }
    let verdicts = match wring_model::resolve_model_path(model) {
        Ok(path) => wring_gate::verdicts::load(&path),
        Err(e) => {
            tracing::warn!("no gate verdicts: the model path does not resolve ({e:#})");
            None
        }
    };
    let Some((v, from)) = verdicts else {
        return out;
    };
    for w in formats {
        if let Some(f) = v.formats.get(w) {
            out.insert(
                w.to_string(),
                format!("{}: {} ({from})", f.verdict, f.summary),
            );
        }
    }
    out
}

pub fn run_report(args: ReportArgs) -> Result<()> {
    let files = wring_bench::report::load_results(&args.results)?;
    let path = wring_bench::report::write_report(&files, &args.out, &args.baseline)?;
    println!("{}", std::fs::read_to_string(&path)?);
    println!("report: {}", path.display());
    Ok(())
}
