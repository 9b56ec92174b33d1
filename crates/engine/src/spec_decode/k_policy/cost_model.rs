//! Step-cost model: seconds of one forward step as a function of the number of
//! sequences B and query rows T, `t = a + b * B + c * T`, fitted by least squares to
//! steps timed at start-up on the actual runner and refitted as real steps run.

use crate::least_squares::nonnegative_fit;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct StepCostModel {
    /// (a, b, c): fixed, per sequence, per row.
    coef: [f64; 3],
    /// Recent (B, T, seconds) observations.
    samples: VecDeque<(f64, f64, f64)>,
    calibration: Vec<(f64, f64, f64)>,
    max_samples: usize,
    since_fit: usize,
}

impl StepCostModel {
    pub fn from_coefficients(a: f64, b: f64, c: f64) -> Self {
        Self {
            coef: [a, b, c],
            samples: VecDeque::new(),
            calibration: Vec::new(),
            max_samples: 512,
            since_fit: 0,
        }
    }

    /// Fits a model to calibration points (B, T, seconds). They stay in every
    /// later refit so the model keeps covering shapes traffic has not visited.
    pub fn fit_calibration(points: &[(usize, usize, f64)]) -> Self {
        let mut m = Self::from_coefficients(0.0, 0.0, 0.0);
        m.calibration = points
            .iter()
            .map(|&(b, t, s)| (b as f64, t as f64, s))
            .collect();
        m.refit();
        m
    }

    pub fn coefficients(&self) -> [f64; 3] {
        self.coef
    }

    pub fn predict(&self, num_seqs: usize, num_rows: usize) -> f64 {
        let [a, b, c] = self.coef;
        (a + b * num_seqs as f64 + c * num_rows as f64).max(1e-6)
    }

    /// Records a real step's time; refits every 32 steps.
    pub fn observe(&mut self, num_seqs: usize, num_rows: usize, secs: f64) {
        if !(secs.is_finite() && secs > 0.0) {
            return;
        }
        if self.samples.len() == self.max_samples {
            self.samples.pop_front();
        }
        self.samples
            .push_back((num_seqs as f64, num_rows as f64, secs));
        self.since_fit += 1;
        if self.since_fit >= 32 {
            self.refit();
        }
    }

    fn refit(&mut self) {
        self.since_fit = 0;
        let pts: Vec<(f64, f64, f64)> = self
            .calibration
            .iter()
            .chain(self.samples.iter())
            .copied()
            .collect();
        if let Some(c) = least_squares(&pts) {
            self.coef = c;
        }
    }
}

/// Non-negative least squares over (1, B, T): a negative cost term is noise. The whisper of
/// ridge keeps the system solvable when a feature is constant (every online step had the
/// same batch size).
fn least_squares(pts: &[(f64, f64, f64)]) -> Option<[f64; 3]> {
    let rows: Vec<([f64; 3], f64)> = pts.iter().map(|p| ([1.0, p.0, p.1], p.2)).collect();
    nonnegative_fit(&rows, [true; 3], 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_linear_cost() {
        let truth = |b: usize, t: usize| 0.02 + 0.001 * b as f64 + 0.0005 * t as f64;
        let pts: Vec<_> = [
            (1, 1),
            (1, 13),
            (4, 4),
            (4, 52),
            (16, 16),
            (16, 208),
            (8, 40),
        ]
        .iter()
        .map(|&(b, t)| (b, t, truth(b, t)))
        .collect();
        let m = StepCostModel::fit_calibration(&pts);
        let [a, b, c] = m.coefficients();
        assert!(
            (a - 0.02).abs() < 1e-5 && (b - 0.001).abs() < 1e-6 && (c - 0.0005).abs() < 1e-7,
            "{a} {b} {c}"
        );
        assert!((m.predict(32, 416) - truth(32, 416)).abs() < 1e-5);
    }

    #[test]
    fn negative_terms_are_dropped_and_online_samples_refit() {
        // Pure per-row cost with a tiny negative per-seq artefact.
        let pts = vec![(1, 1, 0.001), (2, 2, 0.002), (1, 5, 0.005), (4, 4, 0.0039)];
        let m = StepCostModel::fit_calibration(&pts);
        assert!(
            m.coefficients().iter().all(|&c| c >= 0.0),
            "{:?}",
            m.coefficients()
        );
        let mut m = StepCostModel::from_coefficients(1.0, 0.0, 0.0);
        for i in 0..64 {
            let t = 1 + i % 9;
            m.observe(1, t, 0.01 * t as f64);
        }
        assert!(
            (m.predict(1, 10) - 0.1).abs() < 1e-6,
            "{:?}",
            m.coefficients()
        );
    }
}
