//! 8-bit weights for the CPU: blocks of 32 int8 values with one f32 scale (the Q8_0
//! layout), multiplied against activations quantised the same way per token row.
//! A quarter of f32's memory traffic per decode step. Still batch-invariant: each
//! activation row is quantised on its own and each dot product sums in a fixed order.

use super::tiling::{for_rows, tiled};

pub const QK: usize = 32;

/// A row-major `[rows][cols]` matrix in 32-value blocks.
pub struct Q8Matrix {
    pub rows: usize,
    pub cols: usize,
    /// `rows * cols / 32` scales.
    pub scales: Vec<f32>,
    pub quants: Vec<i8>,
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

/// The same code compiled for AVX2: `round` becomes one `vroundps` instead of a libm
/// call per value; rounding is exact either way, so the bits are the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(x: &[f32], q: &mut [i8], s: &mut [f32]) {
    quantize_row_impl(x, q, s)
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
        let mut quants = vec![0i8; rows * cols];
        let mut scales = vec![0f32; rows * cols / QK];
        quantize_row(data, &mut quants, &mut scales);
        Self {
            rows,
            cols,
            scales,
            quants,
        }
    }

    pub fn row(&self, r: usize) -> (&[i8], &[f32]) {
        let nb = self.cols / QK;
        (
            &self.quants[r * self.cols..(r + 1) * self.cols],
            &self.scales[r * nb..(r + 1) * nb],
        )
    }
}

/// Largest weight-row count of a q8 tile of `tt` activation rows (index `tt`, 1..=4).
/// One token: 1x2 (a 1x4 tile spills registers; 1x2 measured ~15 % faster per step).
pub const Q8_ROWS: [usize; 5] = [0, 2, 4, 3, 2];

/// Σ over blocks of `sa·sb·Σ(a·b)` in the q8 order: per block, `d = sa·sb` and the
/// 8 lanes' integer sums (lane `l` = bytes `4l..4l+4`) FMA'd into an 8-lane chain; the
/// blocks `0..nb/2` and `nb/2..nb` are two chains, added, then reduced by a fixed tree.
/// [`tile_q8`] (the matmul) computes each value with exactly these operations.
#[inline]
pub fn dot_q8(a: &[i8], sa: &[f32], b: &[i8], sb: &[f32]) -> f32 {
    let nb = a.len() / QK;
    assert!(
        a.len() == b.len() && a.len() == nb * QK && sa.len() >= nb && sb.len() >= nb,
        "dot_q8: mismatched lengths"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            let mut out = [[0.0f32; 1]; 1];
            // SAFETY: features detected at run time; lengths checked above.
            unsafe {
                tile_avx2::<1, 1>(
                    [a.as_ptr()],
                    [sa.as_ptr()],
                    [b.as_ptr()],
                    [sb.as_ptr()],
                    nb,
                    &mut out,
                )
            };
            return out[0][0];
        }
    }
    dot_q8_scalar(a, sa, b, sb)
}

/// The q8 order without SIMD (the reference for the AVX2 tiles, bit for bit).
fn dot_q8_scalar(a: &[i8], sa: &[f32], b: &[i8], sb: &[f32]) -> f32 {
    let nb = a.len() / QK;
    let chain = |from: usize, to: usize| {
        let mut acc = [0.0f32; 8];
        for i in from..to {
            let d = sa[i] * sb[i];
            for (l, acc) in acc.iter_mut().enumerate() {
                let o = i * QK + 4 * l;
                let p: i32 = (0..4).map(|k| a[o + k] as i32 * b[o + k] as i32).sum();
                *acc = d.mul_add(p as f32, *acc);
            }
        }
        acc
    };
    let (c0, c1) = (chain(0, nb / 2), chain(nb / 2, nb));
    let l: [f32; 8] = std::array::from_fn(|i| c0[i] + c1[i]);
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// Values (t+i, r+j) for activation rows `t..t+tt` (quants `xq`, scales `xs`, packed
/// `[row][cols]` / `[row][cols/32]`) × weight rows `r..r+rr`, written to
/// `res[j * stride + i]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_q8(
    xq: &[i8],
    xs: &[f32],
    t: usize,
    tt: usize,
    w: &Q8Matrix,
    r: usize,
    rr: usize,
    res: &mut [f32],
    stride: usize,
) {
    let (cols, nb) = (w.cols, w.cols / QK);
    assert!(
        xq.len() >= (t + tt) * cols && xs.len() >= (t + tt) * nb && r + rr <= w.rows,
        "tile_q8: out of range"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            macro_rules! run {
                ($TT:literal, $RR:literal) => {{
                    let xqp: [*const i8; $TT] =
                        std::array::from_fn(|i| xq[(t + i) * cols..].as_ptr());
                    let xsp: [*const f32; $TT] =
                        std::array::from_fn(|i| xs[(t + i) * nb..].as_ptr());
                    let wqp: [*const i8; $RR] = std::array::from_fn(|j| w.row(r + j).0.as_ptr());
                    let wsp: [*const f32; $RR] = std::array::from_fn(|j| w.row(r + j).1.as_ptr());
                    let mut o = [[0.0f32; $RR]; $TT];
                    // SAFETY: AVX2+FMA detected; every row pointer holds `nb` blocks
                    // (checked above).
                    unsafe { tile_avx2::<$TT, $RR>(xqp, xsp, wqp, wsp, nb, &mut o) };
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
        for j in 0..rr {
            let (wq, ws) = w.row(r + j);
            let a = &xq[(t + i) * cols..(t + i + 1) * cols];
            res[j * stride + i] = dot_q8_scalar(a, &xs[(t + i) * nb..(t + i + 1) * nb], wq, ws);
        }
    }
}

/// One block `b` of every (activation row, weight row) pair of a tile into `acc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn step<const TT: usize, const RR: usize>(
    acc: &mut [[std::arch::x86_64::__m256; RR]; TT],
    xq: &[*const i8; TT],
    xs: &[*const f32; TT],
    wq: &[*const i8; RR],
    ws: &[*const f32; RR],
    b: usize,
) {
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let mut wv = [_mm256_setzero_si256(); RR];
    let mut sb = [0.0f32; RR];
    for r in 0..RR {
        wv[r] = _mm256_loadu_si256(wq[r].add(b * QK) as *const __m256i);
        sb[r] = *ws[r].add(b);
    }
    for t in 0..TT {
        let xv = _mm256_loadu_si256(xq[t].add(b * QK) as *const __m256i);
        // maddubs needs unsigned × signed: move x's sign onto w.
        let ax = _mm256_sign_epi8(xv, xv);
        let sa = *xs[t].add(b);
        for r in 0..RR {
            let p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[r], xv));
            let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(sa * sb[r]), p, acc[t][r]);
        }
    }
}

/// `out[i][j] = dot_q8(x[i], w[j])` for a `TT × RR` tile over `nb` blocks: both halves'
/// chains interleaved for small tiles, one half after the other for large ones; the
/// same operations per value either way.
///
/// # Safety
/// AVX2 and FMA must be available, every pointer valid for `nb` blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const TT: usize, const RR: usize>(
    xq: [*const i8; TT],
    xs: [*const f32; TT],
    wq: [*const i8; RR],
    ws: [*const f32; RR],
    nb: usize,
    out: &mut [[f32; RR]; TT],
) {
    use std::arch::x86_64::*;
    let h = nb / 2;
    let mut a0 = [[_mm256_setzero_ps(); RR]; TT];
    let mut a1 = [[_mm256_setzero_ps(); RR]; TT];
    if TT * RR <= 4 {
        for k in 0..h {
            step(&mut a0, &xq, &xs, &wq, &ws, k);
            step(&mut a1, &xq, &xs, &wq, &ws, h + k);
        }
        if 2 * h < nb {
            step(&mut a1, &xq, &xs, &wq, &ws, nb - 1);
        }
    } else {
        for b in 0..h {
            step(&mut a0, &xq, &xs, &wq, &ws, b);
        }
        for b in h..nb {
            step(&mut a1, &xq, &xs, &wq, &ws, b);
        }
    }
    for t in 0..TT {
        for r in 0..RR {
            out[t][r] = super::simd::hsum(_mm256_add_ps(a0[t][r], a1[t][r]));
        }
    }
}

/// Like [`matmul_t`](super::matmul_t) over 8-bit weights; each activation row is quantised on its own.
pub fn matmul_q8(x: &[f32], t_rows: usize, w: &Q8Matrix) -> Vec<f32> {
    let cols = w.cols;
    let nb = cols / QK;
    assert!(x.len() >= t_rows * cols, "matmul_q8: short input");
    let mut xq = vec![0i8; t_rows * cols];
    let mut xs = vec![0f32; t_rows * nb];
    for_rows(t_rows, 16, &mut xq, cols, &mut xs, nb, |t, q, s| {
        quantize_row(&x[t * cols..(t + 1) * cols], q, s)
    });
    tiled(t_rows, w.rows, Q8_ROWS, |t, tt, r, rr, res, stride| {
        tile_q8(&xq, &xs, t, tt, w, r, rr, res, stride)
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

    #[test]
    fn q8_dot_close_to_f32_dot() {
        let a: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0)
            .collect();
        let b: Vec<f32> = (0..256)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 7.0)
            .collect();
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let (qa, qb) = (
            Q8Matrix::from_f32(1, 256, &a),
            Q8Matrix::from_f32(1, 256, &b),
        );
        let got = dot_q8(&qa.quants, &qa.scales, &qb.quants, &qb.scales);
        assert!(
            (got - exact).abs() < 0.01 * exact.abs().max(1.0),
            "{got} vs {exact}"
        );
        let scalar = dot_q8_scalar(&qa.quants, &qa.scales, &qb.quants, &qb.scales);
        assert_eq!(got.to_bits(), scalar.to_bits());
    }

    /// Every value of `matmul_q8` is the scalar reference's bits, whatever the token
    /// count (1..=21), the row count (odd, across a block boundary), the tile, or threads.
    #[test]
    fn q8_matmul_tiles_match_scalar_reference_bitwise() {
        for cols in [19 * QK, 2 * QK, QK] {
            let (tmax, rows) = (21, 29); // 21: past a 16-token tile
            let x = data(tmax * cols, 1);
            let w = Q8Matrix::from_f32(rows, cols, &data(rows * cols, 2));
            let xq = Q8Matrix::from_f32(tmax, cols, &x);
            let want: Vec<u32> = (0..tmax)
                .flat_map(|t| (0..rows).map(move |r| (t, r)))
                .map(|(t, r)| {
                    let (a, sa) = xq.row(t);
                    let (b, sb) = w.row(r);
                    dot_q8_scalar(a, sa, b, sb).to_bits()
                })
                .collect();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                for t in 1..=tmax {
                    let got = pool.install(|| matmul_q8(&x[..t * cols], t, &w));
                    let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(
                        got,
                        want[..t * rows],
                        "cols {cols}, {t} tokens, {threads} threads"
                    );
                }
            }
            let (a, sa) = xq.row(4);
            let (b, sb) = w.row(6);
            assert_eq!(dot_q8(a, sa, b, sb).to_bits(), want[4 * rows + 6]);
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
