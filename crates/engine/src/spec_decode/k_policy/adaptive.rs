//! Our K controller: the K (from the runner's captured shapes) that maximises
//! expected emitted tokens per second of the whole step.

use super::cost_model::StepCostModel;
use crate::config::MAX_K;

/// K values the adaptive policy picks from when the runner captures no step shapes
/// (the CPU): 0 = plain decode.
pub const FALLBACK_KS: [usize; 6] = [0, 1, 4, 6, 8, 12];

/// Acceptance estimates of one sequence's draft (running probabilities).
pub type DraftScores<'a> = &'a [f32];

/// Work in the step besides the adaptive sequences' own rows (prefill chunks,
/// sequences under another K policy): it shares the step's time, so it is priced too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepLoad {
    pub seqs: usize,
    pub rows: usize,
}

/// Picks the K that maximises expected emitted tokens per second of the step, from
/// the drafts' acceptance estimates and the measured step-cost model.
#[derive(Debug, Clone)]
pub struct AdaptiveK {
    candidates: Vec<usize>,
}

impl AdaptiveK {
    pub fn new(candidates: &[usize]) -> Self {
        let mut c = candidates.to_vec();
        c.sort_unstable();
        c.dedup();
        Self { candidates: c }
    }

    /// Candidates from the query lengths the runner has captured graphs for (K = q − 1,
    /// so every verify step replays one; plus K = 0), or [`FALLBACK_KS`] when it
    /// captures none.
    pub fn from_query_lens(lens: Option<&[usize]>) -> Self {
        match lens {
            None => Self::new(&FALLBACK_KS),
            Some(lens) => {
                let ks: Vec<usize> = std::iter::once(0)
                    .chain(lens.iter().filter(|&&q| q >= 1).map(|&q| q - 1))
                    .filter(|&k| k <= MAX_K)
                    .collect();
                Self::new(&ks)
            }
        }
    }

    /// Sorted, without duplicates; always holds 0.
    pub fn candidates(&self) -> &[usize] {
        &self.candidates
    }

    pub fn max_k(&self) -> usize {
        self.candidates.last().copied().unwrap_or(0)
    }

    /// Expected tokens a sequence emits with K slots: 1 plus the expected accepted.
    pub fn expected_tokens(scores: DraftScores, k: usize) -> f64 {
        1.0 + scores.iter().take(k).map(|&p| p as f64).sum::<f64>()
    }

    /// Best K for the adaptive sequences of a step. With padding every sequence costs
    /// 1 + K rows; without, 1 + its draft length. `other` is the rest of the step's
    /// work; a K > 0 whose rows exceed `row_budget` is not considered (its verify rows
    /// would not fit the step).
    pub fn choose(
        &self,
        drafts: &[DraftScores],
        other: StepLoad,
        pad: bool,
        row_budget: usize,
        cost: &StepCostModel,
    ) -> usize {
        let b = drafts.len();
        if b == 0 {
            return 0;
        }
        let mut best = (f64::NEG_INFINITY, 0usize);
        for &k in &self.candidates {
            let tokens: f64 = drafts.iter().map(|d| Self::expected_tokens(d, k)).sum();
            let rows: usize = if pad {
                b * (1 + k)
            } else {
                drafts.iter().map(|d| 1 + d.len().min(k)).sum()
            };
            if k > 0 && rows > row_budget {
                continue;
            }
            let secs = cost.predict(b + other.seqs, rows + other.rows);
            let rate = tokens / secs.max(1e-9);
            // Strictly better only: ties keep the smaller K.
            if rate > best.0 * (1.0 + 1e-9) {
                best = (rate, k);
            }
        }
        best.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY_BUDGET: usize = usize::MAX;

    #[test]
    fn adaptive_prefers_long_k_only_when_drafts_are_good() {
        // Cost: 10 ms per step + 1 ms per row.
        let cost = StepCostModel::from_coefficients(0.010, 0.0, 0.001);
        let a = AdaptiveK::new(&FALLBACK_KS);
        let none_else = StepLoad::default();
        let good = vec![0.95f32; 12];
        let bad = vec![0.05f32; 12];
        assert_eq!(a.choose(&[&good], none_else, true, ANY_BUDGET, &cost), 12);
        assert_eq!(a.choose(&[&bad], none_else, true, ANY_BUDGET, &cost), 0);
        // With no drafts at all, unpadded, every K costs the same: keep K = 0.
        let none: Vec<f32> = vec![];
        assert_eq!(a.choose(&[&none], none_else, false, ANY_BUDGET, &cost), 0);
        // A steep per-row cost makes long drafts not worth it.
        let steep = StepCostModel::from_coefficients(0.001, 0.0, 0.01);
        let mid = vec![0.7f32, 0.5, 0.3, 0.2, 0.1, 0.05];
        let k = a.choose(&[&mid], none_else, true, ANY_BUDGET, &steep);
        assert!(k == 0 || k == 1, "{k}");
        assert!((AdaptiveK::expected_tokens(&mid, 2) - 2.2).abs() < 1e-6);
    }

    #[test]
    fn prefill_sharing_the_step_is_priced() {
        // 1 ms per row and nothing fixed: alone, K = 1 with a 0.5 draft gives
        // 1.5 tokens / 2 ms < 1 token / 1 ms, so plain decode wins. Beside a 100-token
        // prefill chunk the extra row is almost free: 1.5 / 102 > 1 / 101.
        let cost = StepCostModel::from_coefficients(0.0, 0.0, 0.001);
        let a = AdaptiveK::new(&[0, 1]);
        let half = [0.5f32];
        assert_eq!(a.choose(&[&half], StepLoad::default(), true, 10, &cost), 0);
        let prefill = StepLoad { seqs: 1, rows: 100 };
        assert_eq!(a.choose(&[&half], prefill, true, 10, &cost), 1);
    }

    #[test]
    fn a_k_whose_rows_do_not_fit_the_budget_is_never_picked() {
        let cost = StepCostModel::from_coefficients(0.010, 0.0, 0.001);
        let a = AdaptiveK::new(&FALLBACK_KS);
        let good = vec![0.95f32; 12];
        // Two sequences, 20 rows left: 2 x (1 + 8) fits, 2 x (1 + 12) does not.
        let k = a.choose(&[&good, &good], StepLoad::default(), true, 20, &cost);
        assert_eq!(k, 8);
        // Nothing fits: plain decode.
        assert_eq!(
            a.choose(&[&good, &good], StepLoad::default(), true, 3, &cost),
            0
        );
    }

    #[test]
    fn candidates_come_from_the_captured_query_lengths() {
        let a = AdaptiveK::from_query_lens(Some(&[9, 1, 2, 5, 5]));
        assert_eq!(a.candidates(), &[0, 1, 4, 8]);
        assert_eq!(a.max_k(), 8);
        // Only one captured length: K = 0 is still there.
        assert_eq!(AdaptiveK::from_query_lens(Some(&[7])).candidates(), &[0, 6]);
        // Lengths past the largest K any policy may use are ignored.
        let long = AdaptiveK::from_query_lens(Some(&[1, MAX_K + 1, MAX_K + 2]));
        assert_eq!(long.candidates(), &[0, MAX_K]);
        // No graphs: today's list.
        assert_eq!(AdaptiveK::from_query_lens(None).candidates(), &FALLBACK_KS);
    }
}
