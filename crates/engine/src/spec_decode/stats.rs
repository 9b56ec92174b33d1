//! Acceptance statistics, learned from every verify outcome: per draft position (the
//! adaptive policy's estimate for drafters without scores), the drafter's score
//! calibration, the dynamic controller's per-step tally, and the counters reported
//! per request (`Usage`) and in `/metrics` (vLLM's names, and the drafts that came
//! from a grammar).

use super::drafts::StepDrafts;
use super::k_policy::ScoreCalibration;
use crate::api::Usage;
use crate::metrics::MetricsSnapshot;

/// Measured conditional acceptance per draft position: given position j was
/// reached, how often was it accepted. Used when a proposer gives no probabilities.
#[derive(Debug, Clone)]
pub struct PositionAcceptance {
    reached: Vec<f64>,
    accepted: Vec<f64>,
}

impl PositionAcceptance {
    pub fn new(max_k: usize) -> Self {
        Self {
            reached: vec![0.0; max_k],
            accepted: vec![0.0; max_k],
        }
    }

    /// One verify outcome: `accepted` of `valid_len` real drafts accepted.
    pub fn observe(&mut self, valid_len: usize, accepted: usize) {
        // Slow decay so the estimate follows the traffic.
        const DECAY: f64 = 0.999;
        let reached = (accepted + 1).min(valid_len);
        for j in 0..self.reached.len() {
            self.reached[j] *= DECAY;
            self.accepted[j] *= DECAY;
            if j < reached {
                self.reached[j] += 1.0;
                if j < accepted {
                    self.accepted[j] += 1.0;
                }
            }
        }
    }

    /// Estimated probability that the first j+1 drafts are all accepted, for each j.
    pub fn running_probs(&self, len: usize) -> Vec<f32> {
        let mut p = 1.0f64;
        (0..len.min(self.reached.len()))
            .map(|j| {
                // Beta(1,1) prior: 0.5 before any data.
                let c = (self.accepted[j] + 1.0) / (self.reached[j] + 2.0);
                p *= c;
                p as f32
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct AcceptanceStats {
    pub position: PositionAcceptance,
    pub calibration: ScoreCalibration,
    /// Accepted tokens and rows of this step's dynamic-K rows.
    dynamic: (usize, usize),
}

impl AcceptanceStats {
    /// The most a first draft is expected to be accepted, whichever estimate the
    /// drafter's drafts use (its calibrated scores, or the per-position rate).
    pub fn best_first_rate(&self) -> f64 {
        let by_position = self
            .position
            .running_probs(1)
            .first()
            .copied()
            .unwrap_or(1.0);
        self.calibration.best_first_rate().max(by_position as f64)
    }

    pub fn new(max_k: usize) -> Self {
        Self {
            position: PositionAcceptance::new(max_k),
            calibration: ScoreCalibration::new(),
            dynamic: (0, 0),
        }
    }

    /// Row b of `drafts` was verified (it carried slots) and `accepted` of its real
    /// draft tokens were accepted. Pads never count.
    pub fn record(
        &mut self,
        drafts: &StepDrafts,
        b: usize,
        accepted: usize,
        usage: &mut Usage,
        metrics: &mut MetricsSnapshot,
    ) {
        let valid = drafts.valid_len[b];
        // A run of forced tokens alone (accepted by construction) would teach the
        // drafter's estimates a rate no draft of its own earns: it counts in the totals only.
        let forced = drafts.forced[b];
        let own = drafts.from_drafter[b];
        if valid > 0 {
            usage.spec_steps += 1;
            usage.draft_tokens += valid as u32;
            usage.accepted_tokens += accepted as u32;
            if own {
                self.position.observe(valid, accepted);
                if let Some(sc) = &drafts.scores[b] {
                    self.calibration
                        .observe(&sc[..valid.min(sc.len())], accepted);
                }
            }
        }
        metrics.count_verify(valid, accepted);
        metrics.count_grammar_drafts(forced, accepted.min(forced));
        if drafts.dynamic[b] && own {
            self.dynamic.0 += accepted;
            self.dynamic.1 += 1;
        }
    }

    /// Ends a step: the mean accepted length of its dynamic-K rows, if it had any.
    pub fn take_dynamic_mean(&mut self) -> Option<f64> {
        let (accepted, rows) = std::mem::take(&mut self.dynamic);
        (rows > 0).then(|| accepted as f64 / rows as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_acceptance_estimates_conditional_rates() {
        let mut a = PositionAcceptance::new(4);
        assert_eq!(a.running_probs(2), vec![0.5, 0.25]);
        for _ in 0..1000 {
            a.observe(4, 4);
        }
        assert!(a.running_probs(4)[3] > 0.99);
        for _ in 0..5000 {
            a.observe(4, 0);
        }
        assert!(a.running_probs(1)[0] < 0.05);
    }
}
