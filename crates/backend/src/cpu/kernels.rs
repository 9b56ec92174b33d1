//! CPU kernels. Every reduction runs in one fixed order per output value, so results
//! are independent of batch composition and thread count.
//!
//! The matmul order of one output `dot(x, w)` over `len` columns: the `nb = len / 8`
//! 8-lane blocks are split into two halves, blocks `0..nb/2` and `nb/2..nb`, each summed
//! by its own 8-lane FMA chain in block order; the two chains are added, the 8 lanes
//! reduced by one fixed tree ([`hsum`](super::simd::hsum)), and the `len % 8` tail elements FMA'd on in
//! order. Register tiles ([`tile`]) compute several tokens × several weight rows with
//! shared loads, either both halves interleaved (small tiles: enough independent chains
//! to hide the FMA latency) or one half after the other (large tiles: twelve chains are
//! enough, and sixteen registers too few for twice as many). Each accumulator sees the
//! same operations in the same order whatever the tile, so a value never depends on how
//! many tokens or rows were computed together, where it sat in a tile, or the threads.

#[cfg(target_arch = "x86_64")]
use super::attention::exp8;
use super::attention::exp_scalar;
use super::simd::tree8;
#[cfg(target_arch = "x86_64")]
use super::simd::{dispatch, has_avx2, hsum};
use super::tiling::tiled;
use crate::RopeSpec;

/// Dot product in the matmul order (see the module docs): `matmul_t` computes each
/// output with exactly these operations.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            let mut out = [[0.0f32; 1]; 1];
            // SAFETY: features detected at run time; both slices hold `a.len()` values.
            unsafe { tile::<1, 1>([a.as_ptr()], [b.as_ptr()], a.len(), &mut out) };
            return out[0][0];
        }
    }
    dot_scalar(a, b)
}

/// `[dot(x[0], w), dot(x[1], w), dot(x[2], w), dot(x[3], w)]`, sharing the loads of `w`.
#[inline]
pub fn dot4(x: [&[f32]; 4], w: &[f32]) -> [f32; 4] {
    for xi in x {
        assert_eq!(xi.len(), w.len(), "dot4 of unequal lengths");
    }
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            let mut out = [[0.0f32; 1]; 4];
            // SAFETY: features detected at run time; all slices hold `w.len()` values.
            unsafe { tile::<4, 1>(x.map(|r| r.as_ptr()), [w.as_ptr()], w.len(), &mut out) };
            return out.map(|o| o[0]);
        }
    }
    x.map(|xi| dot_scalar(xi, w))
}

/// The matmul order without SIMD (the reference for the AVX2 tiles, bit for bit).
fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let nb = a.len() / 8;
    let (h, n) = (nb / 2 * 8, nb * 8);
    let chain = |from: usize, to: usize| {
        let mut acc = [0.0f32; 8];
        for i in (from..to).step_by(8) {
            for l in 0..8 {
                acc[l] = a[i + l].mul_add(b[i + l], acc[l]);
            }
        }
        acc
    };
    let (c0, c1) = (chain(0, h), chain(h, n));
    let lanes: [f32; 8] = std::array::from_fn(|l| c0[l] + c1[l]);
    let mut s = tree8(lanes);
    for i in n..a.len() {
        s = a[i].mul_add(b[i], s);
    }
    s
}

/// `TT × RR` chains over elements `from..to` (multiples of 8), one per (token, row).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn chains<const TT: usize, const RR: usize>(
    x: &[*const f32; TT],
    w: &[*const f32; RR],
    from: usize,
    to: usize,
) -> [[std::arch::x86_64::__m256; RR]; TT] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); RR]; TT];
    let mut i = from;
    while i < to {
        let mut wv = [_mm256_setzero_ps(); RR];
        for r in 0..RR {
            wv[r] = _mm256_loadu_ps(w[r].add(i));
        }
        for t in 0..TT {
            let xv = _mm256_loadu_ps(x[t].add(i));
            for r in 0..RR {
                acc[t][r] = _mm256_fmadd_ps(xv, wv[r], acc[t][r]);
            }
        }
        i += 8;
    }
    acc
}

/// Both halves' chains at once: block `k` of the first half next to block `h + k` of
/// the second (`2·TT·RR` independent chains); an odd block count leaves the second half
/// one more block, added last, which is its place in the order too.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn chains_both<const TT: usize, const RR: usize>(
    x: &[*const f32; TT],
    w: &[*const f32; RR],
    h: usize,
    n: usize,
) -> [[std::arch::x86_64::__m256; RR]; TT] {
    use std::arch::x86_64::*;
    let mut a0 = [[_mm256_setzero_ps(); RR]; TT];
    let mut a1 = [[_mm256_setzero_ps(); RR]; TT];
    let mut i = 0;
    while i < h {
        let mut w0 = [_mm256_setzero_ps(); RR];
        let mut w1 = [_mm256_setzero_ps(); RR];
        for r in 0..RR {
            w0[r] = _mm256_loadu_ps(w[r].add(i));
            w1[r] = _mm256_loadu_ps(w[r].add(h + i));
        }
        for t in 0..TT {
            let x0 = _mm256_loadu_ps(x[t].add(i));
            let x1 = _mm256_loadu_ps(x[t].add(h + i));
            for r in 0..RR {
                a0[t][r] = _mm256_fmadd_ps(x0, w0[r], a0[t][r]);
                a1[t][r] = _mm256_fmadd_ps(x1, w1[r], a1[t][r]);
            }
        }
        i += 8;
    }
    if 2 * h < n {
        let j = n - 8;
        for t in 0..TT {
            let xv = _mm256_loadu_ps(x[t].add(j));
            for r in 0..RR {
                a1[t][r] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w[r].add(j)), a1[t][r]);
            }
        }
    }
    for t in 0..TT {
        for r in 0..RR {
            a0[t][r] = _mm256_add_ps(a0[t][r], a1[t][r]);
        }
    }
    a0
}

/// `out[t][r] = dot(x[t], w[r])` for a `TT × RR` register tile, in the matmul order.
///
/// # Safety
/// AVX2 and FMA must be available, and every pointer valid for `len` reads.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const TT: usize, const RR: usize>(
    x: [*const f32; TT],
    w: [*const f32; RR],
    len: usize,
    out: &mut [[f32; RR]; TT],
) {
    use std::arch::x86_64::*;
    let nb = len / 8;
    let (h, n) = (nb / 2 * 8, nb * 8);
    let sums = if TT * RR <= 4 {
        chains_both::<TT, RR>(&x, &w, h, n)
    } else {
        let a0 = chains::<TT, RR>(&x, &w, 0, h);
        let a1 = chains::<TT, RR>(&x, &w, h, n);
        let mut s = a0;
        for t in 0..TT {
            for r in 0..RR {
                s[t][r] = _mm256_add_ps(a0[t][r], a1[t][r]);
            }
        }
        s
    };
    for t in 0..TT {
        for r in 0..RR {
            let mut s = hsum(sums[t][r]);
            for j in n..len {
                s = (*x[t].add(j)).mul_add(*w[r].add(j), s);
            }
            out[t][r] = s;
        }
    }
}

/// Largest weight-row count of an f32 tile of `tt` tokens (index `tt`, 1..=4): about
/// twelve accumulators, and several rows even for one token (decode).
const F32_ROWS: [usize; 5] = [0, 8, 6, 4, 3];

/// `out[t][o] = dot(x[t], w[o])` for `x: [t_rows][cols]`, `w: [w_rows][cols]`.
pub fn matmul_t(x: &[f32], t_rows: usize, w: &[f32], w_rows: usize, cols: usize) -> Vec<f32> {
    assert!(
        x.len() >= t_rows * cols && w.len() >= w_rows * cols,
        "matmul_t: short input"
    );
    #[cfg(target_arch = "x86_64")]
    let simd = has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    let simd = false;
    tiled(t_rows, w_rows, F32_ROWS, |t, tt, r, rr, res, stride| {
        if !simd {
            for i in 0..tt {
                for j in 0..rr {
                    let (xt, wr) = (t + i, r + j);
                    res[j * stride + i] = dot_scalar(
                        &x[xt * cols..(xt + 1) * cols],
                        &w[wr * cols..(wr + 1) * cols],
                    );
                }
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            macro_rules! run {
                ($TT:literal, $RR:literal) => {{
                    let px: [*const f32; $TT] =
                        std::array::from_fn(|i| x[(t + i) * cols..].as_ptr());
                    let pw: [*const f32; $RR] =
                        std::array::from_fn(|j| w[(r + j) * cols..].as_ptr());
                    let mut o = [[0.0f32; $RR]; $TT];
                    // SAFETY: AVX2+FMA detected; rows t..t+TT of x and r..r+RR of w exist
                    // (checked above and by the tiling), each `cols` long.
                    unsafe { tile::<$TT, $RR>(px, pw, cols, &mut o) };
                    for (i, oi) in o.iter().enumerate() {
                        for (j, &v) in oi.iter().enumerate() {
                            res[j * stride + i] = v;
                        }
                    }
                }};
            }
            dispatch!(tt, rr, run);
        }
    })
}

pub fn rms_norm_inplace(row: &mut [f32], w: &[f32], eps: f32) {
    let ss = dot(row, row) / row.len() as f32;
    let scale = 1.0 / (ss + eps).sqrt();
    for (x, g) in row.iter_mut().zip(w) {
        *x = *x * scale * g;
    }
}

/// Appends `(sin, cos)` of every rotary angle of position `pos` for a head of
/// `head_dim` (what [`rope_head_at`] rotates by), so a step computes them once per
/// position rather than once per head and layer.
pub fn rope_angles(pos: u32, rope: &RopeSpec, head_dim: usize, out: &mut Vec<(f32, f32)>) {
    out.extend(rope.inv_freq.iter().take(head_dim / 2).map(|&f| {
        let angle = pos as f64 * f as f64;
        (angle.sin() as f32, angle.cos() as f32)
    }));
}

/// Rotates one head by precomputed [`rope_angles`].
pub fn rope_head_at(x: &mut [f32], angles: &[(f32, f32)], interleaved: bool) {
    let half = x.len() / 2;
    for (i, &(sin, cos)) in angles.iter().enumerate() {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * cos - x1 * sin;
        x[b] = x0 * sin + x1 * cos;
    }
}

/// `silu(g)·u` per value: `g·σ(g)·u` with `σ` from `e = exp(−|g|)` (`1/(1+e)` for
/// `g ≥ 0`, `e/(1+e)` below, so `exp` never overflows), `exp` the softmax's polynomial
/// ([`exp_scalar`]); the AVX2 path runs the same operations per lane.
pub fn silu_mul_row(g: &[f32], u: &[f32], out: &mut [f32]) {
    assert!(
        g.len() == u.len() && out.len() == g.len(),
        "silu_mul_row: lengths"
    );
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: features detected; equal lengths checked above.
            done = unsafe { silu_mul_avx2(g, u, out) };
        }
    }
    for ((o, &g), &u) in out[done..].iter_mut().zip(&g[done..]).zip(&u[done..]) {
        *o = silu_mul_scalar(g, u);
    }
}

#[inline]
fn silu_mul_scalar(g: f32, u: f32) -> f32 {
    let e = exp_scalar(-g.abs());
    let d = 1.0 + e;
    let sig = if g >= 0.0 { 1.0 / d } else { e / d };
    g * sig * u
}

/// The full vectors of [`silu_mul_row`]; returns how many values it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(g: &[f32], u: &[f32], out: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let n = g.len() / 8 * 8;
    let sign = _mm256_set1_ps(-0.0);
    let one = _mm256_set1_ps(1.0);
    for i in (0..n).step_by(8) {
        let gv = _mm256_loadu_ps(g.as_ptr().add(i));
        let e = exp8(_mm256_or_ps(gv, sign));
        let d = _mm256_add_ps(one, e);
        let pos = _mm256_cmp_ps(gv, _mm256_setzero_ps(), _CMP_GE_OQ);
        let sig = _mm256_blendv_ps(_mm256_div_ps(e, d), _mm256_div_ps(one, d), pos);
        let o = _mm256_mul_ps(_mm256_mul_ps(gv, sig), _mm256_loadu_ps(u.as_ptr().add(i)));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), o);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104729) % 997) as f32 / 997.0 - 0.5)
            .collect()
    }

    /// Batch invariance at the kernel level: every value of `matmul_t` is the same bits
    /// as the scalar reference order, whatever the token count (1..=21: every tile
    /// height and remainder), the row count (odd, across a block boundary), its place in
    /// a tile, or the thread count; `dot`/`dot4` (used by the quantized matmuls) agree.
    #[test]
    fn matmul_tiles_match_scalar_reference_bitwise() {
        for cols in [603, 64, 5] {
            // 603 = 75 blocks (odd: the second half is longer) + a 3-value tail.
            let (tmax, rows) = (21, 29); // 21: past a 16-token tile
            let x = data(tmax * cols, 1);
            let w = data(rows * cols, 2);
            let xr = |t: usize| &x[t * cols..(t + 1) * cols];
            let wr = |r: usize| &w[r * cols..(r + 1) * cols];
            let want: Vec<u32> = (0..tmax)
                .flat_map(|t| (0..rows).map(move |r| (t, r)))
                .map(|(t, r)| dot_scalar(xr(t), wr(r)).to_bits())
                .collect();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                for t in 1..=tmax {
                    let got = pool.install(|| matmul_t(&x[..t * cols], t, &w, rows, cols));
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(
                        got,
                        want[..t * rows],
                        "cols {cols}, {t} tokens, {threads} threads"
                    );
                }
                let odd = pool.install(|| matmul_t(&x, tmax, &w, 7, cols));
                for (i, v) in odd.iter().enumerate() {
                    assert_eq!(v.to_bits(), want[i / 7 * rows + i % 7], "7 rows, value {i}");
                }
            }
            let four = dot4([xr(0), xr(1), xr(2), xr(3)], wr(2));
            for (t, v) in four.iter().enumerate() {
                assert_eq!(v.to_bits(), want[t * rows + 2]);
                assert_eq!(dot(xr(t), wr(2)).to_bits(), want[t * rows + 2]);
            }
            // And it is a dot product.
            let naive: f64 = xr(5)
                .iter()
                .zip(wr(3))
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum();
            assert!((f32::from_bits(want[5 * rows + 3]) as f64 - naive).abs() < 1e-4);
        }
    }

    #[test]
    fn silu_matches_its_scalar_order_and_libm() {
        let g: Vec<f32> = (0..1003)
            .map(|i| (i as f32 - 500.0) * 0.037)
            .chain([0.0, -0.0, 95.0, -95.0])
            .collect();
        let u: Vec<f32> = (0..g.len()).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        let mut out = vec![0.0f32; g.len()];
        silu_mul_row(&g, &u, &mut out);
        for i in 0..g.len() {
            assert_eq!(
                out[i].to_bits(),
                silu_mul_scalar(g[i], u[i]).to_bits(),
                "g {}",
                g[i]
            );
            let want = g[i] as f64 / (1.0 + (-g[i] as f64).exp()) * u[i] as f64;
            assert!(
                (out[i] as f64 - want).abs() <= 1e-6 * want.abs().max(1e-30),
                "g {}: {} vs {want}",
                g[i],
                out[i]
            );
        }
    }
}
