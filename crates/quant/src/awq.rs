//! AWQ-style activation-aware scaling (Lin et al., 2023) for int4: input channels that
//! carry large activations are scaled up before quantisation (`W·diag(s)`) and the
//! scale is undone on dequantisation (`smooth = 1/s`), so their weights lose less
//! precision. `s = mean|x|^α`, normalised to `√(max·min) = 1`; α is chosen on a grid
//! to minimise the layer's output error on calibration activations,
//! `Σ_rows Δw·H·Δwᵀ = ‖X·ΔWᵀ‖²` (over a sample of rows). α = 0 is plain
//! round-to-nearest, so the search never picks something worse than it on the sample.

use crate::calib::InputStats;
use rayon::prelude::*;
use wring_backend::cpu::dot;
use wring_backend::quant::{QuantMatrix, Scheme};

/// The α grid: 0, 0.1, …, 1.
pub const GRID: usize = 11;
/// Rows the error is evaluated on, at most (evenly spaced).
pub const SAMPLE_ROWS: usize = 64;

/// `Σ_r Δ_r·H·Δ_rᵀ` over rows `rows` of `delta` (`[*][cols]`).
pub fn output_error(delta: &[f32], cols: usize, h: &[f32], rows: &[usize]) -> f64 {
    rows.par_iter()
        .map(|&r| {
            let d = &delta[r * cols..(r + 1) * cols];
            let mut s = 0.0f64;
            for (i, &di) in d.iter().enumerate() {
                if di != 0.0 {
                    s += di as f64 * dot(&h[i * cols..(i + 1) * cols], d) as f64;
                }
            }
            s
        })
        .sum()
}

/// Evenly spaced sample of at most [`SAMPLE_ROWS`] rows.
pub fn sample_rows(rows: usize) -> Vec<usize> {
    let step = rows.div_ceil(SAMPLE_ROWS).max(1);
    (0..rows).step_by(step).collect()
}

/// Output error of RTN int4 of `w` with per-channel scale `s` (None: no scaling).
fn rtn_error(
    w: &[f32],
    cols: usize,
    group: usize,
    s: Option<&[f32]>,
    st: &InputStats,
    rows: &[usize],
) -> f64 {
    // Only the sampled rows matter: quantise just those.
    let mut sub = Vec::with_capacity(rows.len() * cols);
    for &r in rows {
        let row = &w[r * cols..(r + 1) * cols];
        match s {
            Some(s) => sub.extend(row.iter().zip(s).map(|(a, b)| a * b)),
            None => sub.extend_from_slice(row),
        }
    }
    let smooth = s.map(|s| s.iter().map(|v| 1.0 / v).collect());
    let q = QuantMatrix::quantize_rtn(Scheme::Int4, rows.len(), cols, &sub, Some(group), smooth)
        .expect("validated shapes");
    let deq = q.dequantize();
    let delta: Vec<f32> = rows
        .iter()
        .enumerate()
        .flat_map(|(k, &r)| {
            let (w, d) = (&w[r * cols..(r + 1) * cols], &deq[k * cols..(k + 1) * cols]);
            w.iter().zip(d).map(|(a, b)| a - b).collect::<Vec<_>>()
        })
        .collect();
    let all: Vec<usize> = (0..rows.len()).collect();
    output_error(&delta, cols, &st.h, &all)
}

/// Result of the α search.
#[derive(Debug, Clone)]
pub struct AwqChoice {
    pub alpha: f32,
    /// `s` per input channel (None when α = 0 won).
    pub scale: Option<Vec<f32>>,
    /// Output error on the sampled rows: plain RTN, and with the chosen scale.
    pub err_rtn: f64,
    pub err_best: f64,
}

/// Searches α for one weight matrix.
pub fn search(w: &[f32], rows: usize, cols: usize, group: usize, st: &InputStats) -> AwqChoice {
    let sample = sample_rows(rows);
    let mean = st.mean_abs();
    let err_rtn = rtn_error(w, cols, group, None, st, &sample);
    let mut best = AwqChoice {
        alpha: 0.0,
        scale: None,
        err_rtn,
        err_best: err_rtn,
    };
    for k in 1..GRID {
        let alpha = k as f32 / (GRID - 1) as f32;
        let mut s: Vec<f32> = mean.iter().map(|&m| m.max(1e-6).powf(alpha)).collect();
        let (mx, mn) = s
            .iter()
            .fold((0.0f32, f32::MAX), |(a, b), &v| (a.max(v), b.min(v)));
        let norm = (mx * mn).sqrt();
        if !(norm > 0.0 && norm.is_finite()) {
            continue;
        }
        s.iter_mut().for_each(|v| *v /= norm);
        let e = rtn_error(w, cols, group, Some(&s), st, &sample);
        if e < best.err_best {
            best = AwqChoice {
                alpha,
                scale: Some(s),
                err_rtn,
                err_best: e,
            };
        }
    }
    best
}
