//! Non-negative least squares over a few cost terms, shared by the adaptive K policy's
//! step-cost model and the fair-step budget (both fit step seconds to a fixed cost plus
//! per-unit costs, and neither may believe in a negative cost).

/// Fits `y ≈ coef · features` over `samples`, starting from the terms in `active`: solves the
/// normal equations (each feature scaled to its largest magnitude, plus a ridge of
/// `ridge` × the largest diagonal so features that move together stay solvable), drops a term
/// that comes out negative (noise) and refits without it. A feature that is zero in every
/// sample is dropped too. None when the samples cannot determine a fit.
pub(crate) fn nonnegative_fit<const N: usize>(
    samples: &[([f64; N], f64)],
    mut active: [bool; N],
    ridge: f64,
) -> Option<[f64; N]> {
    for _ in 0..N {
        let idx: Vec<usize> = (0..N).filter(|&i| active[i]).collect();
        let n = idx.len();
        if n == 0 || samples.len() < n {
            return None;
        }
        let mut scale = [0.0f64; N];
        for (f, _) in samples {
            for (s, v) in scale.iter_mut().zip(f) {
                *s = s.max(v.abs());
            }
        }
        if idx.iter().any(|&i| scale[i] == 0.0) {
            for &i in &idx {
                active[i] = scale[i] != 0.0;
            }
            continue;
        }
        let mut ata = vec![vec![0.0; n]; n];
        let mut atb = vec![0.0; n];
        for (f, y) in samples {
            for (r, &i) in idx.iter().enumerate() {
                let fi = f[i] / scale[i];
                atb[r] += fi * y;
                for (c, &j) in idx.iter().enumerate() {
                    ata[r][c] += fi * f[j] / scale[j];
                }
            }
        }
        let diag = (0..n).map(|i| ata[i][i]).fold(0.0f64, f64::max).max(1e-30);
        for (i, row) in ata.iter_mut().enumerate() {
            row[i] += ridge * diag;
        }
        let x = solve(ata, atb)?;
        let mut coef = [0.0; N];
        let mut ok = true;
        for (r, &i) in idx.iter().enumerate() {
            coef[i] = x[r] / scale[i];
            if x[r] < 0.0 {
                active[i] = false;
                ok = false;
            }
        }
        if ok {
            return Some(coef);
        }
    }
    None
}

/// Gaussian elimination with partial pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-15 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        for r in col + 1..n {
            let f = a[r][col] / a[col][col];
            let pivot_row = a[col].clone();
            for (x, p) in a[r].iter_mut().zip(&pivot_row).skip(col) {
                *x -= f * p;
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}
