//! `wring bench serve`: per corpus, warm up, then repeated closed-loop runs with the cache reset
//! before each, the spread over runs checked, and every number kept.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::corpus::{Corpus, CorpusSource, LoadedCorpus, Prompt};
use crate::machine::{git_commit, utc_now, MachineInfo};
use crate::replay::{http_client, progress_bar, run_closed_loop, RequestConfig, RequestOutcome};
use crate::replay_source::{sources_used, ReplaySources};
use crate::result::{BenchFile, BenchMeta, CorpusResult, RunMetrics, FORMAT_VERSION};
use crate::server_probe::{reset_suffix_cache, scrape_spec, spec_delta};
use crate::stats::{mad, median, percentile, LatencySummary};

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub request: RequestConfig,
    pub corpora: Vec<Corpus>,
    pub source: CorpusSource,
    pub concurrency: usize,
    pub num_prompts: usize,
    pub runs: usize,
    pub warmup: usize,
    /// Keep the server's suffix cache between runs instead of resetting it.
    pub warm_cache: bool,
    /// Largest accepted MAD/median of output tok/s over runs before the worst run is redone.
    pub max_spread: f64,
    /// How many runs may be redone per corpus because of the spread.
    pub max_reruns: usize,
    pub seed: u64,
    /// Prompts longer than this many characters are skipped (0 = keep all).
    pub max_prompt_chars: usize,
    pub label: String,
    pub k: Option<u32>,
    pub device: String,
    pub server_args: Vec<String>,
    pub show_progress: bool,
    /// Replay recorded outputs (`--replay`; the server must run `--replay-outputs`).
    pub replay: Option<ReplaySources>,
}

/// Runs the benchmark over every configured corpus (blocking; owns its tokio runtime).
pub fn run_bench(config: &BenchConfig) -> Result<BenchFile> {
    if config.concurrency == 0 || config.num_prompts == 0 || config.runs == 0 {
        bail!("--concurrency, --num-prompts and --runs must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run_bench_async(config))
}

pub async fn run_bench_async(config: &BenchConfig) -> Result<BenchFile> {
    let client = http_client(config.concurrency)?;
    let mut results = Vec::new();
    let mut without_recordings = Vec::new();
    for &corpus in &config.corpora {
        // Under --replay a corpus none of whose prompts has a recording is left out (its
        // reason logged); the run fails only when every corpus is.
        let loaded = match load_prompts(config, corpus) {
            Ok(l) => l,
            Err(e) if config.replay.is_some() && config.corpora.len() > 1 => {
                tracing::warn!("{corpus} left out: {e:#}");
                without_recordings.push(format!("{e:#}"));
                continue;
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            "{corpus}: {} prompts ({} records read{})",
            loaded.prompts.len(),
            loaded.records,
            if loaded.truncated {
                ", file truncated mid-record: stopped at the last complete one"
            } else {
                ""
            }
        );
        results.push(bench_corpus(config, &client, &loaded).await?);
    }
    if results.is_empty() {
        bail!("no corpus could run: {}", without_recordings.join("; "));
    }
    Ok(BenchFile {
        wring_bench: FORMAT_VERSION,
        meta: meta_for(config),
        results,
    })
}

fn load_prompts(config: &BenchConfig, corpus: Corpus) -> Result<LoadedCorpus> {
    // Load extra records so that skipping over-long prompts (or prompts without a recorded
    // output) still leaves num_prompts.
    let limit = if config.max_prompt_chars > 0 || config.replay.is_some() {
        None
    } else {
        Some(config.num_prompts + config.warmup)
    };
    let mut loaded = config.source.load(corpus, limit, config.seed)?;
    if config.max_prompt_chars > 0 {
        let before = loaded.prompts.len();
        loaded
            .prompts
            .retain(|p| p.text.chars().count() <= config.max_prompt_chars);
        loaded.skipped += before - loaded.prompts.len();
    }
    if let Some(replay) = &config.replay {
        let left_out = replay.attach(&mut loaded.prompts);
        if left_out > 0 {
            tracing::info!(
                "{corpus}: {left_out} prompts have no recorded output under --replay {replay}"
            );
        }
        loaded.skipped += left_out;
        if loaded.prompts.is_empty() {
            bail!(
                "corpus {corpus} has no prompt with a recorded output under --replay {replay}{}",
                if corpus.has_references() {
                    ""
                } else {
                    " (it comes with no reference responses: add own:FILE)"
                }
            );
        }
    }
    if loaded.prompts.is_empty() {
        bail!("corpus {corpus} gave no usable prompts");
    }
    Ok(loaded)
}

fn meta_for(config: &BenchConfig) -> BenchMeta {
    BenchMeta {
        date: utc_now(),
        label: config.label.clone(),
        k: config.k,
        base_url: config.request.base_url.clone(),
        backend: "openai-chat".into(),
        model_id: config.request.model.clone(),
        device: config.device.clone(),
        machine: MachineInfo::detect(),
        commit: git_commit(),
        wring_version: env!("CARGO_PKG_VERSION").into(),
        cache_policy: if config.warm_cache {
            "warm (--warm-cache)".into()
        } else {
            "reset before each run".into()
        },
        max_concurrency: config.concurrency,
        max_tokens: config.request.max_tokens,
        temperature: config.request.temperature,
        ignore_eos: config.request.ignore_eos,
        num_prompts: config.num_prompts,
        runs: config.runs,
        warmup: config.warmup,
        max_spread: config.max_spread,
        seed: config.seed,
        server_args: config.server_args.clone(),
        gate_verdict: None,
        replay: config.replay.as_ref().map(|r| r.to_string()),
    }
}

async fn bench_corpus(
    config: &BenchConfig,
    client: &reqwest::Client,
    loaded: &LoadedCorpus,
) -> Result<CorpusResult> {
    let corpus = loaded.corpus;
    let tagged = |prompts: &[Prompt]| -> Vec<(Prompt, String)> {
        prompts
            .iter()
            .map(|p| (p.clone(), corpus.tag().to_string()))
            .collect()
    };
    // Warm-up prompts come after the measured ones so they do not pre-fill any cache with them.
    let measured: Vec<Prompt> = loaded
        .prompts
        .iter()
        .take(config.num_prompts)
        .cloned()
        .collect();
    let warmup: Vec<Prompt> = loaded
        .prompts
        .iter()
        .skip(measured.len())
        .take(config.warmup)
        .cloned()
        .collect();
    if measured.len() < config.num_prompts {
        tracing::warn!(
            "{corpus}: only {} prompts available (asked for {})",
            measured.len(),
            config.num_prompts
        );
    }
    if config.warmup > 0 {
        let source = if warmup.is_empty() {
            &measured[..config.warmup.min(measured.len())]
        } else {
            &warmup[..]
        };
        let (outcomes, _) = run_closed_loop(
            client,
            &config.request,
            &tagged(source),
            config.concurrency,
            None,
        )
        .await;
        let failed = outcomes.iter().filter(|o| !o.ok()).count();
        if failed > 0 {
            tracing::warn!(
                "{corpus}: {failed} of {} warm-up requests failed",
                outcomes.len()
            );
        }
    }
    let requests = tagged(&measured);
    let mut runs = Vec::new();
    let mut rejected = Vec::new();
    let mut run_index = 0;
    while runs.len() < config.runs {
        runs.push(one_run(config, client, &requests, corpus, run_index).await);
        run_index += 1;
    }
    let mut reruns = 0;
    loop {
        let spread = spread_of(&runs);
        if spread <= config.max_spread || reruns >= config.max_reruns || runs.len() < 2 {
            break;
        }
        let worst = farthest_from_median(&runs);
        tracing::warn!(
            "{corpus}: spread {:.1}% > {:.1}%: redoing run {}",
            spread * 100.0,
            config.max_spread * 100.0,
            runs[worst].run_index
        );
        rejected.push(runs.remove(worst));
        runs.push(one_run(config, client, &requests, corpus, run_index).await);
        run_index += 1;
        reruns += 1;
    }
    let mut result = summarise(corpus, loaded, runs, rejected, config.max_spread);
    result.replay_source = sources_used(&measured);
    Ok(result)
}

async fn one_run(
    config: &BenchConfig,
    client: &reqwest::Client,
    requests: &[(Prompt, String)],
    corpus: Corpus,
    run_index: usize,
) -> RunMetrics {
    let root = config.request.root();
    let cache_state = if config.warm_cache {
        "warm (--warm-cache)".to_string()
    } else {
        reset_suffix_cache(client, &root, config.request.api_key.as_deref()).await
    };
    let before = scrape_spec(client, &root).await;
    let progress = config
        .show_progress
        .then(|| progress_bar(requests.len(), &format!("{corpus} #{}", run_index + 1)));
    let (outcomes, wall) = run_closed_loop(
        client,
        &config.request,
        requests,
        config.concurrency,
        progress.clone(),
    )
    .await;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let after = scrape_spec(client, &root).await;
    let mut metrics = metrics_of(&outcomes, wall, run_index);
    metrics.spec = before.zip(after).and_then(|(b, a)| spec_delta(&b, &a));
    metrics.cache_state = cache_state;
    metrics
}

/// Aggregates one run's request outcomes. Failed requests count in `failed` and `errors` only;
/// every latency and throughput is over successful requests.
pub fn metrics_of(outcomes: &[RequestOutcome], wall: Duration, run_index: usize) -> RunMetrics {
    let ok: Vec<&RequestOutcome> = outcomes.iter().filter(|o| o.ok()).collect();
    let duration = wall.as_secs_f64().max(1e-9);
    let input: u64 = ok.iter().map(|o| o.prompt_tokens).sum();
    let output: u64 = ok.iter().map(|o| o.output_tokens).sum();
    let ms = |v: f64| v * 1000.0;
    let ttft: Vec<f64> = ok.iter().map(|o| ms(o.ttft)).collect();
    let e2el: Vec<f64> = ok.iter().map(|o| ms(o.e2e)).collect();
    let tpot: Vec<f64> = ok
        .iter()
        .filter(|o| o.output_tokens > 1)
        .map(|o| ms((o.e2e - o.ttft) / (o.output_tokens - 1) as f64))
        .collect();
    let itl: Vec<f64> = ok
        .iter()
        .flat_map(|o| o.itl.iter().map(|v| ms(*v)))
        .collect();
    let max_gaps: Vec<f64> = ok.iter().filter_map(|o| o.max_gap.map(ms)).collect();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for e in outcomes.iter().filter_map(|o| o.error.as_ref()) {
        *errors.entry(e.clone()).or_default() += 1;
    }
    let mut errors: Vec<(String, usize)> = errors.into_iter().collect();
    errors.sort_by_key(|e| std::cmp::Reverse(e.1));
    errors.truncate(5);
    let mut m = RunMetrics {
        run_index,
        duration,
        completed: ok.len(),
        failed: outcomes.len() - ok.len(),
        total_input_tokens: input,
        total_output_tokens: output,
        request_throughput: ok.len() as f64 / duration,
        output_throughput: output as f64 / duration,
        total_token_throughput: (input + output) as f64 / duration,
        usage_missing: ok.iter().filter(|o| o.usage_missing).count(),
        errors,
        ..Default::default()
    };
    m.set_ttft(LatencySummary::of(&ttft));
    m.set_tpot(LatencySummary::of(&tpot));
    m.set_itl(LatencySummary::of(&itl));
    m.set_e2el(LatencySummary::of(&e2el));
    m.median_stream_max_gap_ms = median(&max_gaps);
    m.p99_stream_max_gap_ms = percentile(&max_gaps, 99.0);
    m.max_gap_ms = max_gaps.iter().copied().max_by(f64::total_cmp);
    m
}

/// MAD / median of output throughput (0 for fewer than two runs or a zero median).
pub fn spread_of(runs: &[RunMetrics]) -> f64 {
    let tps: Vec<f64> = runs.iter().map(|r| r.output_throughput).collect();
    match (median(&tps), mad(&tps)) {
        (Some(m), Some(d)) if m > 0.0 => d / m,
        _ => 0.0,
    }
}

fn farthest_from_median(runs: &[RunMetrics]) -> usize {
    let tps: Vec<f64> = runs.iter().map(|r| r.output_throughput).collect();
    let m = median(&tps).unwrap_or(0.0);
    (0..runs.len())
        .max_by(|&a, &b| (tps[a] - m).abs().total_cmp(&(tps[b] - m).abs()))
        .unwrap_or(0)
}

/// The median run (lower median for an even count) by output throughput.
fn median_run(runs: &[RunMetrics]) -> RunMetrics {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| {
        runs[a]
            .output_throughput
            .total_cmp(&runs[b].output_throughput)
    });
    runs[order[(order.len() - 1) / 2]].clone()
}

fn summarise(
    corpus: Corpus,
    loaded: &LoadedCorpus,
    runs: Vec<RunMetrics>,
    rejected: Vec<RunMetrics>,
    max_spread: f64,
) -> CorpusResult {
    let tps: Vec<f64> = runs.iter().map(|r| r.output_throughput).collect();
    let spread = spread_of(&runs);
    CorpusResult {
        corpus: corpus.tag().into(),
        corpus_label: corpus.label().into(),
        corpus_records: loaded.records,
        corpus_truncated: loaded.truncated,
        replay_source: None,
        median_run: median_run(&runs),
        output_throughput_median: median(&tps).unwrap_or(0.0),
        output_throughput_mad: mad(&tps).unwrap_or(0.0),
        spread,
        spread_exceeded: spread > max_spread,
        failed_all_runs: runs.iter().chain(&rejected).map(|r| r.failed).sum(),
        runs,
        rejected_runs: rejected,
    }
}

/// A one-screen summary of a result file.
pub fn summary_table(file: &BenchFile) -> String {
    use std::fmt::Write;
    let m = &file.meta;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "wring bench: {} | model {} | {} | concurrency {} | max_tokens {} | runs {} | cache: {}",
        m.label, m.model_id, m.base_url, m.max_concurrency, m.max_tokens, m.runs, m.cache_policy
    );
    let _ = writeln!(
        out,
        "{:<10} {:>9} {:>15} {:>7} {:>13} {:>9} {:>13} {:>13} {:>13} {:>7} {:>6}  cache",
        "corpus",
        "ok/fail",
        "out tok/s",
        "req/s",
        "TTFT med/p99",
        "TPOT med",
        "ITL med/p99",
        "gap p99/max",
        "E2E med/p99",
        "accept",
        "len"
    );
    for r in &file.results {
        let run = &r.median_run;
        let pair = |a: Option<f64>, b: Option<f64>| format!("{}/{}", fmt_ms(a), fmt_ms(b));
        let spec = run.spec.as_ref();
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>15} {:>7.2} {:>13} {:>9} {:>13} {:>13} {:>13} {:>7} {:>6}  {}",
            r.corpus,
            format!("{}/{}", run.completed, r.failed_all_runs),
            format!(
                "{:.1} ±{:.1}",
                r.output_throughput_median, r.output_throughput_mad
            ),
            run.request_throughput,
            pair(run.median_ttft_ms, run.p99_ttft_ms),
            fmt_ms(run.median_tpot_ms),
            pair(run.median_itl_ms, run.p99_itl_ms),
            pair(run.p99_stream_max_gap_ms, run.max_gap_ms),
            pair(run.median_e2el_ms, run.p99_e2el_ms),
            spec.and_then(|s| s.spec_acceptance_rate)
                .map_or("-".into(), |a| format!("{:.1}%", a * 100.0)),
            spec.and_then(|s| s.spec_mean_acceptance_length)
                .map_or("-".into(), |a| format!("{a:.2}")),
            run.cache_state,
        );
        if r.spread_exceeded {
            let _ = writeln!(
                out,
                "  ! {}: spread {:.1}% still above the limit after reruns",
                r.corpus,
                r.spread * 100.0
            );
        }
        for (error, count) in r.runs.iter().flat_map(|run| run.errors.iter()).take(3) {
            let _ = writeln!(out, "  ! {} failed: {error}", count);
        }
    }
    out
}

fn fmt_ms(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 10_000.0 => format!("{:.0}s", v / 1000.0),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ttft: f64, e2e: f64, tokens: u64, error: Option<&str>) -> RequestOutcome {
        RequestOutcome {
            id: "x".into(),
            error: error.map(String::from),
            prompt_tokens: 10,
            output_tokens: tokens,
            ttft,
            e2e,
            itl: vec![(e2e - ttft) / (tokens.max(2) - 1) as f64; tokens.saturating_sub(1) as usize],
            max_gap: (tokens > 1).then(|| (e2e - ttft) / (tokens - 1) as f64),
            usage_missing: false,
        }
    }

    #[test]
    fn failures_are_counted_not_averaged() {
        let outcomes = vec![
            outcome(0.1, 1.1, 11, None),
            outcome(0.3, 2.3, 21, None),
            RequestOutcome {
                error: Some("HTTP 500".into()),
                ..outcome(0.0, 0.0, 0, None)
            },
        ];
        let m = metrics_of(&outcomes, Duration::from_secs(4), 0);
        assert_eq!((m.completed, m.failed), (2, 1));
        assert_eq!(m.total_output_tokens, 32);
        assert!((m.output_throughput - 8.0).abs() < 1e-9);
        assert!((m.request_throughput - 0.5).abs() < 1e-9);
        assert!((m.mean_ttft_ms.unwrap() - 200.0).abs() < 1e-9);
        assert!((m.mean_tpot_ms.unwrap() - 100.0).abs() < 1e-9); // 1.0/10 and 2.0/20
        assert!((m.max_gap_ms.unwrap() - 100.0).abs() < 1e-9);
        let stalled = RequestOutcome {
            max_gap: Some(2.5),
            ..outcome(0.1, 3.1, 11, None)
        };
        let gaps = metrics_of(
            &[outcome(0.1, 1.1, 11, None), stalled],
            Duration::from_secs(4),
            0,
        );
        assert!((gaps.max_gap_ms.unwrap() - 2500.0).abs() < 1e-9);
        assert!((gaps.median_stream_max_gap_ms.unwrap() - 1300.0).abs() < 1e-9);
        assert_eq!(m.errors, vec![("HTTP 500".to_string(), 1)]);
    }

    #[test]
    fn all_failed_gives_no_latencies() {
        let m = metrics_of(
            &[outcome(0.0, 0.0, 0, Some("refused"))],
            Duration::from_secs(1),
            0,
        );
        assert_eq!(m.completed, 0);
        assert_eq!(m.mean_ttft_ms, None);
        assert_eq!(m.output_throughput, 0.0);
    }

    #[test]
    fn spread_and_median_run() {
        let runs: Vec<RunMetrics> = [100.0, 104.0, 80.0]
            .iter()
            .enumerate()
            .map(|(i, &t)| RunMetrics {
                run_index: i,
                output_throughput: t,
                ..Default::default()
            })
            .collect();
        // median 100, deviations 0,4,20 -> MAD 4 -> spread 0.04
        assert!((spread_of(&runs) - 0.04).abs() < 1e-12);
        assert_eq!(farthest_from_median(&runs), 2);
        assert_eq!(median_run(&runs).run_index, 0);
    }
}
