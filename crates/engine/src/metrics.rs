//! Engine metrics: gauges, counters (vLLM names for speculative decoding) and
//! latency histograms, published as a snapshot after every step.

use serde::Serialize;

use crate::api::FinishReason;

/// Fixed-bucket histogram. `counts[i]` counts observations `<= bounds[i]` and
/// `> bounds[i-1]` (not cumulative); the last entry counts those above every bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Self {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Prometheus-style cumulative counts per bound (then +Inf).
    pub fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0u64, |acc, c| {
                *acc += c;
                Some(*acc)
            })
            .collect()
    }
}

/// Seconds; the same buckets vLLM uses.
pub const TTFT_BUCKETS: [f64; 18] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0,
];
pub const TPOT_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0,
];
pub const E2E_BUCKETS: [f64; 14] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
];

/// Phases of a step's host work, in order: waiting for the drafter's deferred tree
/// updates (run beside the previous step's model), drafting (the proposer and the K
/// plan), scheduling (blocks, the step's input, grammar states taken), verifying and
/// emitting (acceptance, detokenising, stop rules, streaming, queueing the drafter's
/// appends), the end of the step (K policy and step-budget bookkeeping).
pub const HOST_PHASES: [&str; 5] = ["drafter_wait", "draft", "schedule", "verify_emit", "end"];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricsSnapshot {
    // Gauges.
    pub running: usize,
    pub waiting: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    /// K of the last speculative step (0 = plain decode).
    pub last_k: usize,
    // Counters.
    pub steps: u64,
    /// Seconds engine steps spent in the model's forward (the device's share of a step).
    pub step_model_seconds: f64,
    /// Steps that carried prompt (prefill) tokens, and their forward seconds: such a
    /// step's shape is not uniform, so on CUDA it runs eagerly instead of replaying a
    /// captured graph.
    pub steps_with_prefill: u64,
    pub step_model_seconds_with_prefill: f64,
    /// Steps with grammar-constrained rows, and those of them whose masks were applied
    /// inside the runner's argmax (greedy rows: only ids came back) rather than to logits
    /// copied back to the host.
    pub constrained_steps: u64,
    pub constrained_steps_masked_argmax: u64,
    /// Seconds engine steps spent around it on the host: planning drafts, scheduling,
    /// building the input, verifying, detokenising and streaming.
    pub step_host_seconds: f64,
    /// The host part by phase ([`HOST_PHASES`]): where a step's host time goes.
    pub step_host_phase_seconds: [f64; HOST_PHASES.len()],
    /// Seconds the engine thread spent outside steps on admitting and finishing
    /// requests (the drafter's per-request trees, grammar compilation, cleanup).
    pub admin_seconds: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub prefix_cache_queried_tokens: u64,
    pub prefix_cache_hit_tokens: u64,
    pub preemptions: u64,
    pub finished_stop: u64,
    pub finished_length: u64,
    pub finished_abort: u64,
    pub finished_error: u64,
    /// vLLM `spec_decode_num_drafts`: sequence-steps that carried at least one real draft token.
    pub spec_num_drafts: u64,
    /// vLLM `spec_decode_num_draft_tokens`: real draft tokens (never pad slots).
    pub spec_num_draft_tokens: u64,
    /// vLLM `spec_decode_num_accepted_tokens`.
    pub spec_num_accepted_tokens: u64,
    /// vLLM `spec_decode_num_accepted_tokens_per_pos`: index j counts drafts whose
    /// position j was accepted.
    pub spec_num_accepted_tokens_per_pos: Vec<u64>,
    /// Draft tokens a constrained sequence's grammar forced (counted in the
    /// `spec_*` totals too), and how many of them were accepted.
    pub grammar_draft_tokens: u64,
    pub grammar_draft_accepted_tokens: u64,
    // Histograms (seconds).
    pub ttft: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
}

impl Default for MetricsSnapshot {
    fn default() -> Self {
        Self {
            running: 0,
            waiting: 0,
            kv_blocks_used: 0,
            kv_blocks_total: 0,
            last_k: 0,
            steps: 0,
            step_model_seconds: 0.0,
            step_host_seconds: 0.0,
            step_host_phase_seconds: [0.0; HOST_PHASES.len()],
            steps_with_prefill: 0,
            step_model_seconds_with_prefill: 0.0,
            constrained_steps: 0,
            constrained_steps_masked_argmax: 0,
            admin_seconds: 0.0,
            prompt_tokens: 0,
            generation_tokens: 0,
            prefix_cache_queried_tokens: 0,
            prefix_cache_hit_tokens: 0,
            preemptions: 0,
            finished_stop: 0,
            finished_length: 0,
            finished_abort: 0,
            finished_error: 0,
            spec_num_drafts: 0,
            spec_num_draft_tokens: 0,
            spec_num_accepted_tokens: 0,
            spec_num_accepted_tokens_per_pos: Vec::new(),
            grammar_draft_tokens: 0,
            grammar_draft_accepted_tokens: 0,
            ttft: Histogram::new(&TTFT_BUCKETS),
            tpot: Histogram::new(&TPOT_BUCKETS),
            e2e: Histogram::new(&E2E_BUCKETS),
        }
    }
}

impl MetricsSnapshot {
    pub fn count_finish(&mut self, r: FinishReason) {
        match r {
            FinishReason::Stop => self.finished_stop += 1,
            FinishReason::Length => self.finished_length += 1,
            FinishReason::Abort => self.finished_abort += 1,
            FinishReason::Error => self.finished_error += 1,
        }
    }

    /// Records one verify outcome of a sequence: `valid_len` real drafts, `accepted` accepted.
    pub fn count_verify(&mut self, valid_len: usize, accepted: usize) {
        if valid_len == 0 {
            return;
        }
        self.spec_num_drafts += 1;
        self.spec_num_draft_tokens += valid_len as u64;
        self.spec_num_accepted_tokens += accepted as u64;
        if self.spec_num_accepted_tokens_per_pos.len() < valid_len {
            self.spec_num_accepted_tokens_per_pos.resize(valid_len, 0);
        }
        for c in &mut self.spec_num_accepted_tokens_per_pos[..accepted] {
            *c += 1;
        }
    }

    /// Records a verified row's `forced` leading draft tokens from its grammar, of which
    /// `accepted` were accepted.
    pub fn count_grammar_drafts(&mut self, forced: usize, accepted: usize) {
        self.grammar_draft_tokens += forced as u64;
        self.grammar_draft_accepted_tokens += accepted as u64;
    }

    /// Accepted / real draft tokens.
    pub fn acceptance_rate(&self) -> f64 {
        if self.spec_num_draft_tokens == 0 {
            0.0
        } else {
            self.spec_num_accepted_tokens as f64 / self.spec_num_draft_tokens as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_cumulative_counts() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 7.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![2, 1, 1]);
        assert_eq!(h.cumulative(), vec![2, 3, 4]);
        assert_eq!(h.count, 4);
    }

    #[test]
    fn verify_counters_count_real_drafts_only() {
        let mut m = MetricsSnapshot::default();
        m.count_verify(0, 0);
        assert_eq!(m.spec_num_drafts, 0);
        m.count_verify(3, 2);
        m.count_verify(5, 0);
        assert_eq!(
            (
                m.spec_num_drafts,
                m.spec_num_draft_tokens,
                m.spec_num_accepted_tokens
            ),
            (2, 8, 2)
        );
        assert_eq!(m.spec_num_accepted_tokens_per_pos, vec![1, 1, 0, 0, 0]);
        assert!((m.acceptance_rate() - 0.25).abs() < 1e-12);
    }
}
