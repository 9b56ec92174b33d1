//! 8-bit weights for the CPU: blocks of 32 int8 values with one f32 scale (the Q8_0
//! layout), multiplied against activations quantised the same way per token row.
//! A quarter of f32's memory traffic per decode step. Still batch-invariant: each
//! activation row is quantised on its own and each dot product sums in a fixed order.

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

/// Σ over blocks of `sa·sb·Σ(a·b)`, blocks in order.
#[inline]
pub fn dot_q8(a: &[i8], sa: &[f32], b: &[i8], sb: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: features detected at run time.
            return unsafe { dot_q8_avx2(a, sa, b, sb) };
        }
    }
    dot_q8_scalar(a, sa, b, sb)
}

fn dot_q8_scalar(a: &[i8], sa: &[f32], b: &[i8], sb: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (i, (ab, bb)) in a.chunks_exact(QK).zip(b.chunks_exact(QK)).enumerate() {
        let s: i32 = ab.iter().zip(bb).map(|(&x, &y)| x as i32 * y as i32).sum();
        acc = (sa[i] * sb[i]).mul_add(s as f32, acc);
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_q8_avx2(a: &[i8], sa: &[f32], b: &[i8], sb: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let nb = a.len() / QK;
    let ones = _mm256_set1_epi16(1);
    // A macro, not a closure: the body must be compiled with this function's features.
    macro_rules! block {
        ($i:expr) => {{
            let i = $i;
            let va = _mm256_loadu_si256(a.as_ptr().add(i * QK) as *const __m256i);
            let vb = _mm256_loadu_si256(b.as_ptr().add(i * QK) as *const __m256i);
            // maddubs needs unsigned × signed: move a's sign onto b.
            let abs_a = _mm256_sign_epi8(va, va);
            let sgn_b = _mm256_sign_epi8(vb, va);
            let p16 = _mm256_maddubs_epi16(abs_a, sgn_b);
            let p32 = _mm256_madd_epi16(p16, ones);
            (_mm256_set1_ps(sa[i] * sb[i]), _mm256_cvtepi32_ps(p32))
        }};
    }
    // Even and odd blocks in two chains (the FMA latency, not the integer work, bounded
    // one chain), joined once at the end: a fixed order whatever the batch.
    let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 1 < nb {
        let (d0, p0) = block!(i);
        let (d1, p1) = block!(i + 1);
        even = _mm256_fmadd_ps(d0, p0, even);
        odd = _mm256_fmadd_ps(d1, p1, odd);
        i += 2;
    }
    if i < nb {
        let (d0, p0) = block!(i);
        even = _mm256_fmadd_ps(d0, p0, even);
    }
    let acc = _mm256_add_ps(even, odd);
    let lo = _mm256_castps256_ps128(acc);
    let hi = _mm256_extractf128_ps(acc, 1);
    let s4 = _mm_add_ps(lo, hi);
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    _mm_cvtss_f32(s1)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!((got - scalar).abs() < 1e-3 * scalar.abs().max(1.0));
    }
}
