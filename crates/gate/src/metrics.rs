//! Per-position scores and their summary: the study's metrics (token match, max |Δ logprob|,
//! relative perplexity change) and llama.cpp's KL-divergence statistics (`--kl-divergence`:
//! mean/median/p99/max KLD, "same top token" rate, Δp percentiles, RMS Δp).
//!
//! Every log-softmax is computed in f64 from the f32 logits.

use anyhow::{ensure, Result};
use serde::Serialize;

/// One scored position: both models' distributions over the next token at the same prefix,
/// and the token that actually follows in the stream (`target`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PositionScore {
    /// log p_ref(target) (natural log).
    pub logprob_ref: f64,
    /// log p_cand(target).
    pub logprob_cand: f64,
    /// KL(ref ‖ cand) = Σ_v p_ref(v) (log p_ref(v) − log p_cand(v)), over the full vocabulary.
    pub kld: f64,
    /// Greedy (argmax) token of each model; ties go to the lowest id.
    pub top_ref: u32,
    pub top_cand: u32,
    pub target: u32,
}

impl PositionScore {
    /// p_cand(target) − p_ref(target).
    pub fn delta_p(&self) -> f64 {
        self.logprob_cand.exp() - self.logprob_ref.exp()
    }
    /// log p_cand(target) − log p_ref(target).
    pub fn delta_logprob(&self) -> f64 {
        self.logprob_cand - self.logprob_ref
    }
}

/// log-softmax of `logits` in f64.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    let lse = max + sum.ln();
    logits.iter().map(|&x| x as f64 - lse).collect()
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Scores one position from both models' logit rows.
pub fn score_position(
    ref_logits: &[f32],
    cand_logits: &[f32],
    target: u32,
) -> Result<PositionScore> {
    ensure!(
        ref_logits.len() == cand_logits.len(),
        "the reference has a vocabulary of {} tokens but the candidate {}: the models cannot be compared token by token",
        ref_logits.len(),
        cand_logits.len()
    );
    ensure!(
        (target as usize) < ref_logits.len(),
        "target token {target} is outside the vocabulary ({})",
        ref_logits.len()
    );
    ensure!(
        ref_logits.iter().chain(cand_logits).all(|x| x.is_finite()),
        "a model produced a non-finite logit"
    );
    let lr = log_softmax(ref_logits);
    let lc = log_softmax(cand_logits);
    let kld = lr
        .iter()
        .zip(&lc)
        .map(|(&a, &b)| a.exp() * (a - b))
        .sum::<f64>()
        // Rounding can leave an exact-equal pair a hair below zero.
        .max(0.0);
    Ok(PositionScore {
        logprob_ref: lr[target as usize],
        logprob_cand: lc[target as usize],
        kld,
        top_ref: argmax(ref_logits),
        top_cand: argmax(cand_logits),
        target,
    })
}

/// Percentiles of Δp, llama.cpp's set.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeltaPPercentiles {
    pub min: f64,
    pub p1: f64,
    pub p5: f64,
    pub p10: f64,
    pub median: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// Summary over a set of positions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub positions: usize,
    /// Share of positions whose candidate argmax equals the stream's next token (the study's
    /// greedy token match; on reference continuations the next token is the reference's argmax).
    pub token_match: f64,
    /// Share of positions where both models' argmax agree (llama.cpp's "same top p").
    pub same_top: f64,
    /// max over positions of |log p_cand(next) − log p_ref(next)|.
    pub max_abs_logprob_diff: f64,
    pub mean_abs_logprob_diff: f64,
    /// exp(mean −log p_ref(next)).
    pub ppl_ref: f64,
    pub ppl_cand: f64,
    /// ppl_cand / ppl_ref − 1 (signed; the verdict uses its absolute value).
    pub ppl_rel: f64,
    pub kld_mean: f64,
    pub kld_median: f64,
    pub kld_p99: f64,
    pub kld_max: f64,
    /// Δp = p_cand(next) − p_ref(next).
    pub delta_p: DeltaPPercentiles,
    pub delta_p_rms: f64,
}

/// Linear interpolation between closest ranks (numpy's default) of an ascending slice.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Summarises `scores`; an empty set is an error (nothing was compared).
pub fn summarize(scores: &[PositionScore]) -> Result<Metrics> {
    ensure!(!scores.is_empty(), "no positions were scored");
    let n = scores.len() as f64;
    let count = |f: &dyn Fn(&PositionScore) -> bool| scores.iter().filter(|s| f(s)).count() as f64;
    let nll_ref = -scores.iter().map(|s| s.logprob_ref).sum::<f64>() / n;
    let nll_cand = -scores.iter().map(|s| s.logprob_cand).sum::<f64>() / n;
    let (ppl_ref, ppl_cand) = (nll_ref.exp(), nll_cand.exp());
    let abs_dlp: Vec<f64> = scores.iter().map(|s| s.delta_logprob().abs()).collect();
    let kld = sorted(scores.iter().map(|s| s.kld).collect());
    let dp = sorted(scores.iter().map(PositionScore::delta_p).collect());
    Ok(Metrics {
        positions: scores.len(),
        token_match: count(&|s| s.top_cand == s.target) / n,
        same_top: count(&|s| s.top_cand == s.top_ref) / n,
        max_abs_logprob_diff: abs_dlp.iter().copied().fold(0.0, f64::max),
        mean_abs_logprob_diff: abs_dlp.iter().sum::<f64>() / n,
        ppl_ref,
        ppl_cand,
        // exp(a)/exp(b) − 1 without losing digits when the two are close.
        ppl_rel: (nll_cand - nll_ref).exp_m1(),
        kld_mean: kld.iter().sum::<f64>() / n,
        kld_median: percentile(&kld, 0.5),
        kld_p99: percentile(&kld, 0.99),
        kld_max: kld[kld.len() - 1],
        delta_p: DeltaPPercentiles {
            min: dp[0],
            p1: percentile(&dp, 0.01),
            p5: percentile(&dp, 0.05),
            p10: percentile(&dp, 0.10),
            median: percentile(&dp, 0.5),
            p90: percentile(&dp, 0.90),
            p95: percentile(&dp, 0.95),
            p99: percentile(&dp, 0.99),
            max: dp[dp.len() - 1],
        },
        delta_p_rms: (dp.iter().map(|x| x * x).sum::<f64>() / n).sqrt(),
    })
}

/// The gate's thresholds (the study's defaults: 0.5 and 0.1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    pub max_logprob_diff: f64,
    pub max_ppl_rel: f64,
    /// Most streams whose free-running greedy continuation may loop where the reference's
    /// does not (`degenerate::is_loop`).
    pub max_loops_introduced: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_logprob_diff: 0.5,
            max_ppl_rel: 0.1,
            max_loops_introduced: 0,
        }
    }
}

/// PASS iff max |Δ logprob| ≤ threshold AND |ppl_rel| ≤ threshold AND (whole runs) no more
/// introduced greedy loops than allowed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub pass: bool,
    pub logprob_ok: bool,
    pub ppl_ok: bool,
    /// None where loops were not judged (per-corpus rows).
    pub loops_ok: Option<bool>,
}

impl Verdict {
    /// Adds the free-running check: `introduced` loops against at most `max`.
    pub fn add_loops(&mut self, introduced: usize, max: usize) {
        let ok = introduced <= max;
        self.loops_ok = Some(ok);
        self.pass &= ok;
    }
}

impl Thresholds {
    pub fn judge(&self, m: &Metrics) -> Verdict {
        let logprob_ok = m.max_abs_logprob_diff <= self.max_logprob_diff;
        let ppl_ok = m.ppl_rel.abs() <= self.max_ppl_rel;
        Verdict {
            pass: logprob_ok && ppl_ok,
            logprob_ok,
            ppl_ok,
            loops_ok: None,
        }
    }
}
