//! Matmuls over quantized weights ([`crate::quant`]). Each parallel task dequantises a
//! block of 16 weight rows into its own small f32 buffer right before the dot products
//! (the whole matrix is never expanded, so resident memory is the quantized size), then
//! runs the f32 dot kernels over every token against those rows.
//!
//! `fp8` emulates Hopper's W8A8 arithmetic: each activation row is quantised to E4M3
//! with its own dynamic scale (`amax/448`), the dot product runs over the E4M3 values
//! (products are exact in f32, sums in f32), and the result is scaled by
//! `weight_scale · activation_scale`.
//!
//! Batch-invariant like the rest of the backend: every output is one dot product of one
//! activation row (quantised on its own) and one weight row, summed in a fixed order.

use super::kernels::{dot, dot4};
use super::tiling::for_rows;
use crate::quant::{e4m3_to_f32, f32_to_e4m3, QuantData, QuantMatrix, E4M3_MAX};

const ROWS: usize = 16;
const TOKENS: usize = 32;

/// E4M3 bytes to their values (AVX2 when present; same values either way).
fn decode_e4m3(q: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was detected at run time.
            return unsafe { decode_e4m3_avx2(q, out) };
        }
    }
    decode_e4m3_impl(q, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_e4m3_avx2(q: &[u8], out: &mut [f32]) {
    decode_e4m3_impl(q, out)
}

#[inline(always)]
fn decode_e4m3_impl(q: &[u8], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(q) {
        *o = crate::quant::fp::e4m3_to_f32_fast(v);
    }
}

/// E4M3 quantisation of one activation row: the E4M3 values (as f32) and the row's scale.
pub fn fp8_quantize_row(x: &[f32], q: &mut [f32]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let s = amax / E4M3_MAX;
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    for (o, &v) in q.iter_mut().zip(x) {
        *o = e4m3_to_f32(f32_to_e4m3(v * inv));
    }
    s
}

/// `out[t][r] = x[t] · W[r]` for quantized `W`: `[t_rows][cols]` → `[t_rows][w.rows]`.
pub fn matmul_quant(x: &[f32], t_rows: usize, w: &QuantMatrix) -> Vec<f32> {
    let (w_rows, cols) = (w.rows, w.cols);
    // fp8: activations to E4M3 per row first (row scales in `xs`).
    let fp8 = matches!(w.data, QuantData::Fp8 { .. });
    let (xq, xs) = if fp8 {
        let mut xq = vec![0.0f32; t_rows * cols];
        let mut xs = vec![0.0f32; t_rows];
        for_rows(t_rows, 16, &mut xq, cols, &mut xs, 1, |t, q, s| {
            s[0] = fp8_quantize_row(&x[t * cols..(t + 1) * cols], q)
        });
        (xq, xs)
    } else {
        (vec![], vec![])
    };
    let xa: &[f32] = if fp8 { &xq } else { x };
    let xr = |t: usize| &xa[t * cols..(t + 1) * cols];
    let mut blocks: Vec<Vec<f32>> = vec![Vec::new(); w_rows.div_ceil(ROWS)];
    for_rows(
        blocks.len(),
        1,
        &mut blocks,
        1,
        &mut [(); 0],
        0,
        |b, out, _| {
            out[0] = {
                let (r0, r1) = (b * ROWS, ((b + 1) * ROWS).min(w_rows));
                let dequant = |r: usize, row: &mut [f32]| match &w.data {
                    // Unscaled E4M3 values; the scales multiply the dot product.
                    QuantData::Fp8 { q, .. } => decode_e4m3(&q[r * cols..(r + 1) * cols], row),
                    _ => w.dequantize_row(r, row),
                };
                // Dots of one weight row against tokens t0..t0+out.len().
                let dots = |wr: &[f32], t0: usize, out: &mut [f32]| {
                    let mut chunks = out.chunks_exact_mut(4);
                    let mut t = t0;
                    for c in &mut chunks {
                        c.copy_from_slice(&dot4([xr(t), xr(t + 1), xr(t + 2), xr(t + 3)], wr));
                        t += 4;
                    }
                    for o in chunks.into_remainder() {
                        *o = dot(xr(t), wr);
                        t += 1;
                    }
                };
                // [row - r0][t]
                let mut res = vec![0.0f32; (r1 - r0) * t_rows];
                if t_rows <= TOKENS {
                    // Few tokens (decode): one row at a time, its buffer stays in L1.
                    let mut wr = vec![0.0f32; cols];
                    for (i, r) in (r0..r1).enumerate() {
                        dequant(r, &mut wr);
                        dots(&wr, 0, &mut res[i * t_rows..(i + 1) * t_rows]);
                    }
                } else {
                    let mut wbuf = vec![0.0f32; (r1 - r0) * cols];
                    for (r, row) in (r0..r1).zip(wbuf.chunks_exact_mut(cols)) {
                        dequant(r, row);
                    }
                    for t0 in (0..t_rows).step_by(TOKENS) {
                        let t1 = (t0 + TOKENS).min(t_rows);
                        for (i, wr) in wbuf.chunks_exact(cols).enumerate() {
                            dots(wr, t0, &mut res[i * t_rows + t0..i * t_rows + t1]);
                        }
                    }
                }
                if let QuantData::Fp8 { scale, .. } = &w.data {
                    for (i, row) in res.chunks_mut(t_rows.max(1)).enumerate() {
                        for (t, o) in row.iter_mut().enumerate() {
                            *o *= scale[r0 + i] * xs[t];
                        }
                    }
                }
                res
            }
        },
    );
    let mut out = vec![0.0f32; t_rows * w_rows];
    for (b, res) in blocks.iter().enumerate() {
        for (i, row) in res.chunks(t_rows.max(1)).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                out[t * w_rows + b * ROWS + i] = v;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::Scheme;

    fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104729) % 1009) as f32 / 1009.0 - 0.5) * 2.0)
            .collect()
    }

    /// The quantized matmul equals dequantise-then-f32-matmul (exactly for the
    /// weight-only schemes, within E4M3's activation rounding for fp8), and every value
    /// is independent of how many tokens share the call.
    #[test]
    fn quant_matmul_matches_dequantised_f32_and_is_batch_invariant() {
        let (rows, cols, t) = (37, 256, 11);
        let w = data(rows * cols, 1);
        let x = data(t * cols, 2);
        for scheme in Scheme::ALL {
            let m = QuantMatrix::quantize_rtn(scheme, rows, cols, &w, None, None).unwrap();
            let deq = m.dequantize();
            let want = super::super::matmul_t(&x, t, &deq, rows, cols);
            let got = matmul_quant(&x, t, &m);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                let xt = &x[i / rows * cols..(i / rows + 1) * cols];
                let xnorm: f32 = xt.iter().map(|v| v * v).sum::<f32>().sqrt();
                let tol = match scheme {
                    // |Δx| ≤ 2^-4·|x| per element (3 mantissa bits), errors of random sign.
                    Scheme::Fp8 => 0.1 * xnorm,
                    _ => 0.0,
                };
                assert!((a - b).abs() <= tol, "{scheme} [{i}]: {a} vs {b}");
            }
            for tt in 0..t {
                let one = matmul_quant(&x[tt * cols..(tt + 1) * cols], 1, &m);
                assert_eq!(one, got[tt * rows..(tt + 1) * rows], "{scheme}: token {tt}");
            }
        }
    }
}
