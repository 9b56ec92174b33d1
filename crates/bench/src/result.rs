//! Result files: what one `wring bench serve` invocation measured, as JSON. Per-corpus results
//! use the keys of `vllm bench serve` where they exist, plus the spec-decode fields.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::machine::MachineInfo;
use crate::server_probe::SpecStats;
use crate::stats::LatencySummary;

/// Marks our files among other JSON in a results directory.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchFile {
    pub wring_bench: u32,
    pub meta: BenchMeta,
    pub results: Vec<CorpusResult>,
}

impl BenchFile {
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a wring bench result", path.display()))
    }
}

/// Everything a reader needs to judge the numbers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchMeta {
    pub date: String,
    /// Configuration name (e.g. `suffix-k8`, `nospec`, `llama.cpp`).
    pub label: String,
    /// Draft length K of the configuration when fixed (`None` for no speculation or dynamic K).
    pub k: Option<u32>,
    pub base_url: String,
    pub backend: String,
    pub model_id: String,
    pub device: String,
    pub machine: MachineInfo,
    pub commit: String,
    pub wring_version: String,
    /// `reset before each run` or `warm (--warm-cache)`.
    pub cache_policy: String,
    pub max_concurrency: usize,
    pub max_tokens: u32,
    pub temperature: f32,
    pub ignore_eos: bool,
    pub num_prompts: usize,
    pub runs: usize,
    pub warmup: usize,
    /// Largest accepted MAD/median of output throughput over runs before a run is redone.
    pub max_spread: f64,
    pub seed: u64,
    /// Server flags, when the benchmark launched the server (tune).
    pub server_args: Vec<String>,
    /// The `wring gate` verdict for this model in the configuration's weight format, when the
    /// configuration names one that is not a reference (`PASS: …` / `FAIL: …`; None: none
    /// recorded). Set by `wring tune`, so a report rebuilt from files alone still has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_verdict: Option<String>,
    /// `--replay`: the recorded-output sources asked for (None: the model's own tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
}

/// One corpus: the median run's metrics at the top level (vLLM keys), every run below.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CorpusResult {
    pub corpus: String,
    pub corpus_label: String,
    /// Records read from the corpus file(s), and whether the file was cut off mid-record.
    pub corpus_records: usize,
    pub corpus_truncated: bool,
    /// Which recorded outputs this corpus's requests replayed (`reference`, `own` or
    /// `reference+own`); None when the model chose its own tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_source: Option<String>,
    #[serde(flatten)]
    pub median_run: RunMetrics,
    pub output_throughput_median: f64,
    pub output_throughput_mad: f64,
    /// MAD / median of output throughput over the accepted runs.
    pub spread: f64,
    pub spread_exceeded: bool,
    /// Failed requests over every run, rejected ones included.
    pub failed_all_runs: usize,
    pub runs: Vec<RunMetrics>,
    /// Runs replaced because the spread was too wide (kept, never silently dropped).
    pub rejected_runs: Vec<RunMetrics>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunMetrics {
    pub run_index: usize,
    pub duration: f64,
    pub completed: usize,
    pub failed: usize,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub mean_ttft_ms: Option<f64>,
    pub median_ttft_ms: Option<f64>,
    pub std_ttft_ms: Option<f64>,
    pub p90_ttft_ms: Option<f64>,
    pub p99_ttft_ms: Option<f64>,
    pub mean_tpot_ms: Option<f64>,
    pub median_tpot_ms: Option<f64>,
    pub std_tpot_ms: Option<f64>,
    pub p90_tpot_ms: Option<f64>,
    pub p99_tpot_ms: Option<f64>,
    pub mean_itl_ms: Option<f64>,
    pub median_itl_ms: Option<f64>,
    pub std_itl_ms: Option<f64>,
    pub p90_itl_ms: Option<f64>,
    pub p99_itl_ms: Option<f64>,
    /// Per stream, the longest gap between two of its chunks (a stall: e.g. a long prompt's
    /// prefill in the same step): the median, p99 and max over the run's streams.
    #[serde(default)]
    pub median_stream_max_gap_ms: Option<f64>,
    #[serde(default)]
    pub p99_stream_max_gap_ms: Option<f64>,
    #[serde(default)]
    pub max_gap_ms: Option<f64>,
    pub mean_e2el_ms: Option<f64>,
    pub median_e2el_ms: Option<f64>,
    pub std_e2el_ms: Option<f64>,
    pub p90_e2el_ms: Option<f64>,
    pub p99_e2el_ms: Option<f64>,
    /// Spec-decode counters from `/metrics` deltas; absent when the server has none.
    #[serde(flatten)]
    pub spec: Option<SpecStats>,
    /// `reset`, `warm (--warm-cache)` or `unknown (...)`.
    pub cache_state: String,
    /// Requests whose stream had no `usage` (token counts estimated from chunks).
    pub usage_missing: usize,
    /// Distinct error messages with their counts (first few).
    pub errors: Vec<(String, usize)>,
}

impl RunMetrics {
    pub fn set_ttft(&mut self, s: Option<LatencySummary>) {
        (
            self.mean_ttft_ms,
            self.median_ttft_ms,
            self.std_ttft_ms,
            self.p90_ttft_ms,
            self.p99_ttft_ms,
        ) = split(s);
    }
    pub fn set_tpot(&mut self, s: Option<LatencySummary>) {
        (
            self.mean_tpot_ms,
            self.median_tpot_ms,
            self.std_tpot_ms,
            self.p90_tpot_ms,
            self.p99_tpot_ms,
        ) = split(s);
    }
    pub fn set_itl(&mut self, s: Option<LatencySummary>) {
        (
            self.mean_itl_ms,
            self.median_itl_ms,
            self.std_itl_ms,
            self.p90_itl_ms,
            self.p99_itl_ms,
        ) = split(s);
    }
    pub fn set_e2el(&mut self, s: Option<LatencySummary>) {
        (
            self.mean_e2el_ms,
            self.median_e2el_ms,
            self.std_e2el_ms,
            self.p90_e2el_ms,
            self.p99_e2el_ms,
        ) = split(s);
    }
}

type Five = (
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);

fn split(s: Option<LatencySummary>) -> Five {
    match s {
        Some(s) => (
            Some(s.mean),
            Some(s.median),
            Some(s.std),
            Some(s.p90),
            Some(s.p99),
        ),
        None => (None, None, None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_metrics_use_vllm_keys_and_flatten_spec() {
        let mut run = RunMetrics {
            completed: 3,
            output_throughput: 12.5,
            ..Default::default()
        };
        run.set_ttft(LatencySummary::of(&[1.0, 3.0]));
        let v = serde_json::to_value(&run).unwrap();
        for key in [
            "completed",
            "failed",
            "output_throughput",
            "request_throughput",
            "mean_ttft_ms",
            "p99_ttft_ms",
            "median_tpot_ms",
            "mean_itl_ms",
            "p90_e2el_ms",
            "total_output_tokens",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["mean_ttft_ms"], 2.0);
        assert!(v.get("spec_acceptance_rate").is_none());
        run.spec = Some(SpecStats {
            spec_acceptance_rate: Some(0.5),
            ..Default::default()
        });
        let v = serde_json::to_value(&run).unwrap();
        assert_eq!(v["spec_acceptance_rate"], 0.5);
        let back: RunMetrics = serde_json::from_value(v).unwrap();
        assert_eq!(back.spec.unwrap().spec_acceptance_rate, Some(0.5));
    }
}
