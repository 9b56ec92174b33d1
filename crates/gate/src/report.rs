//! The gate's result: a JSON document with every metric, and a one-screen summary.

use serde::Serialize;
use std::fmt::Write as _;

use crate::metrics::{Metrics, Thresholds, Verdict};

#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// As given on the command line (path, hub id, or the default model's name).
    pub model: String,
    pub name: String,
    pub device: String,
    /// CPU weight format (f32 | q8 | q4); absent on other devices.
    pub cpu_weights: Option<String>,
    pub load_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CorpusResult {
    pub corpus: String,
    pub streams: usize,
    pub verdict: Verdict,
    pub metrics: Metrics,
}

#[derive(Debug, Clone, Serialize)]
pub struct NoiseFloor {
    /// `batch` or `precision`.
    pub kind: String,
    pub description: String,
    /// Whether every logit was bitwise identical (batch floor only).
    pub bitwise_identical: Option<bool>,
    pub metrics: Metrics,
}

/// The candidate's own greedy continuations against the reference's (free-running, each
/// from the same prompt).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GreedyAgreement {
    pub streams: usize,
    /// Continuations identical to the reference's.
    pub identical: usize,
    /// Mean length of the common prefix with the reference's continuation, in tokens.
    pub mean_common_prefix: f64,
    /// Streams whose continuation is a loop (`degenerate::is_loop`), per model.
    pub reference_loops: usize,
    pub candidate_loops: usize,
    /// Conversational streams where the candidate loops and the reference does not (the
    /// criterion).
    pub loops_introduced: Vec<String>,
    /// The same in code streams: reported, not judged (code repeats spans legitimately).
    pub code_loops_introduced: Vec<String>,
    /// Conversational streams where the reference loops and the candidate does not: not
    /// judged; beside `loops_introduced` it shows whether a candidate loops more or only
    /// elsewhere (a model that loops often moves loops around under any perturbation).
    pub loops_removed: Vec<String>,
    /// The first few of those, as text: (stream, reference, candidate).
    pub examples: Vec<(String, String, String)>,
}

impl GreedyAgreement {
    /// From (stream id, judged, reference continuation, candidate continuation), where judged
    /// says whether the stream's loops count (conversational prompts); `decode` turns ids
    /// into text for the examples.
    pub fn of(pairs: &[(String, bool, &[u32], &[u32])], decode: &dyn Fn(&[u32]) -> String) -> Self {
        use crate::degenerate::is_loop;
        let mut g = GreedyAgreement {
            streams: pairs.len(),
            ..Default::default()
        };
        let mut prefix_sum = 0usize;
        for (id, judged, r, c) in pairs {
            g.identical += usize::from(r == c);
            prefix_sum += r.iter().zip(c.iter()).take_while(|(a, b)| a == b).count();
            let (rl, cl) = (is_loop(r), is_loop(c));
            g.reference_loops += usize::from(rl);
            g.candidate_loops += usize::from(cl);
            if rl && !cl && *judged {
                g.loops_removed.push(id.clone());
            }
            if cl && !rl && !judged {
                g.code_loops_introduced.push(id.clone());
            } else if cl && !rl {
                g.loops_introduced.push(id.clone());
                if g.examples.len() < 3 {
                    g.examples.push((id.clone(), decode(r), decode(c)));
                }
            }
        }
        g.mean_common_prefix = prefix_sum as f64 / pairs.len().max(1) as f64;
        g
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct WorstPosition {
    /// `<corpus>:<record id>` of the stream.
    pub stream: String,
    /// Which continuation token (0 = the first generated one).
    pub continuation_index: usize,
    pub token: u32,
    pub token_text: String,
    pub logprob_ref: f64,
    pub logprob_cand: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    /// PASS or FAIL.
    pub verdict: String,
    pub checks: Verdict,
    pub thresholds: Thresholds,
    pub verdict_rule: String,
    pub reference: ModelInfo,
    pub candidate: ModelInfo,
    /// Which tokens the metrics are computed over.
    pub scored_tokens: String,
    pub corpora: Vec<String>,
    pub streams: usize,
    pub prompt_tokens: usize,
    pub truncated_prompts: usize,
    pub max_prompt_tokens: usize,
    pub max_new_tokens: usize,
    pub scored_positions: usize,
    /// Streams whose reference continuation ended at an end-of-sequence token.
    pub eos_stopped_streams: usize,
    /// Prompts the candidate's tokenizer encodes differently (the reference's ids are used).
    pub tokenizer_mismatch_prompts: usize,
    /// Scored positions whose |Δ logprob| exceeds the threshold (the max criterion is an
    /// outlier test: this says whether one token or many failed it).
    pub positions_over_logprob_threshold: usize,
    /// The position with the largest |Δ logprob|.
    pub worst_position: Option<WorstPosition>,
    /// Candidate vs reference over all scored positions.
    pub metrics: Metrics,
    /// Free-running greedy continuations compared.
    pub greedy: GreedyAgreement,
    pub per_corpus: Vec<CorpusResult>,
    pub noise_floor: Vec<NoiseFloor>,
    pub generate_seconds: f64,
    pub score_seconds: f64,
    pub total_seconds: f64,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.checks.pass
    }

    /// The verdict and its numbers in one line (for verdict caches and start-up logs).
    pub fn one_line(&self) -> String {
        let m = &self.metrics;
        let g = &self.greedy;
        format!(
            "{} on {} streams ({}): max |Δ logprob| {:.3}, ppl_rel {:+.2} %, greedy loops introduced in conversational streams {}{} (in code streams, not judged: {})",
            self.verdict,
            self.streams,
            self.corpora.join(","),
            m.max_abs_logprob_diff,
            100.0 * m.ppl_rel,
            g.loops_introduced.len(),
            if g.loops_introduced.is_empty() {
                String::new()
            } else {
                format!(" ({})", g.loops_introduced.join(", "))
            },
            g.code_loops_introduced.len()
        )
    }

    /// A readable one-screen summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let w = |m: &ModelInfo| {
            format!(
                "{} ({}{})",
                m.model,
                m.device,
                m.cpu_weights
                    .as_deref()
                    .map(|w| format!(", {w} weights"))
                    .unwrap_or_default()
            )
        };
        let m = &self.metrics;
        let _ = writeln!(s, "wring gate: {}", self.verdict);
        let _ = writeln!(s, "  reference  {}", w(&self.reference));
        let _ = writeln!(s, "  candidate  {}", w(&self.candidate));
        let _ = writeln!(
            s,
            "  streams    {} from {} ({} prompt tokens, {} cut to {}), {} scored positions ({} continuations ended at EOS)",
            self.streams,
            self.corpora.join(","),
            self.prompt_tokens,
            self.truncated_prompts,
            self.max_prompt_tokens,
            self.scored_positions,
            self.eos_stopped_streams
        );
        let _ = writeln!(
            s,
            "  scored     the reference's greedy continuation tokens (≤{} per stream), each from its prefix",
            self.max_new_tokens
        );
        if self.tokenizer_mismatch_prompts > 0 {
            let _ = writeln!(
                s,
                "  note       {} prompts tokenize differently with the candidate's tokenizer (reference ids used)",
                self.tokenizer_mismatch_prompts
            );
        }
        let ok = |b: bool| if b { "ok" } else { "FAIL" };
        let _ = writeln!(
            s,
            "  max |Δ logprob| {:.4}  (≤ {})  {}",
            m.max_abs_logprob_diff,
            self.thresholds.max_logprob_diff,
            ok(self.checks.logprob_ok)
        );
        if let Some(wp) = &self.worst_position {
            let _ = writeln!(
                s,
                "    worst: {} continuation token {} ({:?}): log p ref {:.4} cand {:.4}; {} of {} positions over {}",
                wp.stream,
                wp.continuation_index,
                wp.token_text,
                wp.logprob_ref,
                wp.logprob_cand,
                self.positions_over_logprob_threshold,
                self.scored_positions,
                self.thresholds.max_logprob_diff
            );
        }
        let _ = writeln!(
            s,
            "  ppl_rel         {:+.5} (|·| ≤ {})  {}   ppl ref {:.4} cand {:.4}",
            m.ppl_rel,
            self.thresholds.max_ppl_rel,
            ok(self.checks.ppl_ok),
            m.ppl_ref,
            m.ppl_cand
        );
        let g = &self.greedy;
        let _ = writeln!(
            s,
            "  greedy loops    {} introduced in conversational streams (≤ {})  {}   (+{} in code streams, not judged; {} removed in conversational streams, not judged); loops: reference {}, candidate {} of {} streams; identical {}, mean common prefix {:.1} tokens",
            g.loops_introduced.len(),
            self.thresholds.max_loops_introduced,
            ok(self.checks.loops_ok.unwrap_or(true)),
            g.code_loops_introduced.len(),
            g.loops_removed.len(),
            g.reference_loops,
            g.candidate_loops,
            g.streams,
            g.identical,
            g.mean_common_prefix
        );
        for (id, r, c) in &g.examples {
            let short = |t: &str| t.chars().take(120).collect::<String>();
            let _ = writeln!(
                s,
                "    {id}: reference {:?}\n    {:w$}  candidate {:?}",
                short(r),
                "",
                short(c),
                w = id.len()
            );
        }
        let _ = writeln!(
            s,
            "  token match {:.2}%   same top {:.2}%   mean |Δ logprob| {:.5}",
            100.0 * m.token_match,
            100.0 * m.same_top,
            m.mean_abs_logprob_diff
        );
        let _ = writeln!(
            s,
            "  KLD  mean {:.6}  median {:.6}  p99 {:.6}  max {:.6}",
            m.kld_mean, m.kld_median, m.kld_p99, m.kld_max
        );
        let d = &m.delta_p;
        let _ = writeln!(
            s,
            "  Δp   min {:+.4} p1 {:+.4} p5 {:+.4} p10 {:+.4} med {:+.4} p90 {:+.4} p95 {:+.4} p99 {:+.4} max {:+.4}  RMS {:.4}",
            d.min, d.p1, d.p5, d.p10, d.median, d.p90, d.p95, d.p99, d.max, m.delta_p_rms
        );
        if !self.noise_floor.is_empty() {
            let _ = writeln!(s, "  noise floor (reference vs itself):");
            for f in &self.noise_floor {
                let bits = match f.bitwise_identical {
                    Some(true) => " — bitwise identical logits",
                    Some(false) => " — logits differ",
                    None => "",
                };
                let _ = writeln!(
                    s,
                    "    {:<9} max |Δ logprob| {:.4}  ppl_rel {:+.5}  KLD mean {:.6}  same top {:.2}%{bits}",
                    f.kind,
                    f.metrics.max_abs_logprob_diff,
                    f.metrics.ppl_rel,
                    f.metrics.kld_mean,
                    100.0 * f.metrics.same_top
                );
            }
        }
        if self.per_corpus.len() > 1 {
            let _ = writeln!(
                s,
                "  {:<30} {:>5} {:>9} {:>9} {:>9} {:>7}",
                "per corpus", "pos", "max|Δlp|", "ppl_rel", "KLD mean", "match"
            );
            for c in &self.per_corpus {
                let _ = writeln!(
                    s,
                    "  {:<30} {:>5} {:>9.4} {:>+9.5} {:>9.6} {:>6.1}%  {}",
                    c.corpus,
                    c.metrics.positions,
                    c.metrics.max_abs_logprob_diff,
                    c.metrics.ppl_rel,
                    c.metrics.kld_mean,
                    100.0 * c.metrics.token_match,
                    if c.verdict.pass { "pass" } else { "FAIL" }
                );
            }
        }
        let _ = writeln!(
            s,
            "  time: generate {:.1}s, score {:.1}s, total {:.1}s",
            self.generate_seconds, self.score_seconds, self.total_seconds
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_agreement_counts_loops_introduced_and_removed_by_kind() {
        let looped: Vec<u32> = [1, 2, 3, 4].repeat(8);
        let plain: Vec<u32> = (100..132).collect();
        let pairs: Vec<(String, bool, &[u32], &[u32])> = vec![
            ("chat:introduced".into(), true, &plain, &looped),
            ("chat:removed".into(), true, &looped, &plain),
            ("chat:both".into(), true, &looped, &looped),
            ("code:introduced".into(), false, &plain, &looped),
            ("code:removed".into(), false, &looped, &plain),
            ("chat:same".into(), true, &plain, &plain),
        ];
        let g = GreedyAgreement::of(&pairs, &|ids: &[u32]| format!("{} ids", ids.len()));
        assert_eq!(g.loops_introduced, vec!["chat:introduced"]);
        assert_eq!(g.code_loops_introduced, vec!["code:introduced"]);
        assert_eq!(g.loops_removed, vec!["chat:removed"]);
        assert_eq!((g.reference_loops, g.candidate_loops), (3, 3));
        assert_eq!((g.streams, g.identical), (6, 2));
        assert_eq!(g.examples.len(), 1);
    }
}
