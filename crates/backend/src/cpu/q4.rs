//! 4-bit weights for the CPU (`--cpu-weights q4`): blocks of 32 unsigned 4-bit values
//! with a scale `d` and minimum `m` rounded to f16 (the Q4_1 shape, `x ≈ d·q + m`,
//! `q ∈ 0..15`), multiplied against activations quantised per token row as for q8
//! (int8 blocks of 32 with an f32 scale `d_a`) plus each block's `d_a·Σq_a` (for the
//! `m` term).
//!
//! One output over blocks `b`, in block order, one FMA chain:
//! `acc = fma(Σ(q_w·q_a), d_w·d_a, acc); acc = fma(m_w, d_a·Σq_a, acc)`. The block's
//! integer dot product is exact (any summation order gives the same integer), so the
//! only roundings are the chain's, and [`dot_q4_scalar`] is the reference, bit for bit.
//! Weights read from a GGUF Q4_1 tensor come back exactly: its f32 values are `d·q + m`
//! with f16 `d`, `m`, which the block's minimum and range recover. Still
//! batch-invariant: each activation row is quantised on its own and every value is
//! summed in that one order whatever the tile, the token count or the threads.
//!
//! Layout (llama.cpp's repacking idea, our own format): rows in groups of eight (the
//! last group zero-padded), each group's blocks back to back, 160 bytes per block: four
//! 32-byte vectors of quants, then the eight rows' `d`, then their `m`, as f16. Byte
//! `4·r + i` of vector `k` holds row `r`'s value `4k + i` in its low nibble and value
//! `16 + 4k + i` in its high one, so one load, a shift and two masks give two vectors of
//! eight rows × four values; `vpmaddubsw` against four activation bytes broadcast to
//! every row sums pairs, eight such products add up in 16 bits without overflow
//! (`2·15·127·8 < 2¹⁵`), and one `vpmaddwd` leaves each row's block sum in its own lane:
//! eight outputs per vector, no horizontal sums, and the scales of eight rows converted
//! by one `vcvtph2ps`. 20 bytes per 32 weights, as in the GGUF file.

use super::aligned::Aligned;
use super::tiling::{for_rows, grouped, GROUP};

use half::f16;

pub const QK: usize = 32;
/// Bytes of one block of one group: quants, then `d` and `m` of its eight rows.
const BLOCK_BYTES: usize = GROUP * QK / 2 + 2 * GROUP * 2;
const D_AT: usize = GROUP * QK / 2;
const M_AT: usize = D_AT + 2 * GROUP;

/// `n` rounded up to a multiple of 8.
pub const fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// A `[rows][cols]` matrix of 4-bit blocks in row groups (layout in the module docs).
pub struct Q4Matrix {
    pub rows: usize,
    pub cols: usize,
    data: Aligned<u8>,
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
        let mut out = Aligned::zeroed(rows.div_ceil(GROUP) * nb * BLOCK_BYTES);
        for (r, x) in data.chunks_exact(cols).enumerate() {
            let (g, lane) = (r / GROUP, r % GROUP);
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
                let blk = &mut out[(g * nb + b) * BLOCK_BYTES..(g * nb + b + 1) * BLOCK_BYTES];
                for (j, &v) in xb.iter().enumerate() {
                    let q = ((v - mf) * id).round().clamp(0.0, 15.0) as u8;
                    let (k, i) = ((j % 16) / 4, j % 4);
                    blk[32 * k + 4 * lane + i] |= if j < 16 { q } else { q << 4 };
                }
                blk[D_AT + 2 * lane..D_AT + 2 * lane + 2]
                    .copy_from_slice(&d.to_bits().to_le_bytes());
                blk[M_AT + 2 * lane..M_AT + 2 * lane + 2]
                    .copy_from_slice(&m.to_bits().to_le_bytes());
            }
        }
        Ok(Self {
            rows,
            cols,
            data: out,
        })
    }

    fn nb(&self) -> usize {
        self.cols / QK
    }

    /// Block `b` of the group holding row `r`.
    fn block(&self, r: usize, b: usize) -> &[u8] {
        let at = (r / GROUP * self.nb() + b) * BLOCK_BYTES;
        &self.data[at..at + BLOCK_BYTES]
    }

    /// Row `r`, block `b`: (its 32 quants, d, m).
    fn row_block(&self, r: usize, b: usize) -> ([u8; QK], f32, f32) {
        let blk = self.block(r, b);
        let lane = r % GROUP;
        let q = std::array::from_fn(|j| {
            let byte = blk[32 * ((j % 16) / 4) + 4 * lane + j % 4];
            if j < 16 {
                byte & 0xF
            } else {
                byte >> 4
            }
        });
        let half = |at: usize| f16::from_bits(u16::from_le_bytes([blk[at], blk[at + 1]])).to_f32();
        (q, half(D_AT + 2 * lane), half(M_AT + 2 * lane))
    }

    /// Row `r` as f32: `d·q + m` per value (the GGUF Q4_1 dequantisation).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        for (b, ob) in out[..self.cols].chunks_exact_mut(QK).enumerate() {
            let (q, d, m) = self.row_block(r, b);
            for (o, &q) in ob.iter_mut().zip(&q) {
                *o = q as f32 * d + m;
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

/// One value in the q4 order (module docs), without SIMD. `a`/`sa`/`suma`: one
/// activation row from [`quantize_row`].
pub fn dot_q4_scalar(a: &[i8], sa: &[f32], suma: &[f32], w: &Q4Matrix, r: usize) -> f32 {
    let mut acc = 0.0f32;
    for b in 0..w.nb() {
        let (q, d, m) = w.row_block(r, b);
        let p: i32 = q
            .iter()
            .zip(&a[b * QK..(b + 1) * QK])
            .map(|(&q, &a)| q as i32 * a as i32)
            .sum();
        acc = (p as f32).mul_add(d * sa[b], acc);
        acc = m.mul_add(suma[b], acc);
    }
    acc
}

#[cfg(target_arch = "x86_64")]
fn has_simd() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// The eight rows of group `g` (block data from `g`) for `TT` activation rows: one
/// vector of eight outputs per activation row (into `out[0..TT]`), in the q4 order.
///
/// # Safety
/// AVX2, FMA and F16C available; `g` holds `nb` blocks; every activation pointer holds
/// its row (`nb·32` quants, `nb` scales, `nb` sums).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn group_tile<const TT: usize>(
    g: *const u8,
    nb: usize,
    xq: [*const i8; TT],
    xs: [*const f32; TT],
    xsum: [*const f32; TT],
    out: &mut [[f32; GROUP]; 4],
) {
    use std::arch::x86_64::*;
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); TT];
    for b in 0..nb {
        let blk = g.add(b * BLOCK_BYTES);
        let mut s16 = [_mm256_setzero_si256(); TT];
        for k in 0..4 {
            let p = _mm256_loadu_si256(blk.add(32 * k) as *const __m256i);
            let lo = _mm256_and_si256(p, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16(p, 4), low);
            for t in 0..TT {
                let a = xq[t].add(b * QK + 4 * k);
                let alo = _mm256_set1_epi32((a as *const i32).read_unaligned());
                let ahi = _mm256_set1_epi32((a.add(16) as *const i32).read_unaligned());
                s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(lo, alo));
                s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(hi, ahi));
            }
        }
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(D_AT) as *const __m128i));
        let mw = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(M_AT) as *const __m128i));
        for t in 0..TT {
            let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[t], ones));
            let dd = _mm256_mul_ps(dw, _mm256_set1_ps(*xs[t].add(b)));
            acc[t] = _mm256_fmadd_ps(p, dd, acc[t]);
            acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(*xsum[t].add(b)), acc[t]);
        }
    }
    for t in 0..TT {
        _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]);
    }
}

/// `out[t][r]` = [`dot_q4_scalar`] of activation row `t` of `x` (quantised per row,
/// [`quantize_row`]) and weight row `r`; `[t_rows][w.rows]`.
pub fn matmul_q4(x: &[f32], t_rows: usize, w: &Q4Matrix) -> Vec<f32> {
    let cols = w.cols;
    let (nb, nbp) = (cols / QK, pad8(cols / QK));
    assert!(x.len() >= t_rows * cols, "matmul_q4: short input");
    let mut xq = vec![0i8; t_rows * cols];
    // Scales and block sums of a row side by side: `nb + nbp` values.
    let ss = nb + nbp;
    let mut xss = vec![0f32; t_rows * ss];
    for_rows(t_rows, 16, &mut xq, cols, &mut xss, ss, |t, q, s| {
        let (s, sums) = s.split_at_mut(nb);
        quantize_row(&x[t * cols..(t + 1) * cols], q, s, sums)
    });
    #[cfg(target_arch = "x86_64")]
    let simd = has_simd();
    grouped(t_rows, w.rows, |t, tt, g, vals| {
        #[cfg(target_arch = "x86_64")]
        {
            if simd {
                let gp = w.data[g * nb * BLOCK_BYTES..(g + 1) * nb * BLOCK_BYTES].as_ptr();
                macro_rules! run {
                    ($TT:literal) => {{
                        // SAFETY: features detected; group g holds nb blocks; activation
                        // rows t..t+TT exist (asserted above).
                        unsafe {
                            group_tile::<$TT>(
                                gp,
                                nb,
                                std::array::from_fn(|i| xq[(t + i) * cols..].as_ptr()),
                                std::array::from_fn(|i| xss[(t + i) * ss..].as_ptr()),
                                std::array::from_fn(|i| xss[(t + i) * ss + nb..].as_ptr()),
                                vals,
                            )
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
            let s = &xss[(t + i) * ss..(t + i + 1) * ss];
            for (lane, o) in v.iter_mut().enumerate() {
                let r = g * GROUP + lane;
                if r < w.rows {
                    *o = dot_q4_scalar(
                        &xq[(t + i) * cols..(t + i + 1) * cols],
                        &s[..nb],
                        &s[nb..],
                        w,
                        r,
                    );
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
        assert_eq!(w.nbytes(), rows.div_ceil(GROUP) * 3 * BLOCK_BYTES);
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
    /// count (1..=70), the row count (odd, across a block boundary), the tile, or
    /// threads; and it is close to the f32 dot product of the dequantised weights.
    #[test]
    fn q4_matmul_tiles_match_scalar_reference_bitwise() {
        for cols in [19 * QK, 18 * QK, 2 * QK, QK] {
            let (nb, nbp) = (cols / QK, pad8(cols / QK));
            let (tmax, rows) = (70, 29); // 70: past a 64-token task; 29: a partial group
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
                for t in (1..=21).chain([64, 65, tmax]) {
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
