//! 4-bit weights for the CPU (`--cpu-weights q4`): blocks of 32 unsigned 4-bit values
//! with a scale `d` and minimum `m` rounded to f16 (the Q4_1 shape, `x ≈ d·q + m`,
//! `q ∈ 0..15`),
//! multiplied against activations quantised per token row as for q8 (int8 blocks of 32
//! with an f32 scale `d_a`) plus each block's `d_a·Σq_a` (for the `m` term).
//!
//! One output over blocks `b`: `Σ_b d_w·d_a·Σ(q_w·q_a) + Σ_b m_w·(d_a·Σq_a)`.
//! Weights read from a GGUF Q4_1 tensor come back exactly: its f32 values are
//! `d·q + m` with f16 `d`, `m`, which the block's minimum and range recover.
//! Still batch-invariant: each activation row is quantised on its own and every value
//! is summed in one fixed order ([`dot_q4_scalar`] is the reference, bit for bit).
//!
//! Row layout (one contiguous run of bytes per weight row, rows back to back, so a tile
//! of consecutive rows is one memory stream): `nb·16` bytes of quants (block `b`'s byte
//! `j` holds `q[j]` in its low nibble and `q[j + 16]` in its high one, llama.cpp's
//! order: one shift and mask give the 32 values in order), then `nb` scales as f32, then
//! `nbp` minimums as f16 (`nb` rounded up to 8, zero-padded, so the `m` term runs 8
//! blocks per vector through one F16C conversion). 22 bytes per 32 weights: the scale
//! as f32 is 10 % more bytes than f16 but one broadcast load instead of a scalar
//! conversion per block and row, and measured ~8 % faster at one token (BENCHMARKS.md).

use super::tiling::{for_rows, tiled};

use half::f16;

pub const QK: usize = 32;

/// `n` rounded up to a multiple of 8.
pub const fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// A row-major `[rows][cols]` matrix of 4-bit blocks (layout in the module docs).
pub struct Q4Matrix {
    pub rows: usize,
    pub cols: usize,
    /// Bytes per row.
    stride: usize,
    data: Vec<u8>,
}

/// Why a matrix cannot be stored as q4.
#[derive(Debug, thiserror::Error)]
pub enum Q4Error {
    #[error("q4 needs a column count that is a multiple of 32, not {0}")]
    Cols(usize),
    #[error("a block's range or minimum does not fit an f16 (|value| up to {0})")]
    Range(f32),
}

impl Q4Matrix {
    /// Round-to-nearest per block: `m` = the block's minimum, `d` = range / 15, both
    /// rounded to f16 first, then `q = round((x - m) / d)` clamped to `0..=15`.
    pub fn from_f32(rows: usize, cols: usize, data: &[f32]) -> Result<Self, Q4Error> {
        if !cols.is_multiple_of(QK) {
            return Err(Q4Error::Cols(cols));
        }
        assert_eq!(data.len(), rows * cols, "Q4Matrix::from_f32: data length");
        let nb = cols / QK;
        let stride = nb * 16 + nb * 4 + pad8(nb) * 2;
        let mut out = vec![0u8; rows * stride];
        for (x, row) in data.chunks_exact(cols).zip(out.chunks_exact_mut(stride)) {
            let (qs, rest) = row.split_at_mut(nb * 16);
            let (ds, ms) = rest.split_at_mut(nb * 4);
            for (b, xb) in x.chunks_exact(QK).enumerate() {
                let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
                for &v in xb {
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
                let (d, m) = (f16::from_f32((hi - lo) / 15.0), f16::from_f32(lo));
                if !d.is_finite() || !m.is_finite() {
                    return Err(Q4Error::Range(lo.abs().max(hi.abs())));
                }
                let (df, mf) = (d.to_f32(), m.to_f32());
                let id = if df > 0.0 { 1.0 / df } else { 0.0 };
                let q = |v: f32| ((v - mf) * id).round().clamp(0.0, 15.0) as u8;
                for j in 0..16 {
                    qs[b * 16 + j] = q(xb[j]) | (q(xb[j + 16]) << 4);
                }
                ds[4 * b..4 * b + 4].copy_from_slice(&df.to_le_bytes());
                ms[2 * b..2 * b + 2].copy_from_slice(&m.to_bits().to_le_bytes());
            }
        }
        Ok(Self {
            rows,
            cols,
            stride,
            data: out,
        })
    }

    fn nb(&self) -> usize {
        self.cols / QK
    }

    /// Row `r`'s bytes (quants, scales, minimums).
    fn row_bytes(&self, r: usize) -> &[u8] {
        &self.data[r * self.stride..(r + 1) * self.stride]
    }

    /// Row `r` as (packed quants, scales, minimums zero-padded to `pad8(nb)`).
    pub fn row(&self, r: usize) -> (&[u8], Vec<f32>, Vec<f32>) {
        let nb = self.nb();
        let b = self.row_bytes(r);
        let half = |bytes: &[u8]| -> Vec<f32> {
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect()
        };
        (
            &b[..nb * 16],
            b[nb * 16..nb * 20]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            half(&b[nb * 20..]),
        )
    }

    /// Row `r` as f32: `d·q + m` per value (the GGUF Q4_1 dequantisation).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (qs, d, m) = self.row(r);
        for (b, ob) in out[..self.cols].chunks_exact_mut(QK).enumerate() {
            for j in 0..16 {
                let q = qs[b * 16 + j];
                ob[j] = (q & 0xF) as f32 * d[b] + m[b];
                ob[j + 16] = (q >> 4) as f32 * d[b] + m[b];
            }
        }
    }

    /// Bytes of weight data held.
    pub fn nbytes(&self) -> usize {
        self.data.len()
    }
}

/// Quantises activation rows for q4: `x` (length a multiple of 32) into int8 blocks `q`
/// with scales `s` (exactly q8's [`super::q8::quantize_row`]) and `sums[b] = s[b]·Σq`
/// (`sums` holds `pad8(nb)` values; the padding is set to zero).
pub fn quantize_row(x: &[f32], q: &mut [i8], s: &mut [f32], sums: &mut [f32]) {
    super::q8::quantize_row(x, q, s);
    let nb = x.len() / QK;
    for (b, o) in sums.iter_mut().enumerate() {
        *o = if b < nb {
            let t: i32 = q[b * QK..(b + 1) * QK].iter().map(|&v| v as i32).sum();
            s[b] * t as f32
        } else {
            0.0
        };
    }
}

/// Largest weight-row count of a q4 tile of `tt` activation rows (index `tt`, 1..=4).
/// Small tiles: every shape here keeps both halves' chains interleaved within the 16
/// registers (1x4 or 2x4 tiles spill, and measured 1.2-1.5x slower per token).
pub const Q4_ROWS: [usize; 5] = [0, 2, 2, 1, 1];

/// One value in the q4 order, without SIMD: per block, `d = d_w·d_a` and the 8 lanes'
/// integer sums (lane `l` = values `4l..4l+4`) FMA'd into an 8-lane chain; blocks
/// `0..nb/2` and `nb/2..nb` are two chains, added; then the `m` chain (lane `l` takes
/// blocks `8g + l`: `m_w·sum_a` FMA'd in `g` order) is added and the 8 lanes reduced
/// by the fixed tree of [`super::simd::hsum`]. `a`/`sa`/`suma`: one activation row
/// from [`quantize_row`].
pub fn dot_q4_scalar(a: &[i8], sa: &[f32], suma: &[f32], w: &Q4Matrix, r: usize) -> f32 {
    let nb = w.nb();
    let (qs, d, m) = w.row(r);
    let chain = |from: usize, to: usize| {
        let mut acc = [0.0f32; 8];
        for i in from..to {
            let dd = d[i] * sa[i];
            for (l, acc) in acc.iter_mut().enumerate() {
                let p: i32 = (4 * l..4 * l + 4)
                    .map(|j| {
                        let byte = qs[i * 16 + j % 16];
                        let q = if j < 16 { byte & 0xF } else { byte >> 4 };
                        q as i32 * a[i * QK + j] as i32
                    })
                    .sum();
                *acc = dd.mul_add(p as f32, *acc);
            }
        }
        acc
    };
    let (c0, c1) = (chain(0, nb / 2), chain(nb / 2, nb));
    let mut cm = [0.0f32; 8];
    for g in 0..pad8(nb) / 8 {
        for (l, acc) in cm.iter_mut().enumerate() {
            *acc = m[8 * g + l].mul_add(suma[8 * g + l], *acc);
        }
    }
    let l: [f32; 8] = std::array::from_fn(|i| (c0[i] + c1[i]) + cm[i]);
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

#[cfg(target_arch = "x86_64")]
fn has_simd() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// Values (t+i, r+j) for activation rows `t..t+tt` (from [`quantize_row`], packed
/// `[row][cols]`, `[row][nb]`, `[row][pad8(nb)]`) × weight rows `r..r+rr`, written to
/// `res[j * stride + i]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_q4(
    xq: &[i8],
    xs: &[f32],
    xsum: &[f32],
    t: usize,
    tt: usize,
    w: &Q4Matrix,
    r: usize,
    rr: usize,
    res: &mut [f32],
    stride: usize,
) {
    let (cols, nb, nbp) = (w.cols, w.nb(), pad8(w.nb()));
    assert!(
        xq.len() >= (t + tt) * cols
            && xs.len() >= (t + tt) * nb
            && xsum.len() >= (t + tt) * nbp
            && r + rr <= w.rows,
        "tile_q4: out of range"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if has_simd() {
            macro_rules! run {
                ($TT:literal, $RR:literal) => {{
                    let x = Act {
                        q: std::array::from_fn(|i| xq[(t + i) * cols..].as_ptr()),
                        s: std::array::from_fn(|i| xs[(t + i) * nb..].as_ptr()),
                        sum: std::array::from_fn(|i| xsum[(t + i) * nbp..].as_ptr()),
                    };
                    let wp: [*const u8; $RR] = std::array::from_fn(|j| w.row_bytes(r + j).as_ptr());
                    let mut o = [[0.0f32; $RR]; $TT];
                    // SAFETY: AVX2+FMA+F16C detected; every row pointer holds its
                    // blocks (checked above).
                    unsafe { tile_avx2::<$TT, $RR>(&x, wp, nb, &mut o) };
                    for (i, oi) in o.iter().enumerate() {
                        for (j, &v) in oi.iter().enumerate() {
                            res[j * stride + i] = v;
                        }
                    }
                }};
            }
            super::simd::dispatch!(tt, rr, run);
            return;
        }
    }
    for i in 0..tt {
        let ti = t + i;
        let (a, sa, suma) = (
            &xq[ti * cols..(ti + 1) * cols],
            &xs[ti * nb..(ti + 1) * nb],
            &xsum[ti * nbp..(ti + 1) * nbp],
        );
        for j in 0..rr {
            res[j * stride + i] = dot_q4_scalar(a, sa, suma, w, r + j);
        }
    }
}

/// A tile's activation rows: quants, scales, block sums.
#[cfg(target_arch = "x86_64")]
struct Act<const TT: usize> {
    q: [*const i8; TT],
    s: [*const f32; TT],
    sum: [*const f32; TT],
}

/// One block `b` of every (activation row, weight row) pair of a tile into `acc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn step<const TT: usize, const RR: usize>(
    acc: &mut [[std::arch::x86_64::__m256; RR]; TT],
    x: &Act<TT>,
    w: &[*const u8; RR],
    nb: usize,
    b: usize,
) {
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let low = _mm256_set1_epi8(0x0F);
    let mut wv = [_mm256_setzero_si256(); RR];
    let mut dw = [_mm256_setzero_ps(); RR];
    for r in 0..RR {
        let packed = _mm_loadu_si128(w[r].add(b * 16) as *const __m128i);
        // Low nibbles are values 0..16, high nibbles 16..32.
        let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
        wv[r] = _mm256_and_si256(both, low);
        dw[r] = _mm256_set1_ps((w[r].add(nb * 16 + 4 * b) as *const f32).read_unaligned());
    }
    for t in 0..TT {
        let xv = _mm256_loadu_si256(x.q[t].add(b * QK) as *const __m256i);
        let da = _mm256_set1_ps(*x.s[t].add(b));
        for r in 0..RR {
            // Unsigned 4-bit weights × signed int8 activations: no sign juggling.
            let p16 = _mm256_maddubs_epi16(wv[r], xv);
            let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[t][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), p, acc[t][r]);
        }
    }
}

/// `out[i][j]` = [`dot_q4_scalar`] of activation row `i` and weight row `j` for a
/// `TT × RR` tile over `nb` blocks: both halves' chains interleaved for small tiles,
/// one half after the other for large ones, then the `m` chain; the same operations
/// per value either way.
///
/// # Safety
/// AVX2, FMA and F16C must be available, every pointer valid for its row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)]
unsafe fn tile_avx2<const TT: usize, const RR: usize>(
    x: &Act<TT>,
    w: [*const u8; RR],
    nb: usize,
    out: &mut [[f32; RR]; TT],
) {
    use std::arch::x86_64::*;
    let h = nb / 2;
    let mut a0 = [[_mm256_setzero_ps(); RR]; TT];
    let mut a1 = [[_mm256_setzero_ps(); RR]; TT];
    if TT * RR <= 4 {
        for k in 0..h {
            step(&mut a0, x, &w, nb, k);
            step(&mut a1, x, &w, nb, h + k);
        }
        if 2 * h < nb {
            step(&mut a1, x, &w, nb, nb - 1);
        }
    } else {
        for b in 0..h {
            step(&mut a0, x, &w, nb, b);
        }
        for b in h..nb {
            step(&mut a1, x, &w, nb, b);
        }
    }
    for t in 0..TT {
        for r in 0..RR {
            a0[t][r] = _mm256_add_ps(a0[t][r], a1[t][r]);
        }
    }
    // The m chain, 8 blocks per vector.
    let mut am = [[_mm256_setzero_ps(); RR]; TT];
    for g in 0..pad8(nb) / 8 {
        let mut mv = [_mm256_setzero_ps(); RR];
        for r in 0..RR {
            let p = w[r].add(nb * 20 + 16 * g) as *const __m128i;
            mv[r] = _mm256_cvtph_ps(_mm_loadu_si128(p));
        }
        for t in 0..TT {
            let sv = _mm256_loadu_ps(x.sum[t].add(8 * g));
            for r in 0..RR {
                am[t][r] = _mm256_fmadd_ps(mv[r], sv, am[t][r]);
            }
        }
    }
    for t in 0..TT {
        for r in 0..RR {
            out[t][r] = super::simd::hsum(_mm256_add_ps(a0[t][r], am[t][r]));
        }
    }
}

/// Like [`matmul_q8`](super::matmul_q8) over 4-bit weights; each activation row is quantised on its own
/// (q8's int8 blocks plus their sums, [`quantize_row`]).
pub fn matmul_q4(x: &[f32], t_rows: usize, w: &Q4Matrix) -> Vec<f32> {
    let cols = w.cols;
    let (nb, nbp) = (cols / QK, pad8(cols / QK));
    assert!(x.len() >= t_rows * cols, "matmul_q4: short input");
    let mut xq = vec![0i8; t_rows * cols];
    // Scales and block sums of a row side by side: `nb + nbp` values.
    let mut xss = vec![0f32; t_rows * (nb + nbp)];
    for_rows(t_rows, 16, &mut xq, cols, &mut xss, nb + nbp, |t, q, ss| {
        let (s, sums) = ss.split_at_mut(nb);
        quantize_row(&x[t * cols..(t + 1) * cols], q, s, sums)
    });
    let mut xs = Vec::with_capacity(t_rows * nb);
    let mut xsum = Vec::with_capacity(t_rows * nbp);
    for ss in xss.chunks_exact(nb + nbp) {
        xs.extend_from_slice(&ss[..nb]);
        xsum.extend_from_slice(&ss[nb..]);
    }
    tiled(t_rows, w.rows, Q4_ROWS, |t, tt, r, rr, res, stride| {
        tile_q4(&xq, &xs, &xsum, t, tt, w, r, rr, res, stride)
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

    /// Values written as GGUF Q4_1 (f16 d and m, `d·q + m` in f32) come back exactly.
    #[test]
    fn q4_1_values_round_trip_exactly() {
        let (rows, cols) = (5, 3 * QK);
        let mut x = vec![0.0f32; rows * cols];
        for (bi, xb) in x.chunks_exact_mut(QK).enumerate() {
            let d = f16::from_f32(0.001 + bi as f32 * 0.00037).to_f32();
            let m = f16::from_f32(-0.01 * bi as f32 - 0.003).to_f32();
            for (j, v) in xb.iter_mut().enumerate() {
                // Every block holds 0 and 15; the rest vary.
                let q = match j {
                    0 => 0,
                    1 => 15,
                    _ => (j * 7 + bi) % 16,
                };
                *v = q as f32 * d + m;
            }
        }
        let w = Q4Matrix::from_f32(rows, cols, &x).unwrap();
        let mut back = vec![0.0f32; cols];
        for r in 0..rows {
            w.dequantize_row(r, &mut back);
            for (a, b) in back.iter().zip(&x[r * cols..(r + 1) * cols]) {
                assert_eq!(a.to_bits(), b.to_bits(), "row {r}");
            }
        }
        assert_eq!(w.nbytes(), rows * (3 * 16 + 3 * 4 + 8 * 2));
        // Arbitrary values: within half a step of their block.
        let y = data(rows * cols, 3);
        let w = Q4Matrix::from_f32(rows, cols, &y).unwrap();
        for r in 0..rows {
            w.dequantize_row(r, &mut back);
            for (a, b) in back.iter().zip(&y[r * cols..(r + 1) * cols]) {
                assert!((a - b).abs() <= 0.5 / 15.0 + 1e-3, "{a} vs {b}");
            }
        }
        assert!(matches!(
            Q4Matrix::from_f32(1, 33, &[0.0; 33]),
            Err(Q4Error::Cols(33))
        ));
        assert!(matches!(
            Q4Matrix::from_f32(1, 32, &[1e9; 32]),
            Err(Q4Error::Range(_))
        ));
    }

    /// Every value of `matmul_q4` is the scalar reference's bits, whatever the token
    /// count (1..=21), the row count (odd, across a block boundary), the tile, or
    /// threads; and it is close to the f32 dot product of the dequantised weights.
    #[test]
    fn q4_matmul_tiles_match_scalar_reference_bitwise() {
        for cols in [19 * QK, 18 * QK, 2 * QK, QK] {
            let (nb, nbp) = (cols / QK, pad8(cols / QK));
            let (tmax, rows) = (21, 29); // 21: past a 16-token tile
            let x = data(tmax * cols, 1);
            let wf = data(rows * cols, 2);
            let w = Q4Matrix::from_f32(rows, cols, &wf).unwrap();
            let mut xq = vec![0i8; tmax * cols];
            let mut xs = vec![0f32; tmax * nb];
            let mut xsum = vec![0f32; tmax * nbp];
            for t in 0..tmax {
                quantize_row(
                    &x[t * cols..(t + 1) * cols],
                    &mut xq[t * cols..(t + 1) * cols],
                    &mut xs[t * nb..(t + 1) * nb],
                    &mut xsum[t * nbp..(t + 1) * nbp],
                );
            }
            let want: Vec<u32> = (0..tmax)
                .flat_map(|t| (0..rows).map(move |r| (t, r)))
                .map(|(t, r)| {
                    dot_q4_scalar(
                        &xq[t * cols..(t + 1) * cols],
                        &xs[t * nb..(t + 1) * nb],
                        &xsum[t * nbp..(t + 1) * nbp],
                        &w,
                        r,
                    )
                    .to_bits()
                })
                .collect();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                for t in 1..=tmax {
                    let got = pool.install(|| matmul_q4(&x[..t * cols], t, &w));
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(
                        got,
                        want[..t * rows],
                        "cols {cols}, {t} tokens, {threads} threads"
                    );
                }
            }
            // Close to the exact product of the activations and the q4 weights.
            let mut wr = vec![0.0f32; cols];
            w.dequantize_row(6, &mut wr);
            let exact: f32 = x[4 * cols..5 * cols]
                .iter()
                .zip(&wr)
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
