//! CPU kernels. Every reduction runs in one fixed order per output value, so results
//! are independent of batch composition and thread count.

use crate::{AttnShape, RopeSpec, SeqInput};
use rayon::prelude::*;

/// Dot product with 8-lane × 4-accumulator structure (AVX2+FMA when present).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were detected at run time.
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot_scalar(a, b)
}

fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 32];
    let n = a.len() / 32 * 32;
    for i in (0..n).step_by(32) {
        for l in 0..32 {
            acc[l] = a[i + l].mul_add(b[i + l], acc[l]);
        }
    }
    let mut lanes = [0.0f32; 8];
    for (l, lane) in lanes.iter_mut().enumerate() {
        *lane = (acc[l] + acc[8 + l]) + (acc[16 + l] + acc[24 + l]);
    }
    let mut s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    for i in n..a.len() {
        s = a[i].mul_add(b[i], s);
    }
    s
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len() / 32 * 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut acc2 = _mm256_setzero_ps();
    let mut acc3 = _mm256_setzero_ps();
    let mut i = 0;
    while i < n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
        acc1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pb.add(i + 8)),
            acc1,
        );
        acc2 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 16)),
            _mm256_loadu_ps(pb.add(i + 16)),
            acc2,
        );
        acc3 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 24)),
            _mm256_loadu_ps(pb.add(i + 24)),
            acc3,
        );
        i += 32;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
    // lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then (0+1): same tree as dot_scalar.
    let lo = _mm256_castps256_ps128(sum);
    let hi = _mm256_extractf128_ps(sum, 1);
    let s4 = _mm_add_ps(lo, hi);
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    let mut s = _mm_cvtss_f32(s1);
    for j in n..a.len() {
        s = a[j].mul_add(b[j], s);
    }
    s
}

/// `out[t][o] = dot(x[t], w[o])` for `x: [t_rows][cols]`, `w: [w_rows][cols]`.
pub fn matmul_t(x: &[f32], t_rows: usize, w: &[f32], w_rows: usize, cols: usize) -> Vec<f32> {
    tiled(t_rows, w_rows, |t, r| {
        dot(&x[t * cols..(t + 1) * cols], &w[r * cols..(r + 1) * cols])
    })
}

/// Like [`matmul_t`] over 8-bit weights; each activation row is quantised on its own.
pub fn matmul_q8(x: &[f32], t_rows: usize, w: &super::q8::Q8Matrix) -> Vec<f32> {
    use super::q8::{dot_q8, quantize_row, QK};
    let cols = w.cols;
    let nb = cols / QK;
    let mut xq = vec![0i8; t_rows * cols];
    let mut xs = vec![0f32; t_rows * nb];
    xq.par_chunks_mut(cols)
        .zip(xs.par_chunks_mut(nb))
        .zip(x.par_chunks(cols))
        .for_each(|((q, s), xr)| quantize_row(xr, q, s));
    tiled(t_rows, w.rows, |t, r| {
        let (wq, ws) = w.row(r);
        dot_q8(
            &xq[t * cols..(t + 1) * cols],
            &xs[t * nb..(t + 1) * nb],
            wq,
            ws,
        )
    })
}

/// `out[t][r] = value(t, r)` laid out `[t_rows][w_rows]`. Parallel over blocks of weight
/// rows; inside a block, tokens are walked in tiles so the block's weights and a tile of
/// activations stay in cache together. Tiling only orders *which* values are computed:
/// each value is one call, so results do not depend on `t_rows` (batch invariance).
fn tiled(t_rows: usize, w_rows: usize, value: impl Fn(usize, usize) -> f32 + Sync) -> Vec<f32> {
    const ROWS: usize = 16;
    const TOKENS: usize = 32;
    let blocks: Vec<Vec<f32>> = (0..w_rows.div_ceil(ROWS))
        .into_par_iter()
        .map(|b| {
            let (r0, r1) = (b * ROWS, ((b + 1) * ROWS).min(w_rows));
            let nr = r1 - r0;
            let mut res = vec![0.0f32; t_rows * nr];
            for t0 in (0..t_rows).step_by(TOKENS) {
                for r in r0..r1 {
                    for t in t0..(t0 + TOKENS).min(t_rows) {
                        res[t * nr + r - r0] = value(t, r);
                    }
                }
            }
            res
        })
        .collect();
    let mut out = vec![0.0f32; t_rows * w_rows];
    for (b, res) in blocks.iter().enumerate() {
        let nr = res.len() / t_rows.max(1);
        for t in 0..t_rows {
            out[t * w_rows + b * ROWS..t * w_rows + b * ROWS + nr]
                .copy_from_slice(&res[t * nr..(t + 1) * nr]);
        }
    }
    out
}

pub fn rms_norm_inplace(row: &mut [f32], w: &[f32], eps: f32) {
    let ss = dot(row, row) / row.len() as f32;
    let scale = 1.0 / (ss + eps).sqrt();
    for (x, g) in row.iter_mut().zip(w) {
        *x = *x * scale * g;
    }
}

pub fn rope_head(x: &mut [f32], pos: u32, rope: &RopeSpec) {
    let half = x.len() / 2;
    for (i, &f) in rope.inv_freq.iter().enumerate().take(half) {
        let angle = pos as f64 * f as f64;
        let (sin, cos) = (angle.sin() as f32, angle.cos() as f32);
        let (a, b) = if rope.interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * cos - x1 * sin;
        x[b] = x0 * sin + x1 * cos;
    }
}

/// Attention of query head `h` of one sequence over its cached context, causal.
/// Returns `[query_len][head_dim]`.
pub fn attend_head(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    block_size: usize,
) -> Vec<f32> {
    let d = shape.head_dim;
    let q_width = shape.n_heads * d;
    let kv_width = shape.n_kv_heads * d;
    let kvh = h / (shape.n_heads / shape.n_kv_heads);
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0.0f32; seq.query_len * d];
    let mut scores = vec![0.0f32; seq.context_len];
    let slot_of =
        |pos: usize| seq.block_table[pos / block_size] as usize * block_size + pos % block_size;
    for j in 0..seq.query_len {
        let t = seq.query_start + j;
        let qv = &q[t * q_width + h * d..t * q_width + (h + 1) * d];
        let last = seq.context_len - seq.query_len + j; // causal: attend to 0..=last
        let mut max = f32::NEG_INFINITY;
        for (pos, s) in scores.iter_mut().enumerate().take(last + 1) {
            let base = slot_of(pos) * kv_width + kvh * d;
            *s = dot(qv, &k_pool[base..base + d]) * scale;
            max = max.max(*s);
        }
        let mut denom = 0.0f32;
        for s in scores.iter_mut().take(last + 1) {
            *s = (*s - max).exp();
            denom += *s;
        }
        let o = &mut out[j * d..(j + 1) * d];
        for (pos, &s) in scores.iter().enumerate().take(last + 1) {
            let base = slot_of(pos) * kv_width + kvh * d;
            let p = s / denom;
            for (oi, vi) in o.iter_mut().zip(&v_pool[base..base + d]) {
                *oi = p.mul_add(*vi, *oi);
            }
        }
    }
    out
}
