//! In-process speculative-decoding benchmark: output tokens/s per corpus and
//! configuration, with acceptance, on the real trace prompts.
//!
//! cargo run -p wring-engine --example spec_bench -- \
//!     --prompts 4 --max-tokens 64 --concurrency 1,8 --configs none,ngram:fixed:8,suffix:fixed:8
//!
//! A config is `none`, or `METHOD:POLICY[:nopad]` with METHOD suffix|ngram and
//! POLICY fixed:K|dynamic|adaptive. The suffix global tree is reset before every
//! cell (cold) unless --warm is given. Prompts are the pre-tokenised real prompts
//! of ../shared/traces/smollm2_llamacpp_greedy_96.jsonl (16 per corpus).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use wring_engine::{
    Engine, EngineConfig, EngineEvent, GenerateRequest, KPolicy, ProposerKind, SpecConfig,
};
use wring_model::{ModelSpec, RunnerOptions};

struct Args {
    prompts: usize,
    max_tokens: u32,
    concurrency: Vec<usize>,
    configs: Vec<String>,
    warm: bool,
    corpora: Option<Vec<String>>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        prompts: 4,
        max_tokens: 64,
        concurrency: vec![1, 8],
        configs: vec![
            "none".into(),
            "ngram:fixed:8".into(),
            "suffix:fixed:8".into(),
        ],
        warm: false,
        corpora: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--prompts" => a.prompts = val()?.parse()?,
            "--max-tokens" => a.max_tokens = val()?.parse()?,
            "--concurrency" => {
                a.concurrency = val()?
                    .split(',')
                    .map(|s| s.parse())
                    .collect::<Result<_, _>>()?
            }
            "--configs" => a.configs = val()?.split(',').map(String::from).collect(),
            "--corpora" => a.corpora = Some(val()?.split(',').map(String::from).collect()),
            "--warm" => a.warm = true,
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

fn spec_config(name: &str) -> Result<SpecConfig> {
    if name == "none" {
        return Ok(SpecConfig::default());
    }
    let (method, rest) = name
        .split_once(':')
        .context("config must be none or METHOD:POLICY")?;
    let (policy, pad) = match rest.strip_suffix(":nopad") {
        Some(p) => (p, false),
        None => (rest, true),
    };
    Ok(SpecConfig {
        method: method.parse::<ProposerKind>()?,
        k_policy: KPolicy::parse(policy)?,
        pad,
        ..SpecConfig::default()
    })
}

fn shared_dir() -> PathBuf {
    std::env::var_os("WRING_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
}

fn load_prompts(n: usize) -> Result<BTreeMap<String, Vec<Vec<u32>>>> {
    let path = shared_dir().join("traces/smollm2_llamacpp_greedy_96.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut by: BTreeMap<String, Vec<Vec<u32>>> = BTreeMap::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l)?;
        let c = v["corpus"].as_str().context("corpus")?.to_string();
        let ids = v["prompt_ids"]
            .as_array()
            .context("prompt_ids")?
            .iter()
            .map(|x| x.as_u64().map(|x| x as u32).context("id"))
            .collect::<Result<Vec<u32>>>()?;
        let e = by.entry(c).or_default();
        if e.len() < n {
            e.push(ids);
        }
    }
    Ok(by)
}

#[derive(Default, Clone, Copy)]
struct Cell {
    tokens: u64,
    secs: f64,
    drafted: u64,
    accepted: u64,
    spec_steps: u64,
}

fn run_cell(
    engine: &wring_engine::EngineHandle,
    prompts: &[Vec<u32>],
    conc: usize,
    max_tokens: u32,
    corpus: &str,
) -> Result<Cell> {
    let mut cell = Cell::default();
    let t0 = Instant::now();
    // Closed loop: keep `conc` requests in flight.
    let mut queue = prompts.iter();
    let mut inflight = Vec::new();
    loop {
        while inflight.len() < conc {
            let Some(p) = queue.next() else { break };
            let mut r = GenerateRequest {
                request_id: corpus.into(),
                prompt_ids: p.clone(),
                max_tokens,
                ..Default::default()
            };
            r.spec.workload = Some(corpus.into());
            inflight.push(engine.submit(r)?);
        }
        if inflight.is_empty() {
            break;
        }
        // Drain events without blocking on one request.
        let mut i = 0;
        let mut progressed = false;
        while i < inflight.len() {
            match inflight[i].events.try_recv() {
                Ok(EngineEvent::Finished { usage, .. }) => {
                    cell.tokens += usage.completion_tokens as u64;
                    cell.drafted += usage.draft_tokens as u64;
                    cell.accepted += usage.accepted_tokens as u64;
                    cell.spec_steps += usage.spec_steps as u64;
                    inflight.swap_remove(i);
                    progressed = true;
                }
                Ok(EngineEvent::Error { message }) => bail!("request failed: {message}"),
                Ok(_) => {
                    progressed = true;
                    i += 1;
                }
                Err(_) => i += 1,
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    cell.secs = t0.elapsed().as_secs_f64();
    Ok(cell)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let prompts = load_prompts(args.prompts)?;
    let corpora: Vec<String> = match &args.corpora {
        Some(c) => c.clone(),
        None => prompts.keys().cloned().collect(),
    };
    println!(
        "| config | conc | {} | geomean |",
        corpora
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|---|{}---|", "---|".repeat(corpora.len()));
    for name in &args.configs {
        let spec = spec_config(name)?;
        let max_conc = *args.concurrency.iter().max().unwrap_or(&1);
        let cfg = EngineConfig {
            max_num_seqs: max_conc,
            spec,
            ..EngineConfig::default()
        };
        let model = wring_model::load_model(&ModelSpec::default())?;
        let opts = RunnerOptions {
            kv_cache_bytes: 1 << 30,
            max_model_len: 4096,
            ..RunnerOptions::default()
        };
        let (engine, _) = Engine::start(model, opts, cfg)?;
        for &conc in &args.concurrency {
            let mut cols = Vec::new();
            let mut log_sum = 0.0;
            for c in &corpora {
                if !args.warm {
                    engine.reset_suffix_cache();
                }
                let ps = prompts
                    .get(c)
                    .with_context(|| format!("no prompts for corpus {c}"))?;
                let cell = run_cell(&engine, ps, conc, args.max_tokens, c)?;
                let tps = cell.tokens as f64 / cell.secs;
                log_sum += tps.ln();
                if cell.drafted > 0 {
                    let rate = cell.accepted as f64 / cell.drafted as f64;
                    let mean_len = cell.accepted as f64 / cell.spec_steps.max(1) as f64;
                    cols.push(format!(
                        "{tps:.1} (acc {:.0}%, len {mean_len:.2})",
                        100.0 * rate
                    ));
                } else {
                    cols.push(format!("{tps:.1}"));
                }
            }
            let geo = (log_sum / corpora.len() as f64).exp();
            println!("| {name} | {conc} | {} | {geo:.1} |", cols.join(" | "));
        }
        engine.shutdown(Duration::from_secs(1));
    }
    Ok(())
}
