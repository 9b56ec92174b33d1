//! Step-cost model: seconds of one forward step as a function of its shape,
//! `t = a + b·seqs + c·rows + e·logit_rows + d·attended`, fitted by least squares to
//! steps timed at start-up on the actual runner and refitted as real steps run.
//!
//! Rows with logits are priced apart from rows without (a prefill chunk's rows skip the
//! LM head, a verify step's rows do not: on the default model the LM head is a fifth of
//! a row's weights), and attention by the (query, key) pairs it computes, so a drafted
//! row of a sequence hundreds of tokens long costs what it really does. Without those
//! two terms, refits over real steps (mostly prefill rows beside decode rows on the
//! CPU) priced a verify row below its cost and the adaptive policy drafted where it
//! could not pay (results/2026-12-02-cpu-spec-row-price).

use crate::least_squares::nonnegative_fit;
use std::collections::{BTreeMap, VecDeque};

/// Terms of the model: fixed, per sequence, per row, per logit row, per attended pair.
const TERMS: usize = 5;

/// The shape of a step (or of one sequence's part of it), as the model prices it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    pub seqs: f64,
    /// Query rows.
    pub rows: f64,
    /// Rows whose logits (or argmax) the step computes.
    pub logit_rows: f64,
    /// Σ over query rows of the keys the row attends to (position + 1).
    pub attended: f64,
}

impl StepShape {
    /// One sequence of context `context` (tokens already in the KV cache) running `q`
    /// query rows that all get logits (a decode or verify row set).
    pub fn verify(context: usize, q: usize) -> Self {
        let (l, q) = (context as f64, q as f64);
        Self {
            seqs: 1.0,
            rows: q,
            logit_rows: q,
            attended: q * l + q * (q + 1.0) / 2.0,
        }
    }

    pub fn plus(self, o: StepShape) -> StepShape {
        StepShape {
            seqs: self.seqs + o.seqs,
            rows: self.rows + o.rows,
            logit_rows: self.logit_rows + o.logit_rows,
            attended: self.attended + o.attended,
        }
    }

    fn features(&self) -> [f64; TERMS] {
        [1.0, self.seqs, self.rows, self.logit_rows, self.attended]
    }
}

/// Seconds of padded verify steps as the start-up probes measured them: `seqs`
/// sequences of `q` rows each, every row with logits, from an empty context. On a GPU a
/// step's time is not linear in its rows (GEMM tiles, attention blocks, a replayed graph
/// per shape), so a padded K is priced from what its shape was measured to cost; a
/// linear fit through K = 0, 4 and 12 put 32 × 9 between them wherever the line ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PaddedSteps {
    /// q → (sequences, seconds), sorted by sequences.
    by_q: BTreeMap<usize, Vec<(usize, f64)>>,
}

impl PaddedSteps {
    /// The probes among `points` that are uniform verify steps from an empty context.
    pub fn from_points(points: &[(StepShape, f64)]) -> Self {
        let mut by_q: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
        for &(s, secs) in points {
            if s.seqs < 1.0 || s.rows != s.logit_rows || s.rows % s.seqs != 0.0 {
                continue;
            }
            let q = (s.rows / s.seqs) as usize;
            let fresh = s.seqs * (q * (q + 1)) as f64 / 2.0;
            if (s.attended - fresh).abs() > 0.5 || !(secs.is_finite() && secs > 0.0) {
                continue;
            }
            by_q.entry(q).or_default().push((s.seqs as usize, secs));
        }
        for v in by_q.values_mut() {
            v.sort_by_key(|&(b, _)| b);
            v.dedup_by_key(|&mut (b, _)| b);
        }
        Self { by_q }
    }

    /// Seconds of `seqs` sequences of `q` rows from an empty context: interpolated
    /// linearly between the measured batch sizes (beyond them, along the nearest two).
    /// None when `q` was not measured.
    pub fn secs(&self, seqs: usize, q: usize) -> Option<f64> {
        let v = self.by_q.get(&q)?;
        let b = seqs as f64;
        let at = |i: usize| (v[i].0 as f64, v[i].1);
        match v.len() {
            0 => None,
            1 => Some(v[0].1 * b / v[0].0 as f64),
            n => {
                let i = v
                    .iter()
                    .position(|&(s, _)| s >= seqs)
                    .unwrap_or(n - 1)
                    .max(1);
                let ((b0, t0), (b1, t1)) = (at(i - 1), at(i));
                Some((t0 + (t1 - t0) * (b - b0) / (b1 - b0)).max(1e-9))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct StepCostModel {
    /// (a, b, c, e, d): fixed, per sequence, per row, per logit row, per attended pair.
    coef: [f64; TERMS],
    /// Measured padded verify steps (priced by shape where present).
    padded: PaddedSteps,
    /// Recent (shape, seconds) observations.
    samples: VecDeque<(StepShape, f64)>,
    calibration: Vec<(StepShape, f64)>,
    max_samples: usize,
    since_fit: usize,
}

impl StepCostModel {
    /// A model with only the fixed, per-sequence and per-row terms (every row priced
    /// the same, attention free).
    pub fn from_coefficients(a: f64, b: f64, c: f64) -> Self {
        Self::from_terms([a, b, c, 0.0, 0.0])
    }

    /// (fixed, per sequence, per row, per logit row, per attended pair).
    pub fn from_terms(coef: [f64; TERMS]) -> Self {
        Self {
            coef,
            padded: PaddedSteps::default(),
            samples: VecDeque::new(),
            calibration: Vec::new(),
            max_samples: 512,
            since_fit: 0,
        }
    }

    /// Fits a model to calibration points (shape, seconds). They stay in every
    /// later refit so the model keeps covering shapes traffic has not visited.
    pub fn fit_calibration(points: &[(StepShape, f64)]) -> Self {
        let mut m = Self::from_terms([0.0; TERMS]);
        m.calibration = points.to_vec();
        m.padded = PaddedSteps::from_points(points);
        m.refit();
        m
    }

    /// Seconds of a padded verify step of `seqs` sequences of `q` rows whose contexts
    /// sum to `contexts` tokens: the measured step of that shape, plus the attention of
    /// its rows over the contexts (the linear model's per-pair term). None when that
    /// shape was not measured.
    pub fn padded_step(&self, seqs: usize, q: usize, contexts: usize) -> Option<f64> {
        let t = self.padded.secs(seqs, q)?;
        Some(t + self.coef[4] * (q * contexts) as f64)
    }

    /// (fixed, per sequence, per row, per logit row, per attended pair).
    pub fn coefficients(&self) -> [f64; TERMS] {
        self.coef
    }

    /// Seconds of a step of this shape, without the floor `predict` applies.
    pub fn linear(&self, s: StepShape) -> f64 {
        self.coef.iter().zip(s.features()).map(|(c, f)| c * f).sum()
    }

    pub fn predict(&self, s: StepShape) -> f64 {
        self.linear(s).max(1e-6)
    }

    /// The fixed cost of a step (paid once, whoever is in it).
    pub fn fixed(&self) -> f64 {
        self.coef[0]
    }

    /// Seconds the `j`-th query row (0-based) of a sequence of context `context` adds,
    /// logits included: the price of a drafted row.
    pub fn row_cost(&self, context: usize, j: usize) -> f64 {
        self.coef[2] + self.coef[3] + self.coef[4] * (context + j + 1) as f64
    }

    /// Records a real step's time; refits every 32 steps.
    pub fn observe(&mut self, shape: StepShape, secs: f64) {
        if !(secs.is_finite() && secs > 0.0) {
            return;
        }
        if self.samples.len() == self.max_samples {
            self.samples.pop_front();
        }
        self.samples.push_back((shape, secs));
        self.since_fit += 1;
        if self.since_fit >= 32 {
            self.refit();
        }
    }

    fn refit(&mut self) {
        self.since_fit = 0;
        let rows: Vec<([f64; TERMS], f64)> = self
            .calibration
            .iter()
            .chain(self.samples.iter())
            .map(|(s, secs)| (s.features(), *secs))
            .collect();
        // Non-negative: a negative cost term is noise. The whisper of ridge keeps the
        // system solvable when features move together (every online step had the same
        // batch size, or every row had logits).
        if let Some(c) = nonnegative_fit(&rows, [true; TERMS], 1e-9) {
            self.coef = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefill(context: usize, q: usize) -> StepShape {
        StepShape {
            logit_rows: 1.0,
            ..StepShape::verify(context, q)
        }
    }

    #[test]
    fn fit_recovers_a_linear_cost() {
        let truth = StepCostModel::from_terms([0.02, 0.001, 0.0005, 0.0002, 1e-7]);
        let mut shapes = Vec::new();
        for &(b, q, l) in &[
            (1, 1, 0),
            (1, 13, 0),
            (4, 4, 512),
            (4, 5, 0),
            (16, 1, 0),
            (16, 13, 512),
            (8, 5, 100),
        ] {
            let one = StepShape::verify(l, q);
            let mut s = StepShape::default();
            for _ in 0..b {
                s = s.plus(one);
            }
            shapes.push(s);
        }
        shapes.push(prefill(0, 128));
        shapes.push(prefill(256, 64));
        let pts: Vec<_> = shapes.iter().map(|&s| (s, truth.linear(s))).collect();
        let m = StepCostModel::fit_calibration(&pts);
        for (got, want) in m.coefficients().iter().zip(truth.coefficients()) {
            assert!(
                (got - want).abs() < 1e-3 * want.max(1e-6),
                "{got} vs {want}"
            );
        }
        let big = StepShape::verify(700, 9);
        assert!((m.predict(big) - truth.predict(big)).abs() < 1e-6);
        assert!((m.row_cost(100, 2) - (0.0005 + 0.0002 + 1e-7 * 103.0)).abs() < 1e-9);
    }

    #[test]
    fn negative_terms_are_dropped_and_online_samples_refit() {
        // Pure per-row cost with a tiny negative per-seq artefact.
        let pts: Vec<_> = [(1, 1, 0.001), (2, 1, 0.002), (1, 5, 0.005), (4, 1, 0.0039)]
            .iter()
            .map(|&(b, q, secs)| {
                let mut s = StepShape::default();
                for _ in 0..b {
                    s = s.plus(StepShape::verify(0, q));
                }
                (s, secs)
            })
            .collect();
        let m = StepCostModel::fit_calibration(&pts);
        assert!(
            m.coefficients().iter().all(|&c| c >= 0.0),
            "{:?}",
            m.coefficients()
        );
        let mut m = StepCostModel::from_coefficients(1.0, 0.0, 0.0);
        for i in 0..64 {
            let t = 1 + i % 9;
            m.observe(StepShape::verify(0, t), 0.01 * t as f64);
        }
        let ten = StepShape::verify(0, 10);
        assert!(
            (m.predict(ten) - 0.1).abs() < 1e-6,
            "{:?}",
            m.coefficients()
        );
    }

    #[test]
    fn prefill_rows_do_not_make_verify_rows_look_cheap() {
        // The old model (one price per row) refitted on real CPU steps — mostly prefill
        // rows without logits — priced a verify row at the prefill row's cost. With the
        // logit term, a verify row keeps its price whatever the mix of steps.
        let truth = StepCostModel::from_terms([0.010, 0.0002, 0.0010, 0.0004, 0.0]);
        let mut pts = vec![];
        for b in [1usize, 8, 16, 32] {
            for q in [1usize, 5, 13] {
                let mut s = StepShape::default();
                for _ in 0..b {
                    s = s.plus(StepShape::verify(0, q));
                }
                pts.push((s, truth.linear(s)));
            }
        }
        let p = prefill(0, 128);
        pts.push((p, truth.linear(p)));
        let mut m = StepCostModel::fit_calibration(&pts);
        for i in 0..256 {
            // 32 decode rows beside a prefill chunk of 40 to 100 tokens.
            let mut s = StepShape::default();
            for _ in 0..32 {
                s = s.plus(StepShape::verify(0, 1));
            }
            let chunk = 40 + (i * 7) % 61;
            s = s.plus(prefill(0, chunk));
            m.observe(s, truth.linear(s));
        }
        let got = m.row_cost(0, 0);
        let want = truth.row_cost(0, 0);
        assert!((got - want).abs() < 0.02 * want, "{got} vs {want}");
    }

    #[test]
    fn padded_steps_are_priced_by_their_measured_shape() {
        let step = |b: usize, q: usize| {
            let mut s = StepShape::default();
            for _ in 0..b {
                s = s.plus(StepShape::verify(0, q));
            }
            s
        };
        // Not linear in rows: 32 x 9 costs as much as 32 x 13 (one GEMM tile more
        // than 32 x 5), which a line through q = 1, 5, 13 cannot say.
        let mut pts = vec![];
        for (b, q, secs) in [
            (8, 1, 0.0010),
            (32, 1, 0.0012),
            (8, 5, 0.0011),
            (32, 5, 0.0015),
            (8, 9, 0.0014),
            (32, 9, 0.0030),
            (8, 13, 0.0015),
            (32, 13, 0.0031),
        ] {
            pts.push((step(b, q), secs));
        }
        // Neither a long-context probe nor a prefill probe is a padded step.
        pts.push((step(32, 1).plus(StepShape::verify(512, 1)), 0.5));
        pts.push((prefill(0, 128), 0.5));
        let m = StepCostModel::fit_calibration(&pts);
        assert_eq!(m.padded_step(32, 9, 0), Some(0.0030));
        assert_eq!(m.padded_step(8, 5, 0), Some(0.0011));
        let mid = m.padded_step(20, 5, 0).unwrap();
        assert!((mid - 0.0013).abs() < 1e-9, "{mid}");
        assert_eq!(m.padded_step(32, 7, 0), None, "never measured");
        // Attention over real contexts is added by the per-pair term.
        let with_ctx = m.padded_step(32, 5, 32 * 400).unwrap();
        assert!(with_ctx >= 0.0015);
        assert_eq!(
            with_ctx - 0.0015,
            m.coefficients()[4] * (5 * 32 * 400) as f64
        );
    }
}
