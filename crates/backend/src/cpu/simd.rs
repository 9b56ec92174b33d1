//! SIMD helpers shared by the f32 (`kernels.rs`), 8-bit (`q8.rs`) and 4-bit
//! (`q4.rs`) kernels: CPU feature detection, the one fixed 8-lane reduction tree
//! every dot product ends with, and the dispatch from a tile shape to a kernel
//! instantiated for it.

#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// AVX-512F besides AVX2 and FMA, unless `WRING_CPU_AVX512=0` (read once): kernels with
/// a 16-lane version (attention) use it; their bits are those of the 8-lane one.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    static AVX512: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVX512.get_or_init(|| {
        has_avx2() && std::is_x86_feature_detected!("avx512f") && allowed("WRING_CPU_AVX512")
    })
}

/// AVX-VNNI (`vpdpbusd` on 256-bit vectors) besides AVX2 and FMA, unless
/// `WRING_CPU_VNNI=0` (read once): the 8-bit matmul sums each block's products with it,
/// the same exact integers as without.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx_vnni() -> bool {
    static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VNNI.get_or_init(|| {
        has_avx2() && std::is_x86_feature_detected!("avxvnni") && allowed("WRING_CPU_VNNI")
    })
}

/// False only when the environment sets `var` to `0` (a path switched off for A/B runs).
#[cfg(target_arch = "x86_64")]
fn allowed(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v != "0")
}

/// Lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then (0+1): the tree of [`hsum`].
pub(crate) fn tree8(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// Lanes (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then (0+1).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn hsum(sum: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm256_castps256_ps128(sum);
    let hi = _mm256_extractf128_ps(sum, 1);
    let s4 = _mm_add_ps(lo, hi);
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    _mm_cvtss_f32(s1)
}

/// Calls `$run!(TT, RR)` with the literal tile shape matching `($tt, $rr)`.
macro_rules! dispatch {
    ($tt:expr, $rr:expr, $run:ident) => {
        match ($tt, $rr) {
            (1, 1) => $run!(1, 1),
            (1, 2) => $run!(1, 2),
            (1, 3) => $run!(1, 3),
            (1, 4) => $run!(1, 4),
            (1, 5) => $run!(1, 5),
            (1, 6) => $run!(1, 6),
            (1, 7) => $run!(1, 7),
            (1, 8) => $run!(1, 8),
            (2, 1) => $run!(2, 1),
            (2, 2) => $run!(2, 2),
            (2, 3) => $run!(2, 3),
            (2, 4) => $run!(2, 4),
            (2, 5) => $run!(2, 5),
            (2, 6) => $run!(2, 6),
            (3, 1) => $run!(3, 1),
            (3, 2) => $run!(3, 2),
            (3, 3) => $run!(3, 3),
            (3, 4) => $run!(3, 4),
            (4, 1) => $run!(4, 1),
            (4, 2) => $run!(4, 2),
            (4, 3) => $run!(4, 3),
            (tt, rr) => unreachable!("no {tt}x{rr} tile"),
        }
    };
}
pub(crate) use dispatch;
