//! CPU kernels. Every reduction runs in one fixed order per output value, so results
//! are independent of batch composition and thread count.

use crate::{AttnShape, RopeSpec, SeqInput};
use rayon::prelude::*;

/// Dot product: two 8-lane FMA chains over 16-element steps, then one fixed reduction
/// tree (AVX2+FMA when present). [`dot4`] computes four of these with exactly the same
/// operations per output, so a value never depends on how many rows were computed together.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the features were detected at run time.
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot_scalar(a, b)
}

/// `[dot(x[0], w), dot(x[1], w), dot(x[2], w), dot(x[3], w)]`, sharing the loads of `w`.
#[inline]
pub fn dot4(x: [&[f32]; 4], w: &[f32]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the features were detected at run time.
            return unsafe { dot4_avx2(x, w) };
        }
    }
    x.map(|xi| dot_scalar(xi, w))
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let n = a.len() / 16 * 16;
    for i in (0..n).step_by(16) {
        for l in 0..16 {
            acc[l] = a[i + l].mul_add(b[i + l], acc[l]);
        }
    }
    let mut lanes = [0.0f32; 8];
    for (l, lane) in lanes.iter_mut().enumerate() {
        *lane = acc[l] + acc[8 + l];
    }
    let mut s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    for i in n..a.len() {
        s = a[i].mul_add(b[i], s);
    }
    s
}

/// One output of [`dot4_avx2`], with the same operations.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], w: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let len = w.len();
    let n = len / 16 * 16;
    let (pa, pw) = (a.as_ptr(), w.as_ptr());
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < n {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pw.add(i)), a0);
        a1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pw.add(i + 8)),
            a1,
        );
        i += 16;
    }
    let mut s = hsum(_mm256_add_ps(a0, a1));
    for j in n..len {
        s = a[j].mul_add(w[j], s);
    }
    s
}

/// Lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then (0+1): the tree of `dot_scalar`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(sum: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm256_castps256_ps128(sum);
    let hi = _mm256_extractf128_ps(sum, 1);
    let s4 = _mm_add_ps(lo, hi);
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    _mm_cvtss_f32(s1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_avx2(x: [&[f32]; 4], w: &[f32]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let len = w.len();
    let n = len / 16 * 16;
    let pw = w.as_ptr();
    let px = x.map(|r| r.as_ptr());
    let mut a0 = [_mm256_setzero_ps(); 4];
    let mut a1 = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < n {
        let w0 = _mm256_loadu_ps(pw.add(i));
        let w1 = _mm256_loadu_ps(pw.add(i + 8));
        for k in 0..4 {
            a0[k] = _mm256_fmadd_ps(_mm256_loadu_ps(px[k].add(i)), w0, a0[k]);
            a1[k] = _mm256_fmadd_ps(_mm256_loadu_ps(px[k].add(i + 8)), w1, a1[k]);
        }
        i += 16;
    }
    let mut out = [0.0f32; 4];
    for k in 0..4 {
        let mut s = hsum(_mm256_add_ps(a0[k], a1[k]));
        for j in n..len {
            s = x[k][j].mul_add(w[j], s);
        }
        out[k] = s;
    }
    out
}

/// `out[t][o] = dot(x[t], w[o])` for `x: [t_rows][cols]`, `w: [w_rows][cols]`.
pub fn matmul_t(x: &[f32], t_rows: usize, w: &[f32], w_rows: usize, cols: usize) -> Vec<f32> {
    let xr = |t: usize| &x[t * cols..(t + 1) * cols];
    tiled(t_rows, w_rows, |t0, r, out| {
        let wr = &w[r * cols..(r + 1) * cols];
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
    tiled(t_rows, w.rows, |t0, r, out| {
        let (wq, ws) = w.row(r);
        for (i, o) in out.iter_mut().enumerate() {
            let t = t0 + i;
            *o = dot_q8(
                &xq[t * cols..(t + 1) * cols],
                &xs[t * nb..(t + 1) * nb],
                wq,
                ws,
            );
        }
    })
}

/// Fills `out[t][r]` (`[t_rows][w_rows]`) by calling `fill(t0, r, values)` for runs of
/// tokens `t0..t0+values.len()` of one weight row. Parallel over blocks of weight rows;
/// inside a block, tokens are walked in tiles so the block's weights and a tile of
/// activations stay in cache together. Tiling only decides *which* values are computed
/// together, never how one is summed, so results do not depend on `t_rows`.
fn tiled(t_rows: usize, w_rows: usize, fill: impl Fn(usize, usize, &mut [f32]) + Sync) -> Vec<f32> {
    const ROWS: usize = 16;
    const TOKENS: usize = 32;
    let blocks: Vec<Vec<f32>> = (0..w_rows.div_ceil(ROWS))
        .into_par_iter()
        .map(|b| {
            let (r0, r1) = (b * ROWS, ((b + 1) * ROWS).min(w_rows));
            // [row - r0][t]
            let mut res = vec![0.0f32; (r1 - r0) * t_rows];
            for t0 in (0..t_rows).step_by(TOKENS) {
                let t1 = (t0 + TOKENS).min(t_rows);
                for r in r0..r1 {
                    fill(
                        t0,
                        r,
                        &mut res[(r - r0) * t_rows + t0..(r - r0) * t_rows + t1],
                    );
                }
            }
            res
        })
        .collect();
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
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the features were detected at run time.
            return unsafe { attend_head_fma(seq, h, q, k_pool, v_pool, shape, block_size) };
        }
    }
    attend_head_impl(seq, h, q, k_pool, v_pool, shape, block_size)
}

/// The same code compiled with FMA enabled: `mul_add` becomes one `vfmadd` per element
/// (vectorised) instead of a call into libm's software `fmaf`. Fused multiply-add rounds
/// once either way, so the results are bit-identical to the portable build.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_head_fma(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    block_size: usize,
) -> Vec<f32> {
    attend_head_impl(seq, h, q, k_pool, v_pool, shape, block_size)
}

#[inline(always)]
fn attend_head_impl(
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
    // Offset of each position's K/V row for this head, looked up once for all queries.
    let bases: Vec<usize> = (0..seq.context_len)
        .map(|pos| {
            let slot = seq.block_table[pos / block_size] as usize * block_size + pos % block_size;
            slot * kv_width + kvh * d
        })
        .collect();
    for j in 0..seq.query_len {
        let t = seq.query_start + j;
        let qv = &q[t * q_width + h * d..t * q_width + (h + 1) * d];
        let last = seq.context_len - seq.query_len + j; // causal: attend to 0..=last
        let mut max = f32::NEG_INFINITY;
        for (s, &base) in scores.iter_mut().zip(&bases).take(last + 1) {
            *s = dot(qv, &k_pool[base..base + d]) * scale;
            max = max.max(*s);
        }
        let mut denom = 0.0f32;
        for s in scores.iter_mut().take(last + 1) {
            *s = (*s - max).exp();
            denom += *s;
        }
        let o = &mut out[j * d..(j + 1) * d];
        for (&s, &base) in scores.iter().zip(&bases).take(last + 1) {
            let p = s / denom;
            for (oi, vi) in o.iter_mut().zip(&v_pool[base..base + d]) {
                *oi = p.mul_add(*vi, *oi);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batch invariance at the kernel level: a value is the same bits whether computed
    /// alone, four at a time, or inside matmuls of different token counts.
    #[test]
    fn dot4_and_matmul_match_dot_bitwise() {
        let cols = 600; // not a multiple of 16: exercises the tail
        let x: Vec<f32> = (0..7 * cols)
            .map(|i| ((i * 7919) % 997) as f32 / 997.0 - 0.5)
            .collect();
        let w: Vec<f32> = (0..5 * cols)
            .map(|i| ((i * 104729) % 991) as f32 / 991.0 - 0.5)
            .collect();
        let xr = |t: usize| &x[t * cols..(t + 1) * cols];
        let wr = |r: usize| &w[r * cols..(r + 1) * cols];
        let four = dot4([xr(0), xr(1), xr(2), xr(3)], wr(2));
        for (t, v) in four.iter().enumerate() {
            assert_eq!(v.to_bits(), dot(xr(t), wr(2)).to_bits());
        }
        let all = matmul_t(&x, 7, &w, 5, cols);
        for n in [1, 3, 6] {
            let part = matmul_t(&x[..n * cols], n, &w, 5, cols);
            assert_eq!(part, all[..n * 5], "{n} tokens");
        }
        assert!((dot(xr(1), wr(1)) - dot_scalar(xr(1), wr(1))).abs() < 1e-4);
    }
}
