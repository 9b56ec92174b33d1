//! Runtime K controllers: the study's dynamic-K (for comparison) and our adaptive
//! controller, plus the per-position acceptance statistics they use.

use super::cost_model::StepCostModel;
use crate::config::DYNAMIC_LEVELS;

/// The study's controller, exactly: a batch-global EMA (alpha 0.1) of the mean
/// number of accepted draft tokens per sequence per verify step; after each step,
/// move up one level when EMA >= 0.8 K, otherwise take the smallest level >= 1.5
/// EMA (the top level when none is).
#[derive(Debug, Clone, Default)]
pub struct DynamicK {
    ema: Option<f64>,
    /// Index into the levels; starts at the lowest.
    level: usize,
}

impl DynamicK {
    pub const ALPHA: f64 = 0.1;

    pub fn k(&self) -> usize {
        DYNAMIC_LEVELS[self.level]
    }

    pub fn ema(&self) -> Option<f64> {
        self.ema
    }

    /// Feeds one verify step's mean accepted length (over the sequences that used
    /// this controller).
    pub fn observe(&mut self, mean_accepted: f64) {
        let ema = match self.ema {
            None => mean_accepted,
            Some(e) => (1.0 - Self::ALPHA) * e + Self::ALPHA * mean_accepted,
        };
        self.ema = Some(ema);
        let k = self.k() as f64;
        self.level = if ema >= 0.8 * k {
            (self.level + 1).min(DYNAMIC_LEVELS.len() - 1)
        } else {
            DYNAMIC_LEVELS
                .iter()
                .position(|&l| l as f64 >= 1.5 * ema)
                .unwrap_or(DYNAMIC_LEVELS.len() - 1)
        };
    }
}

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

/// Maps a drafter's own running probabilities (the suffix tree's count ratios) to
/// measured ones. The tree is over-confident where a continuation was seen once
/// (1/1 = 1.0) and the adaptive controller buys long drafts on that; this table
/// learns, per (draft position, score bin), how often "the first j+1 drafts are
/// all accepted" really held, and replaces the score with that rate.
#[derive(Debug, Clone)]
pub struct ScoreCalibration {
    /// [position bucket][score bin] → (predicted events, observed hits), decayed.
    cells: Vec<[(f64, f64); Self::BINS]>,
}

impl ScoreCalibration {
    const BINS: usize = 10;
    /// Draft positions 0, 1, 2, 3, 4–5, 6–8, 9–15, 16+.
    const POS_BUCKETS: [usize; 7] = [1, 2, 3, 4, 6, 9, 16];
    /// Pseudo-events at the raw score before any data: the raw score is the prior.
    const PRIOR: f64 = 4.0;
    /// Counts halve when a cell reaches this many events, so the table follows traffic.
    const HORIZON: f64 = 4096.0;

    pub fn new() -> Self {
        Self {
            cells: vec![[(0.0, 0.0); Self::BINS]; Self::POS_BUCKETS.len() + 1],
        }
    }

    fn cell(pos: usize, score: f32) -> (usize, usize) {
        let p = Self::POS_BUCKETS.iter().take_while(|&&b| pos >= b).count();
        let s = ((score.clamp(0.0, 1.0) * Self::BINS as f32) as usize).min(Self::BINS - 1);
        (p, s)
    }

    /// Calibrated running probabilities, non-increasing like the raw ones.
    pub fn apply(&self, raw: &[f32]) -> Vec<f32> {
        let mut prev = 1.0f32;
        raw.iter()
            .enumerate()
            .map(|(j, &r)| {
                let (p, s) = Self::cell(j, r);
                let (n, h) = self.cells[p][s];
                let v = ((h + Self::PRIOR * r as f64) / (n + Self::PRIOR)) as f32;
                prev = prev.min(v);
                prev
            })
            .collect()
    }

    /// One verify outcome: `raw` are the scores of the drafts that were verified,
    /// `accepted` how many of them were accepted (a prefix).
    pub fn observe(&mut self, raw: &[f32], accepted: usize) {
        for (j, &r) in raw.iter().enumerate() {
            let (p, s) = Self::cell(j, r);
            let c = &mut self.cells[p][s];
            if c.0 >= Self::HORIZON {
                c.0 *= 0.5;
                c.1 *= 0.5;
            }
            c.0 += 1.0;
            if j < accepted {
                c.1 += 1.0;
            }
        }
    }
}

impl Default for ScoreCalibration {
    fn default() -> Self {
        Self::new()
    }
}

/// Our controller: pick the K (from the captured set) that maximises expected
/// emitted tokens per second of the step, using the drafts' own acceptance
/// estimates and the measured step-cost model.
#[derive(Debug, Clone)]
pub struct AdaptiveK {
    pub candidates: Vec<usize>,
}

/// Acceptance estimates of one sequence's draft (running probabilities).
pub type DraftScores<'a> = &'a [f32];

impl AdaptiveK {
    pub fn new(candidates: &[usize]) -> Self {
        let mut c = candidates.to_vec();
        c.sort_unstable();
        c.dedup();
        Self { candidates: c }
    }

    /// Expected tokens a sequence emits with K slots: 1 plus the expected accepted.
    pub fn expected_tokens(scores: DraftScores, k: usize) -> f64 {
        1.0 + scores.iter().take(k).map(|&p| p as f64).sum::<f64>()
    }

    /// Best K for a batch. `other_tokens` are prefill tokens sharing the step.
    /// With padding every sequence costs 1 + K rows; without, 1 + its draft length.
    pub fn choose(
        &self,
        drafts: &[DraftScores],
        other_tokens: usize,
        pad: bool,
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
            let secs = cost.predict(b, rows + other_tokens);
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

    #[test]
    fn dynamic_k_follows_the_study_rule() {
        let mut d = DynamicK::default();
        assert_eq!(d.k(), 4);
        d.observe(3.5); // EMA 3.5 >= 0.8*4 -> up one level
        assert_eq!(d.k(), 6);
        d.observe(5.0); // EMA 3.65 < 4.8 -> smallest level >= 5.475 -> 6
        assert_eq!(d.k(), 6);
        let mut d = DynamicK::default();
        d.observe(0.5); // EMA 0.5 -> smallest >= 0.75 -> 4
        assert_eq!(d.k(), 4);
        let mut d = DynamicK::default();
        d.observe(3.5);
        d.observe(20.0); // EMA 5.15 >= 4.8 -> 12
        assert_eq!(d.k(), 12);
        d.observe(0.0); // EMA 4.635 < 9.6 -> smallest >= 6.95 -> 12
        assert_eq!(d.k(), 12);
        for _ in 0..30 {
            d.observe(0.0);
        }
        assert_eq!(d.k(), 4);
        assert!((d.ema().unwrap() - 4.635 * 0.9f64.powi(30)).abs() < 1e-9);
    }

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

    #[test]
    fn adaptive_prefers_long_k_only_when_drafts_are_good() {
        // Cost: 10 ms per step + 1 ms per row.
        let cost = StepCostModel::from_coefficients(0.010, 0.0, 0.001);
        let a = AdaptiveK::new(&[0, 1, 4, 6, 8, 12]);
        let good = vec![0.95f32; 12];
        let bad = vec![0.05f32; 12];
        assert_eq!(a.choose(&[&good], 0, true, &cost), 12);
        assert_eq!(a.choose(&[&bad], 0, true, &cost), 0);
        // With no drafts at all, unpadded, every K costs the same: keep K = 0.
        let none: Vec<f32> = vec![];
        assert_eq!(a.choose(&[&none], 0, false, &cost), 0);
        // A steep per-row cost makes long drafts not worth it.
        let steep = StepCostModel::from_coefficients(0.001, 0.0, 0.01);
        let mid = vec![0.7f32, 0.5, 0.3, 0.2, 0.1, 0.05];
        let k = a.choose(&[&mid], 0, true, &steep);
        assert!(k == 0 || k == 1, "{k}");
        assert!((AdaptiveK::expected_tokens(&mid, 2) - 2.2).abs() < 1e-6);
    }

    #[test]
    fn calibration_learns_an_over_confident_drafter() {
        let mut c = ScoreCalibration::new();
        let raw = vec![1.0f32; 8];
        // No data: the raw score stands.
        assert_eq!(c.apply(&raw), raw);
        // Drafts scored 1.0 everywhere, but only the first two tokens are ever accepted.
        for _ in 0..2000 {
            c.observe(&raw, 2);
        }
        let cal = c.apply(&raw);
        assert!(cal[0] > 0.99 && cal[1] > 0.99, "{cal:?}");
        assert!(cal[2] < 0.01 && cal[7] < 0.01, "{cal:?}");
        // Non-increasing even where a later cell has no data.
        let mixed = c.apply(&[1.0, 1.0, 1.0, 0.35]);
        assert!(mixed.windows(2).all(|w| w[1] <= w[0]), "{mixed:?}");
        // A score bin with no observations keeps its raw value.
        assert!((c.apply(&[0.55])[0] - 0.55).abs() < 1e-6);
        // Then the traffic changes: all eight accepted; the table follows it.
        for _ in 0..20000 {
            c.observe(&raw, 8);
        }
        assert!(c.apply(&raw)[7] > 0.9);
        // The adaptive choice follows: with the learned rates, long K pays again.
        let cost = StepCostModel::from_coefficients(0.010, 0.0, 0.001);
        let a = AdaptiveK::new(&[0, 4, 8]);
        assert_eq!(a.choose(&[&c.apply(&raw)], 0, true, &cost), 8);
    }
}
