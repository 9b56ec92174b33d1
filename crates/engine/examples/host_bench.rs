//! The engine's host time per step with the model taken out: every step's "forward" is
//! a scripted runner that answers each row with the real greedy continuation of its
//! prompt (llama.cpp's, from the trace file) after sleeping a fixed model time, so what
//! is left to measure is the host's own work — drafting from the real suffix trees,
//! scheduling, verifying, detokenising with the real tokenizer, streaming — at the
//! shapes a GPU serves (concurrency 32, padded K). On the H200 that host work is on the
//! critical path between two graph replays; this example is how to profile it here
//! (e.g. `perf record -t <wring-engine thread>`), where no GPU is.
//!
//! cargo run --release -p wring-engine --example host_bench -- \
//!     --concurrency 32 --configs none,suffix:fixed:4 --model-ms 1.2 --rounds 3
//!
//! A config is `none` or `suffix:fixed:K` (padded; `:arctic` after it: ArcticInference's
//! draft caps instead of the padded ones the CLI uses). Each round sends every trace prompt
//! once (closed loop: a finished stream is replaced at once) and resets the suffix cache
//! after, so later rounds do not find their own outputs in the global tree.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use wring_engine::{
    Engine, EngineConfig, EngineEvent, GenerateRequest, KPolicy, MetricsSnapshot, ProposerKind,
    ServedModel, SpecConfig, SuffixParams, HOST_PHASES,
};
use wring_model::{Logits, ModelRunner, ModelSpec, StepInput};

struct Args {
    concurrency: usize,
    configs: Vec<String>,
    model_ms: f64,
    rounds: usize,
    max_tokens: u32,
    trace: PathBuf,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        concurrency: 32,
        configs: vec!["none".into(), "suffix:fixed:4".into()],
        model_ms: 1.2,
        rounds: 3,
        max_tokens: 96,
        trace: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/traces/smollm2_llamacpp_greedy_96.jsonl"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--concurrency" => a.concurrency = val()?.parse()?,
            "--configs" => a.configs = val()?.split(',').map(String::from).collect(),
            "--model-ms" => a.model_ms = val()?.parse()?,
            "--rounds" => a.rounds = val()?.parse()?,
            "--max-tokens" => a.max_tokens = val()?.parse()?,
            "--trace" => a.trace = val()?.into(),
            _ => bail!("unknown flag {flag} (--concurrency --configs --model-ms --rounds --max-tokens --trace)"),
        }
    }
    Ok(a)
}

/// One trace record: its prompt and the greedy tokens that follow it.
struct Script {
    prompt: Vec<u32>,
    /// prompt + output: `tokens[p + 1]` is the answer for the row at position p.
    tokens: Vec<u32>,
}

fn load_scripts(path: &PathBuf) -> Result<Vec<Script>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the trace {} (../shared/traces)", path.display()))?;
    let ids = |v: &serde_json::Value, key: &str| -> Result<Vec<u32>> {
        v[key]
            .as_array()
            .with_context(|| format!("trace record without {key}"))?
            .iter()
            .map(|t| t.as_u64().map(|t| t as u32).context("token id"))
            .collect()
    };
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("trace line {}", n + 1))?;
        let prompt = ids(&v, "prompt_ids")?;
        let mut tokens = prompt.clone();
        tokens.extend(ids(&v, "output_ids")?);
        out.push(Script { prompt, tokens });
    }
    ensure!(
        !out.is_empty(),
        "the trace {} holds no records",
        path.display()
    );
    Ok(out)
}

/// The runner: KV "contents" are the tokens themselves (a shadow pool), a sequence is
/// known by a window of its prompt past the prefix every prompt shares, and each logit
/// row gets its script's next token.
struct ScriptedRunner {
    scripts: Arc<Vec<Script>>,
    by_window: HashMap<Vec<u32>, usize>,
    window_at: usize,
    window_len: usize,
    shadow: Vec<u32>,
    block_size: usize,
    vocab: usize,
    eos: u32,
    model_time: Duration,
}

impl ScriptedRunner {
    fn new(scripts: Arc<Vec<Script>>, vocab: usize, eos: u32, model_time: Duration) -> Self {
        // The prefix every prompt shares (the system turn): its length.
        let first = &scripts[0].prompt;
        let shared = scripts
            .iter()
            .map(|s| {
                first
                    .iter()
                    .zip(&s.prompt)
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .min()
            .unwrap_or(0);
        let window_len = 24;
        let mut by_window = HashMap::new();
        for (i, s) in scripts.iter().enumerate() {
            let end = (shared + window_len).min(s.prompt.len());
            by_window.entry(s.prompt[shared..end].to_vec()).or_insert(i);
        }
        let block_size = 16;
        let num_blocks = 8192;
        Self {
            scripts,
            by_window,
            window_at: shared,
            window_len,
            shadow: vec![0; num_blocks * block_size],
            block_size,
            vocab,
            eos,
            model_time,
        }
    }

    fn answer(&mut self, step: &StepInput) -> Vec<u32> {
        let bs = self.block_size;
        for s in &step.seqs {
            for i in s.query_start..s.query_start + s.query_len {
                let pos = step.positions[i] as usize;
                self.shadow[s.block_table[pos / bs] as usize * bs + pos % bs] = step.tokens[i];
            }
        }
        let mut ids = Vec::with_capacity(step.logit_rows.len());
        for &row in &step.logit_rows {
            let s = step
                .seqs
                .iter()
                .find(|s| row >= s.query_start && row < s.query_start + s.query_len)
                .expect("a logit row inside a sequence");
            let end = (self.window_at + self.window_len).min(s.context_len);
            let window: Vec<u32> = (self.window_at..end)
                .map(|p| self.shadow[s.block_table[p / bs] as usize * bs + p % bs])
                .collect();
            let pos = step.positions[row] as usize;
            let next = self
                .by_window
                .get(&window)
                .and_then(|&i| self.scripts[i].tokens.get(pos + 1).copied());
            ids.push(next.unwrap_or(self.eos));
        }
        std::thread::sleep(self.model_time);
        ids
    }
}

impl ModelRunner for ScriptedRunner {
    fn forward(&mut self, step: &StepInput) -> Result<Logits> {
        let ids = self.answer(step);
        let mut data = vec![0.0f32; ids.len() * self.vocab];
        for (r, &t) in ids.iter().enumerate() {
            data[r * self.vocab + t as usize] = 1.0;
        }
        Ok(Logits {
            rows: ids.len(),
            vocab: self.vocab,
            data,
        })
    }
    fn forward_greedy(&mut self, step: &StepInput) -> Result<Option<Vec<u32>>> {
        Ok(Some(self.answer(step)))
    }
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn num_blocks(&self) -> usize {
        self.shadow.len() / self.block_size
    }
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn device_name(&self) -> String {
        "scripted".into()
    }
}

fn spec_of(config: &str) -> Result<SpecConfig> {
    if config == "none" {
        return Ok(SpecConfig::default());
    }
    let Some(rest) = config.strip_prefix("suffix:fixed:") else {
        bail!("unknown config {config:?} (none, suffix:fixed:K[:arctic])");
    };
    let (k, suffix) = match rest.strip_suffix(":arctic") {
        Some(k) => (k, SuffixParams::default()),
        None => (rest, SuffixParams::for_padding(true)),
    };
    Ok(SpecConfig {
        method: ProposerKind::Suffix,
        k_policy: KPolicy::Fixed(k.parse().context("K")?),
        pad: true,
        suffix,
        ..SpecConfig::default()
    })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let scripts = Arc::new(load_scripts(&args.trace)?);
    let model = wring_model::load_model(&ModelSpec::default())
        .context("the default model's tokenizer (run `wring pull`)")?;
    let vocab = model.config.vocab_size;
    let eos = *model
        .eos_token_ids
        .first()
        .context("the model names no EOS token")?;
    println!(
        "{} prompts, concurrency {}, model time {} ms a step, {} rounds, max_tokens {}",
        scripts.len(),
        args.concurrency,
        args.model_ms,
        args.rounds,
        args.max_tokens
    );
    println!(
        "| config | steps | tokens/step | host ms/step | {} | admin ms/step | accepted/draft | wall s |",
        HOST_PHASES.join(" | ")
    );
    println!(
        "|---|---:|---:|---:|{}---:|---:|---:|",
        "---:|".repeat(HOST_PHASES.len())
    );
    for config in &args.configs {
        let runner = ScriptedRunner::new(
            scripts.clone(),
            vocab,
            eos,
            Duration::from_secs_f64(args.model_ms / 1e3),
        );
        let cfg = EngineConfig {
            max_num_seqs: args.concurrency,
            max_model_len: 4096,
            spec: spec_of(config)?,
            ..EngineConfig::default()
        };
        let served = ServedModel::of(&model, 4096);
        let (engine, _info) = Engine::start_with_runner(served, Box::new(runner), cfg)?;
        let before = engine.metrics();
        let t0 = Instant::now();
        for _ in 0..args.rounds {
            let next = Arc::new(AtomicUsize::new(0));
            let errors = Arc::new(Mutex::new(Vec::new()));
            std::thread::scope(|s| {
                for _ in 0..args.concurrency {
                    let (engine, next, errors, scripts) = (&engine, &next, &errors, &scripts);
                    s.spawn(move || loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(script) = scripts.get(i) else { break };
                        let req = GenerateRequest {
                            request_id: format!("host-bench-{i}"),
                            prompt_ids: script.prompt.clone(),
                            max_tokens: args.max_tokens,
                            ..Default::default()
                        };
                        match engine.submit(req) {
                            Ok(mut h) => {
                                while let Some(ev) = h.events.blocking_recv() {
                                    match ev {
                                        EngineEvent::Finished { .. } => break,
                                        EngineEvent::Error { message } => {
                                            errors.lock().unwrap().push(message);
                                            break;
                                        }
                                        _ => {}
                                    }
                                }
                            }
                            Err(e) => errors.lock().unwrap().push(format!("{e:?}")),
                        }
                    });
                }
            });
            let errors = errors.lock().unwrap();
            ensure!(
                errors.is_empty(),
                "{config}: {} requests failed: {:?}",
                errors.len(),
                errors[0]
            );
            engine.reset_suffix_cache();
        }
        let wall = t0.elapsed().as_secs_f64();
        print_row(config, &before, &engine.metrics(), wall);
        engine.shutdown(Duration::from_secs(5));
    }
    Ok(())
}

fn print_row(config: &str, a: &MetricsSnapshot, b: &MetricsSnapshot, wall: f64) {
    let steps = (b.steps - a.steps).max(1) as f64;
    let per = |x: f64| format!("{:.4}", x * 1e3 / steps);
    let phases: Vec<String> = (0..HOST_PHASES.len())
        .map(|i| per(b.step_host_phase_seconds[i] - a.step_host_phase_seconds[i]))
        .collect();
    let drafted = (b.spec_num_draft_tokens - a.spec_num_draft_tokens).max(1) as f64;
    println!(
        "| {config} | {} | {:.1} | {} | {} | {} | {:.2} | {:.2} |",
        b.steps - a.steps,
        (b.generation_tokens - a.generation_tokens) as f64 / steps,
        per(b.step_host_seconds - a.step_host_seconds),
        phases.join(" | "),
        per(b.admin_seconds - a.admin_seconds),
        (b.spec_num_accepted_tokens - a.spec_num_accepted_tokens) as f64 / drafted,
        wall
    );
}
