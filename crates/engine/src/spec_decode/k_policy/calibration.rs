//! Calibration of a drafter's own scores against measured acceptance, for the
//! adaptive policy.

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

    /// The most a first draft token can be expected to be accepted: the highest
    /// calibrated rate of position 0 over the score bins, a bin without data at the top
    /// of its raw range. The adaptive policy does not ask the drafter for drafts a row
    /// of which could not pay even at this rate.
    pub fn best_first_rate(&self) -> f64 {
        (0..Self::BINS)
            .map(|s| {
                let (n, h) = self.cells[0][s];
                let top = (s + 1) as f64 / Self::BINS as f64;
                (h + Self::PRIOR * top) / (n + Self::PRIOR)
            })
            .fold(0.0, f64::max)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_decode::k_policy::{AdaptiveK, DraftSeq, StepCostModel, StepLoad};

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
        let cal = c.apply(&raw);
        let seq = DraftSeq {
            scores: &cal,
            context: 0,
        };
        let k = a.choose(&[seq], StepLoad::default(), true, usize::MAX, &cost);
        assert_eq!(k, 8);
    }

    #[test]
    fn best_first_rate_bounds_what_drafts_earn() {
        let mut c = ScoreCalibration::new();
        // No data: a first draft might be accepted every time.
        assert!((c.best_first_rate() - 1.0).abs() < 1e-9);
        // Every score bin measured at about 40 %: the bound follows.
        for i in 0..5000 {
            let score = (i % 10) as f32 / 10.0 + 0.05;
            c.observe(&[score], usize::from((i / 10) % 5 < 2));
        }
        let best = c.best_first_rate();
        assert!(best > 0.35 && best < 0.5, "{best}");
    }
}
