//! GPTQ (Frantar et al., 2022) for group-wise int4: columns are quantised one at a
//! time and each one's rounding error is pushed onto the columns not yet quantised,
//! weighted by the inverse Hessian `H⁻¹` of the layer's calibration inputs
//! (`H = XᵀX`, damped). As in the reference implementation: the upper Cholesky factor
//! `U` of `H⁻¹` (`H⁻¹ = UᵀU`) drives the updates, columns go in blocks of 128 with
//! the updates to later blocks applied lazily once per block, and each group's scale
//! and zero are chosen from the (already error-updated) weights when the quantiser
//! reaches the group's first column.
//!
//! Rows are independent given `U`, so they run in parallel.

use anyhow::{bail, Result};
use half::f16;
use rayon::prelude::*;
use wring_backend::quant::{
    int4_decode, int4_encode, int4_group_params, pack_nibbles, QuantData, QuantMatrix,
};

/// Columns per lazy-update block.
pub const BLOCK: usize = 128;

/// Runs `$body` compiled with AVX2+FMA when the CPU has them (same operations, same
/// results: only the vector width changes), else as is.
macro_rules! avx2_dispatch {
    ($name:ident, $impl_:ident, ($($arg:ident : $ty:ty),*) -> $ret:ty) => {
        fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $impl_($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the features were detected at run time.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $impl_($($arg),*)
        }
    };
}

#[inline(always)]
fn dot64(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 4];
    let n = a.len() / 4 * 4;
    for i in (0..n).step_by(4) {
        for k in 0..4 {
            acc[k] += a[i + k] * b[i + k];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for i in n..a.len() {
        s += a[i] * b[i];
    }
    s
}

avx2_dispatch!(cholesky_lower_fast, cholesky_lower_impl, (a: &mut [f64], n: usize) -> Result<()>);

/// Lower Cholesky factor of the symmetric positive-definite `a` (`[n][n]`), in place
/// (the strict upper triangle is zeroed).
pub fn cholesky_lower(a: &mut [f64], n: usize) -> Result<()> {
    cholesky_lower_fast(a, n)
}

#[inline(always)]
fn cholesky_lower_impl(a: &mut [f64], n: usize) -> Result<()> {
    for i in 0..n {
        for j in 0..=i {
            let (ri, rj) = (&a[i * n..i * n + j], &a[j * n..j * n + j]);
            let s = a[i * n + j] - dot64(ri, rj);
            if i == j {
                if s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                    bail!("matrix is not positive definite (pivot {i}: {s})");
                }
                a[i * n + i] = s.sqrt();
            } else {
                a[i * n + j] = s / a[j * n + j];
            }
        }
        for j in i + 1..n {
            a[i * n + j] = 0.0;
        }
    }
    Ok(())
}

/// Upper `U` with `UᵀU = H⁻¹`: with `P` the reversal permutation and `L` the lower
/// Cholesky factor of `P·H·P`, `U = P·L⁻¹·P`. Returned row-major `[n][n]`.
pub fn inverse_cholesky_upper(h: &[f64], n: usize) -> Result<Vec<f64>> {
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            l[i * n + j] = h[(n - 1 - i) * n + (n - 1 - j)];
        }
    }
    cholesky_lower(&mut l, n)?;
    // Columns of L⁻¹ by forward substitution, in parallel; xt[j] = column j.
    let xt: Vec<Vec<f64>> = (0..n)
        .into_par_iter()
        .map(|j| inverse_column(&l, n, j))
        .collect();
    // U[a][b] = L⁻¹[n-1-a][n-1-b] = xt[n-1-b][n-1-a].
    let mut u = vec![0.0f64; n * n];
    for a in 0..n {
        for b in a..n {
            u[a * n + b] = xt[n - 1 - b][n - 1 - a];
        }
    }
    Ok(u)
}

avx2_dispatch!(inverse_column, inverse_column_impl, (l: &[f64], n: usize, j: usize) -> Vec<f64>);

/// Column `j` of `L⁻¹` (lower `L`) by forward substitution.
#[inline(always)]
fn inverse_column_impl(l: &[f64], n: usize, j: usize) -> Vec<f64> {
    let mut x = vec![0.0f64; n];
    x[j] = 1.0 / l[j * n + j];
    for i in j + 1..n {
        let s = dot64(&l[i * n + j..i * n + i], &x[j..i]);
        x[i] = -s / l[i * n + i];
    }
    x
}

/// Damped `H` in f64: `damp · mean(diag)` added to the diagonal; channels never
/// active (zero diagonal) get 1 on the diagonal (their weights are zeroed by the caller).
pub fn damped_hessian(h: &[f32], n: usize, damp: f64) -> (Vec<f64>, Vec<bool>) {
    let mut hd: Vec<f64> = h.iter().map(|&v| v as f64).collect();
    let dead: Vec<bool> = (0..n).map(|i| hd[i * n + i] <= 0.0).collect();
    let mean = (0..n).map(|i| hd[i * n + i]).sum::<f64>() / n as f64;
    let add = damp * if mean > 0.0 { mean } else { 1.0 };
    for i in 0..n {
        if dead[i] {
            hd[i * n + i] = 1.0;
        }
        hd[i * n + i] += add;
    }
    (hd, dead)
}

type RowCodes = (Vec<u8>, Vec<f16>, Vec<u8>);

avx2_dispatch!(gptq_row, gptq_row_impl, (w: &[f32], u: &[f32], dead: &[bool], group: usize) -> RowCodes);

/// One row through GPTQ: its codes, group scales and zeros.
#[inline(always)]
fn gptq_row_impl(w: &[f32], u: &[f32], dead: &[bool], group: usize) -> RowCodes {
    let cols = w.len();
    let ng = cols.div_ceil(group);
    let mut x: Vec<f32> = w.to_vec();
    for (c, d) in dead.iter().enumerate() {
        if *d {
            x[c] = 0.0;
        }
    }
    let mut codes = vec![0u8; cols];
    let mut scales = Vec::with_capacity(ng);
    let mut zeros = Vec::with_capacity(ng);
    let (mut s, mut z) = (0.0f32, 0u8);
    let mut err = [0.0f32; BLOCK];
    for b0 in (0..cols).step_by(BLOCK) {
        let b1 = (b0 + BLOCK).min(cols);
        for i in b0..b1 {
            if i % group == 0 {
                let (sh, zz) = int4_group_params(&x[i..(i + group).min(cols)]);
                scales.push(sh);
                zeros.push(zz);
                (s, z) = (sh.to_f32(), zz);
            }
            let q = int4_encode(x[i], s, z);
            codes[i] = q;
            let e = (x[i] - int4_decode(q, s, z)) / u[i * cols + i];
            // Within the block: update the columns not yet quantised.
            let ur = &u[i * cols..(i + 1) * cols];
            for j in i + 1..b1 {
                x[j] -= e * ur[j];
            }
            err[i - b0] = e;
        }
        // Lazy batch update of every later column.
        for (k, &e) in err[..b1 - b0].iter().enumerate() {
            let ur = &u[(b0 + k) * cols..(b0 + k + 1) * cols];
            for j in b1..cols {
                x[j] -= e * ur[j];
            }
        }
    }
    (codes, scales, zeros)
}

/// GPTQ int4 quantisation of row-major `w` (`[rows][cols]`) under input Gram matrix
/// `h` (`[cols][cols]`). `smooth` is stored with the result (the caller has already
/// multiplied `w` by its inverse and scaled `h` accordingly).
pub fn gptq_int4(
    w: &[f32],
    rows: usize,
    cols: usize,
    h: &[f32],
    group: usize,
    damp: f64,
    smooth: Option<Vec<f32>>,
) -> Result<QuantMatrix> {
    if !cols.is_multiple_of(2) || !group.is_multiple_of(2) {
        bail!("int4 needs an even number of columns and an even group ({cols}, {group})");
    }
    let (hd, dead) = damped_hessian(h, cols, damp);
    let u64 = inverse_cholesky_upper(&hd, cols)?;
    let u: Vec<f32> = u64.iter().map(|&v| v as f32).collect();
    let ng = cols.div_ceil(group);
    let per_row: Vec<(Vec<u8>, Vec<f16>, Vec<u8>)> = (0..rows)
        .into_par_iter()
        .map(|r| gptq_row(&w[r * cols..(r + 1) * cols], &u, &dead, group))
        .collect();
    let mut codes = Vec::with_capacity(rows * cols);
    let mut scale = Vec::with_capacity(rows * ng);
    let mut zero = Vec::with_capacity(rows * ng);
    for (c, s, z) in per_row {
        codes.extend(c);
        scale.extend(s);
        zero.extend(z);
    }
    Ok(QuantMatrix {
        rows,
        cols,
        data: QuantData::Int4 {
            group,
            q: pack_nibbles(&codes),
            scale,
            zero,
        },
        smooth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2-compiled paths compute exactly what the portable code does.
    #[test]
    fn avx2_and_portable_paths_agree_bitwise() {
        let n = 40;
        let a: Vec<f64> = (0..n * n)
            .map(|i| ((i * 37 % 23) as f64 - 11.0) / 7.0)
            .collect();
        let mut h = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                h[i * n + j] = (0..n).map(|k| a[k * n + i] * a[k * n + j]).sum::<f64>()
                    + if i == j { 1.0 } else { 0.0 };
            }
        }
        let (mut l1, mut l2) = (h.clone(), h.clone());
        cholesky_lower(&mut l1, n).unwrap();
        cholesky_lower_impl(&mut l2, n).unwrap();
        assert_eq!(l1, l2);
        for j in [0, 7, n - 1] {
            assert_eq!(inverse_column(&l1, n, j), inverse_column_impl(&l1, n, j));
        }
        let u: Vec<f32> = inverse_cholesky_upper(&h, n)
            .unwrap()
            .iter()
            .map(|&v| v as f32)
            .collect();
        let w: Vec<f32> = (0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0).collect();
        let dead = vec![false; n];
        assert_eq!(gptq_row(&w, &u, &dead, 8), gptq_row_impl(&w, &u, &dead, 8));
    }

    #[test]
    fn inverse_cholesky_upper_factors_the_inverse() {
        let n = 7;
        // SPD: AᵀA + n·I.
        let a: Vec<f64> = (0..n * n)
            .map(|i| ((i * 37 % 11) as f64 - 5.0) / 3.0)
            .collect();
        let mut h = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                h[i * n + j] = (0..n).map(|k| a[k * n + i] * a[k * n + j]).sum::<f64>()
                    + if i == j { n as f64 } else { 0.0 };
            }
        }
        let u = inverse_cholesky_upper(&h, n).unwrap();
        // H · (UᵀU) = I.
        for i in 0..n {
            for j in 0..n {
                let mut v = 0.0;
                for k in 0..n {
                    let utu: f64 = (0..n).map(|m| u[m * n + k] * u[m * n + j]).sum();
                    v += h[i * n + k] * utu;
                }
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((v - want).abs() < 1e-9, "[{i}][{j}] = {v}");
            }
            for j in 0..i {
                assert_eq!(u[i * n + j], 0.0);
            }
        }
    }
}
