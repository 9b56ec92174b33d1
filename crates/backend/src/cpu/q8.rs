//! 8-bit weights for the CPU: blocks of 32 int8 values with one f32 scale (Q8_0's
//! shape), multiplied against activations quantised the same way per token row.
//! A quarter of f32's memory traffic per decode step.
//!
//! One output over blocks `b`, in block order, one FMA chain:
//! `acc = fma(Σ(q_w·q_a), s_w·s_a, acc)`; the block's integer dot product is exact, so
//! the chain's roundings are the only ones and [`dot_q8`] is the reference, bit for
//! bit. Still batch-invariant: each activation row is quantised on its own and every
//! value is summed in that order whatever the tile, the token count or the threads.
//!
//! Layout: like q4's (`q4.rs`), rows in groups of eight (the last zero-padded), each
//! group's blocks back to back, 288 bytes per block: eight 32-byte vectors, byte
//! `4·r + i` of vector `k` holding row `r`'s value `4k + i`, then the eight rows' scales
//! as f32. `vpmaddubsw` of `|w|` against four activation bytes broadcast to every row
//! (carrying `w`'s sign) and one `vpmaddwd` leave each row's partial sum in its own
//! lane: eight outputs per vector, no horizontal sums.

use super::aligned::Aligned;
use super::tiling::{for_rows, grouped, GROUP};

pub const QK: usize = 32;
/// Bytes of one block of one group: quants, then the eight rows' scales.
const BLOCK_BYTES: usize = GROUP * QK + 4 * GROUP;
const S_AT: usize = GROUP * QK;

/// A `[rows][cols]` matrix of 8-bit blocks in row groups (layout in the module docs).
pub struct Q8Matrix {
    pub rows: usize,
    pub cols: usize,
    data: Aligned<u8>,
}

/// Quantises `x` (length a multiple of 32) into `q`/`s` with round-to-nearest.
pub fn quantize_row(x: &[f32], q: &mut [i8], s: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was detected at run time.
            return unsafe { quantize_row_avx2(x, q, s) };
        }
    }
    quantize_row_impl(x, q, s)
}

/// [`quantize_row_impl`] 32 values (one block) at a time, the same bits: the block's
/// `max |x|` (exact in any order), the same scalar scale, `x · (1/d)` per value, rounded
/// half away from zero as `f32::round` does (`trunc(v + copysign(0.49999997, v))`, exact
/// for every f32), then narrowed (|v| ≤ 127: no saturation). The compiler's version of the
/// portable loop kept the max and the `as i8` scalar (a chain of 32 `vmaxss` a block):
/// ~4 % of a prefill's time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(x: &[f32], q: &mut [i8], s: &mut [f32]) {
    use std::arch::x86_64::*;
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let below_half = _mm256_set1_ps(f32::from_bits(0x3eff_ffff)); // 0.49999997
                                                                  // packs interleave 128-bit lanes; this puts the 32 bytes back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for ((xb, qb), sb) in x
        .chunks_exact(QK)
        .zip(q.chunks_exact_mut(QK))
        .zip(s.iter_mut())
    {
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(xb.as_ptr().add(8 * i)));
        let m = _mm256_max_ps(
            _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
            _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let ints: [__m256i; 4] = std::array::from_fn(|i| {
            let y = _mm256_mul_ps(v[i], id);
            let bias = _mm256_or_ps(_mm256_and_ps(y, sign_mask), below_half);
            let r = _mm256_round_ps(
                _mm256_add_ps(y, bias),
                _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC,
            );
            _mm256_cvttps_epi32(r)
        });
        let w16 = [
            _mm256_packs_epi32(ints[0], ints[1]),
            _mm256_packs_epi32(ints[2], ints[3]),
        ];
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16[0], w16[1]), order);
        _mm256_storeu_si256(qb.as_mut_ptr() as *mut __m256i, bytes);
        *sb = d;
    }
}

#[inline(always)]
fn quantize_row_impl(x: &[f32], q: &mut [i8], s: &mut [f32]) {
    for ((xb, qb), sb) in x
        .chunks_exact(QK)
        .zip(q.chunks_exact_mut(QK))
        .zip(s.iter_mut())
    {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (qv, &v) in qb.iter_mut().zip(xb) {
            *qv = (v * id).round() as i8;
        }
        *sb = d;
    }
}

impl Q8Matrix {
    pub fn from_f32(rows: usize, cols: usize, data: &[f32]) -> Self {
        assert!(cols.is_multiple_of(QK));
        assert_eq!(data.len(), rows * cols, "Q8Matrix::from_f32: data length");
        let nb = cols / QK;
        let mut out = Aligned::zeroed(rows.div_ceil(GROUP) * nb * BLOCK_BYTES);
        let (mut q, mut s) = (vec![0i8; cols], vec![0f32; nb]);
        for (r, x) in data.chunks_exact(cols).enumerate() {
            quantize_row(x, &mut q, &mut s);
            let (g, lane) = (r / GROUP, r % GROUP);
            for b in 0..nb {
                let blk = &mut out[(g * nb + b) * BLOCK_BYTES..(g * nb + b + 1) * BLOCK_BYTES];
                for (j, &v) in q[b * QK..(b + 1) * QK].iter().enumerate() {
                    blk[32 * (j / 4) + 4 * lane + j % 4] = v as u8;
                }
                blk[S_AT + 4 * lane..S_AT + 4 * lane + 4].copy_from_slice(&s[b].to_le_bytes());
            }
        }
        Self {
            rows,
            cols,
            data: out,
        }
    }

    fn nb(&self) -> usize {
        self.cols / QK
    }

    /// Row `r`, block `b`: (its 32 quants, scale).
    fn row_block(&self, r: usize, b: usize) -> ([i8; QK], f32) {
        let at = (r / GROUP * self.nb() + b) * BLOCK_BYTES;
        let blk = &self.data[at..at + BLOCK_BYTES];
        let lane = r % GROUP;
        let q = std::array::from_fn(|j| blk[32 * (j / 4) + 4 * lane + j % 4] as i8);
        let s = &blk[S_AT + 4 * lane..S_AT + 4 * lane + 4];
        (q, f32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// Row `r` as f32: `q·s` per value.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        for (b, ob) in out[..self.cols].chunks_exact_mut(QK).enumerate() {
            let (q, s) = self.row_block(r, b);
            for (o, &q) in ob.iter_mut().zip(&q) {
                *o = q as f32 * s;
            }
        }
    }

    /// Bytes of weight data held.
    pub fn nbytes(&self) -> usize {
        self.data.len()
    }
}

/// One value in the q8 order (module docs), without SIMD: activation row `a`/`sa`
/// (from [`quantize_row`]) and weight row `r`.
pub fn dot_q8(a: &[i8], sa: &[f32], w: &Q8Matrix, r: usize) -> f32 {
    let mut acc = 0.0f32;
    for b in 0..w.nb() {
        let (q, s) = w.row_block(r, b);
        let p: i32 = q
            .iter()
            .zip(&a[b * QK..(b + 1) * QK])
            .map(|(&q, &a)| q as i32 * a as i32)
            .sum();
        acc = (p as f32).mul_add(s * sa[b], acc);
    }
    acc
}

/// The eight rows of group `g` (block data from `g`) for `TT` activation rows: one
/// vector of eight outputs per activation row (into `out[0..TT]`), in the q8 order.
///
/// # Safety
/// AVX2 and FMA available; `g` holds `nb` blocks; every activation pointer holds its
/// row (`nb·32` quants, `nb` scales).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn group_tile<const TT: usize>(
    g: *const u8,
    nb: usize,
    xq: [*const i8; TT],
    xs: [*const f32; TT],
    out: &mut [[f32; GROUP]; 4],
) {
    group_tile_body::<TT, false>(g, nb, xq, xs, out)
}

/// [`group_tile`] with each block's four-byte products summed by one AVX-VNNI
/// `vpdpbusd` instead of `vpmaddubsw` + `vpmaddwd` + `vpaddd`: the same exact integer
/// sums (no pair of products saturates either way), so the same bits.
///
/// # Safety
/// As [`group_tile`], and AVX-VNNI available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
unsafe fn group_tile_vnni<const TT: usize>(
    g: *const u8,
    nb: usize,
    xq: [*const i8; TT],
    xs: [*const f32; TT],
    out: &mut [[f32; GROUP]; 4],
) {
    group_tile_body::<TT, true>(g, nb, xq, xs, out)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn group_tile_body<const TT: usize, const VNNI: bool>(
    g: *const u8,
    nb: usize,
    xq: [*const i8; TT],
    xs: [*const f32; TT],
    out: &mut [[f32; GROUP]; 4],
) {
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); TT];
    for b in 0..nb {
        let blk = g.add(b * BLOCK_BYTES);
        let mut s32 = [_mm256_setzero_si256(); TT];
        for k in 0..8 {
            let w = _mm256_loadu_si256(blk.add(32 * k) as *const __m256i);
            // maddubs takes unsigned × signed: |w| against the activations carrying
            // w's sign (|w|, |a| ≤ 127: a pair sums to at most 32258, no saturation).
            let wabs = _mm256_sign_epi8(w, w);
            for t in 0..TT {
                let a =
                    _mm256_set1_epi32((xq[t].add(b * QK + 4 * k) as *const i32).read_unaligned());
                let a = _mm256_sign_epi8(a, w);
                s32[t] = if VNNI {
                    _mm256_dpbusd_avx_epi32(s32[t], wabs, a)
                } else {
                    _mm256_add_epi32(
                        s32[t],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, a), ones),
                    )
                };
            }
        }
        let sw = _mm256_loadu_ps(blk.add(S_AT) as *const f32);
        for t in 0..TT {
            let p = _mm256_cvtepi32_ps(s32[t]);
            acc[t] = _mm256_fmadd_ps(p, _mm256_mul_ps(sw, _mm256_set1_ps(*xs[t].add(b))), acc[t]);
        }
    }
    for t in 0..TT {
        _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]);
    }
}

/// `out[t][r]` = [`dot_q8`] of activation row `t` of `x` (quantised per row,
/// [`quantize_row`]) and weight row `r`; `[t_rows][w.rows]`.
pub fn matmul_q8(x: &[f32], t_rows: usize, w: &Q8Matrix) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    let vnni = super::simd::has_avx_vnni();
    #[cfg(not(target_arch = "x86_64"))]
    let vnni = false;
    matmul_q8_on(x, t_rows, w, vnni)
}

/// [`matmul_q8`], summing blocks with AVX-VNNI when `vnni` (the caller checked it).
fn matmul_q8_on(x: &[f32], t_rows: usize, w: &Q8Matrix, vnni: bool) -> Vec<f32> {
    let cols = w.cols;
    let nb = cols / QK;
    assert!(x.len() >= t_rows * cols, "matmul_q8: short input");
    let mut xq = vec![0i8; t_rows * cols];
    let mut xs = vec![0f32; t_rows * nb];
    for_rows(t_rows, 16, &mut xq, cols, &mut xs, nb, |t, q, s| {
        quantize_row(&x[t * cols..(t + 1) * cols], q, s)
    });
    #[cfg(target_arch = "x86_64")]
    let simd = super::simd::has_avx2();
    grouped(t_rows, w.rows, |t, tt, g, vals| {
        #[cfg(target_arch = "x86_64")]
        {
            if simd {
                let gp = w.data[g * nb * BLOCK_BYTES..(g + 1) * nb * BLOCK_BYTES].as_ptr();
                macro_rules! run {
                    ($TT:literal) => {{
                        // SAFETY: features detected; group g holds nb blocks; activation
                        // rows t..t+TT exist (asserted above).
                        let xqs = std::array::from_fn(|i| xq[(t + i) * cols..].as_ptr());
                        let xss = std::array::from_fn(|i| xs[(t + i) * nb..].as_ptr());
                        unsafe {
                            if vnni {
                                group_tile_vnni::<$TT>(gp, nb, xqs, xss, vals)
                            } else {
                                group_tile::<$TT>(gp, nb, xqs, xss, vals)
                            }
                        };
                    }};
                }
                match tt {
                    1 => run!(1),
                    2 => run!(2),
                    3 => run!(3),
                    _ => run!(4),
                }
                return;
            }
        }
        for (i, v) in vals[..tt].iter_mut().enumerate() {
            let (a, sa) = (
                &xq[(t + i) * cols..(t + i + 1) * cols],
                &xs[(t + i) * nb..(t + i + 1) * nb],
            );
            for (lane, o) in v.iter_mut().enumerate() {
                let r = g * GROUP + lane;
                if r < w.rows {
                    *o = dot_q8(a, sa, w, r);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104729) % 1009) as f32 / 1009.0 - 0.5)
            .collect()
    }

    fn quantized(x: &[f32]) -> (Vec<i8>, Vec<f32>) {
        let mut q = vec![0i8; x.len()];
        let mut s = vec![0f32; x.len() / QK];
        quantize_row(x, &mut q, &mut s);
        (q, s)
    }

    /// The AVX2 quantiser gives the portable loop's bits: random rows, blocks of zeros,
    /// values landing exactly on a half (`k + 0.5` after scaling) and on the largest value.
    #[test]
    fn avx2_quantiser_matches_the_portable_one_bitwise() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::is_x86_feature_detected!("avx2") {
                return;
            }
            let mut rows: Vec<Vec<f32>> = (0..40).map(|seed| data(8 * QK, seed)).collect();
            rows.push(vec![0.0; 2 * QK]);
            // amax 127 gives d = 1 and id = 1: every k + 0.5 is an exact half.
            rows.push(
                (0..QK)
                    .map(|i| {
                        if i == 0 {
                            127.0
                        } else {
                            (i as f32 - 16.0) + 0.5
                        }
                    })
                    .collect(),
            );
            rows.push((0..QK).map(|i| -((i as f32) * 3.97) + 1e-3).collect());
            rows.push(
                (0..QK)
                    .map(|i| if i % 2 == 0 { 1e-30 } else { -2e-30 })
                    .collect(),
            );
            for x in rows {
                let n = x.len();
                let (mut q1, mut s1) = (vec![0i8; n], vec![0f32; n / QK]);
                let (mut q2, mut s2) = (vec![0i8; n], vec![0f32; n / QK]);
                quantize_row_impl(&x, &mut q1, &mut s1);
                // SAFETY: AVX2 detected above.
                unsafe { quantize_row_avx2(&x, &mut q2, &mut s2) };
                assert_eq!(q1, q2, "{x:?}");
                let bits = |s: &[f32]| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&s1), bits(&s2));
            }
        }
    }

    #[test]
    fn q8_dot_close_to_f32_dot_and_weights_round_trip() {
        let a: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0)
            .collect();
        let b: Vec<f32> = (0..256)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 7.0)
            .collect();
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let (qa, sa) = quantized(&a);
        let w = Q8Matrix::from_f32(1, 256, &b);
        let got = dot_q8(&qa, &sa, &w, 0);
        assert!(
            (got - exact).abs() < 0.01 * exact.abs().max(1.0),
            "{got} vs {exact}"
        );
        assert_eq!(got.to_bits(), matmul_q8(&a, 1, &w)[0].to_bits());
        // The stored row is q·s of the row's own quantisation.
        let (qb, sb) = quantized(&b);
        let mut back = vec![0.0f32; 256];
        w.dequantize_row(0, &mut back);
        for (i, v) in back.iter().enumerate() {
            assert_eq!(v.to_bits(), (qb[i] as f32 * sb[i / QK]).to_bits());
        }
    }

    /// Every value of `matmul_q8` is the scalar reference's bits, whatever the token
    /// count (1..=70: past a 64-token task), the row count (not a multiple of the
    /// group), the tile, or threads; and it is close to the f32 product.
    #[test]
    fn q8_matmul_tiles_match_scalar_reference_bitwise() {
        for cols in [19 * QK, 2 * QK, QK] {
            let (tmax, rows) = (70, 29);
            let x = data(tmax * cols, 1);
            let w = Q8Matrix::from_f32(rows, cols, &data(rows * cols, 2));
            let (xq, xs) = quantized(&x);
            let nb = cols / QK;
            let want: Vec<u32> = (0..tmax)
                .flat_map(|t| (0..rows).map(move |r| (t, r)))
                .map(|(t, r)| {
                    dot_q8(
                        &xq[t * cols..(t + 1) * cols],
                        &xs[t * nb..(t + 1) * nb],
                        &w,
                        r,
                    )
                    .to_bits()
                })
                .collect();
            #[cfg(target_arch = "x86_64")]
            let vnni = super::super::simd::has_avx_vnni();
            #[cfg(not(target_arch = "x86_64"))]
            let vnni = false;
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                for t in (1..=21).chain([64, 65, 70]) {
                    // Both block sums where this CPU has AVX-VNNI.
                    for with_vnni in [false, vnni] {
                        let got = pool.install(|| matmul_q8_on(&x[..t * cols], t, &w, with_vnni));
                        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(
                            got,
                            want[..t * rows],
                            "cols {cols}, {t} tokens, {threads} threads, vnni {with_vnni}"
                        );
                    }
                }
            }
            let exact: f32 = x[4 * cols..5 * cols]
                .iter()
                .zip(&data(rows * cols, 2)[6 * cols..7 * cols])
                .map(|(a, b)| a * b)
                .sum();
            let got = f32::from_bits(want[4 * rows + 6]);
            assert!(
                (got - exact).abs() < 0.02 * (cols as f32).sqrt(),
                "{got} vs {exact}"
            );
        }
    }
}
