//! Prompt (prefill) attention on AMX tiles in bf16: an opt-in precision, used only
//! where the distribution-equivalence gate admits it (`--cpu-prefill-attention`).
//!
//! Why: on a CPU with AMX a prefill of thousands of tokens spends ~45 % of its time in
//! f32 attention (the FMA units are the limit), while one `tdpbf16ps` multiplies a
//! 16 × 32 by a 32 × 16 bf16 tile, ~15× the FMA peak. Q (scaled), K, the softmax
//! probabilities and V are rounded to bf16 (round to nearest even); products are summed
//! in f32; the softmax itself runs in f32 on the f32 scores ([`softmax16`]).
//!
//! Layout trick: `tdpbf16ps` sums pairs `A[i][2r+t] · B[r][2n+t]`; the pairing of the
//! inner index only has to agree between A and B, so pair `r` of a 32-wide inner tile is
//! (element `r`, element `r + 16`). A pair is then one 32-bit lane built from two
//! 16-lane f32 vectors (`pair_bf16`), with no shuffle: Q rows, the K pool's
//! per-dimension key rows, the probability rows and the V pool's rows convert as they lie.
//!
//! Like the f32 kernels, a row's result depends only on its own query, causal length and
//! the K/V it sees: key tiles are aligned to absolute key positions, the probabilities
//! past a row's length are exact zeros, and tile rows are independent. So a prompt gives
//! the same bits however it is chunked or batched. Decode and verify rows never come
//! here (the caller sends prompt rows only), so speculation stays lossless.

use super::attention::attend;
#[cfg(target_arch = "x86_64")]
use super::attention::{check, softmax16, KvLayout};
use crate::{AttnShape, SeqInput};
#[cfg(target_arch = "x86_64")]
use std::cell::RefCell;

/// Whether this CPU runs AMX-BF16 tiles for this process: the CPU has AMX-TILE, AMX-BF16
/// and AVX-512F/BW, Linux granted the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`),
/// and `WRING_CPU_AMX` is not `0`. Decided once.
pub fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static AMX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AMX.get_or_init(|| {
            std::env::var("WRING_CPU_AMX").map_or(true, |v| v != "0")
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && cpu_has_amx_bf16()
                && request_tile_permission()
        })
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// CPUID leaf 7: EDX bit 22 (AMX-BF16) and bit 24 (AMX-TILE).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn cpu_has_amx_bf16() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let max = __cpuid(0).eax;
    if max < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    edx & (1 << 22) != 0 && edx & (1 << 24) != 0
}

/// Asks Linux for the AMX tile data state (XFEATURE 18), process-wide; false when refused
/// (an older kernel, or a hypervisor that does not expose it).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_permission() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only changes this process's permitted
    // XSAVE features; the syscall clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret == 0
}

/// [`attend`] of the query heads `heads` (all of one KV head) for prompt rows in bf16 AMX
/// tiles ([module docs](self): not the f32 reference's bits; used only where the gate
/// admitted it), or [`attend`] head by head where this CPU has no AMX-BF16 or the shape
/// does not fit the tiles. Returns `[head][query_len][head_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn attend_prompt_bf16(
    seq: &SeqInput,
    heads: std::ops::Range<usize>,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    block_size: usize,
) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if available() && fits(shape, block_size) {
        let lay = KvLayout::of(shape, block_size);
        check(seq, q, k_pool, v_pool, shape, lay);
        let group = shape.n_heads / shape.n_kv_heads;
        assert!(
            !heads.is_empty()
                && heads.end <= shape.n_heads
                && (heads.end - 1) / group == heads.start / group,
            "attention: heads {heads:?} do not share one KV head"
        );
        // SAFETY: AMX-BF16 and AVX-512 available, the shape fits, ranges checked above.
        return unsafe { attend_bf16(seq, heads, q, k_pool, v_pool, shape, lay) };
    }
    heads
        .flat_map(|h| attend(seq, h, q, k_pool, v_pool, shape, block_size))
        .collect()
}

/// Rows of a tile, and 32-bit lanes (bf16 pairs) of a tile row.
#[cfg(target_arch = "x86_64")]
const T: usize = 16;
/// u32 values of one tile (16 rows × 64 bytes).
#[cfg(target_arch = "x86_64")]
const TILE: usize = T * T;

/// The 64-byte tile configuration (palette 1): tiles 0–7 all 16 rows × 64 bytes.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

#[cfg(target_arch = "x86_64")]
impl TileConfig {
    fn all_full() -> Self {
        let mut c = [0u8; 64];
        c[0] = 1; // palette
        for t in 0..8 {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes()); // bytes a row
            c[48 + t] = T as u8; // rows
        }
        TileConfig(c)
    }
}

/// `tileloadd tmm$t, [base + stride]`.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_load {
    ($t:literal, $base:expr, $stride:expr) => {
        std::arch::asm!(
            concat!("tileloadd tmm", $t, ", [{b} + {s} * 1]"),
            b = in(reg) $base,
            s = in(reg) $stride,
            options(nostack, readonly)
        )
    };
}

/// `tilestored [base + stride], tmm$t`.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_store {
    ($t:literal, $base:expr, $stride:expr) => {
        std::arch::asm!(
            concat!("tilestored [{b} + {s} * 1], tmm", $t),
            b = in(reg) $base,
            s = in(reg) $stride,
            options(nostack)
        )
    };
}

#[cfg(target_arch = "x86_64")]
macro_rules! tile_zero {
    ($t:literal) => {
        std::arch::asm!(concat!("tilezero tmm", $t), options(nostack, nomem))
    };
}

/// `tmm$c += tmm$a · tmm$b` (bf16 pairs, f32 sums).
#[cfg(target_arch = "x86_64")]
macro_rules! tile_dp {
    ($c:literal, $a:literal, $b:literal) => {
        std::arch::asm!(
            concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b),
            options(nostack, nomem)
        )
    };
}

/// Sixteen bf16 pairs: lane `l` holds `round(lo[l])` in its low half and `round(hi[l])`
/// in its high half (round to nearest even on the f32 bits; inputs are finite or −∞).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn pair_bf16(
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let round = |x: __m512| {
        let b = _mm512_castps_si512(x);
        let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
        _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)))
    };
    _mm512_or_si512(
        _mm512_and_si512(round(hi), _mm512_set1_epi32(0xffff_0000u32 as i32)),
        _mm512_srli_epi32::<16>(round(lo)),
    )
}

/// [`pair_bf16`] of `lo`, `hi`, and of what rounding left of them (`x − bf16(x)`, exact in
/// f32): a value is `hi part + residual part` to ~16 significant bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn pair_bf16_split(
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
) -> (std::arch::x86_64::__m512i, std::arch::x86_64::__m512i) {
    use std::arch::x86_64::*;
    let top = pair_bf16(lo, hi);
    let mask = _mm512_set1_epi32(0xffff_0000u32 as i32);
    let lo_r = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(top));
    let hi_r = _mm512_castsi512_ps(_mm512_and_si512(top, mask));
    (
        top,
        pair_bf16(_mm512_sub_ps(lo, lo_r), _mm512_sub_ps(hi, hi_r)),
    )
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Per-thread scratch: Q tiles, K tiles, V tiles, probability tiles (u32 bf16 pairs),
    /// scores `[row][key]`, output accumulators `[row][dim]`.
    static SCRATCH: RefCell<AmxScratch> = RefCell::new(AmxScratch::default());
}

#[cfg(target_arch = "x86_64")]
#[derive(Default)]
struct AmxScratch {
    qt: Vec<u32>,
    kt: Vec<u32>,
    vt: Vec<u32>,
    pt: Vec<u32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
}

/// Whether the bf16 kernel takes this shape: head dimension a multiple of 32 (inner
/// tiles), block size a multiple of 16 (a key tile is contiguous in the K pool).
pub fn fits(shape: AttnShape, block_size: usize) -> bool {
    shape.head_dim.is_multiple_of(32) && block_size.is_multiple_of(16)
}

/// Causal attention of the query heads `heads` (all of one KV head: K and V are converted
/// to tiles once for them) over the sequence's context, every row of `seq` in bf16 tiles
/// (module docs). Returns `[head][query_len][head_dim]`, heads in order.
///
/// # Safety
/// [`available`] is true; [`fits`] holds; `heads` share one KV head; every block of the
/// context lies inside both pools and `q` holds the sequence's rows (checked by
/// [`attend_prompt_bf16`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
#[allow(clippy::needless_range_loop)]
pub(crate) unsafe fn attend_bf16(
    seq: &SeqInput,
    heads: std::ops::Range<usize>,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    lay: KvLayout,
) -> Vec<f32> {
    use std::arch::x86_64::*;
    let d = shape.head_dim;
    let bs = lay.block_size;
    let kvh = heads.start / (shape.n_heads / shape.n_kv_heads);
    let q_width = shape.n_heads * d;
    let scale = 1.0 / (d as f32).sqrt();
    let rows = seq.query_len;
    let ctx = seq.context_len;
    let first_len = ctx - rows + 1; // row j sees keys 0..first_len + j
    let groups = rows.div_ceil(T);
    let dt_n = d / 32; // inner tiles of the scores
    let dc_n = d / T; // output tiles of 16 dimensions
    let kb32 = ctx.div_ceil(32); // key tiles of the output; the scores run two of 16
    let stride = kb32 * 32; // scores row stride (keys, padded)
    let mut out = vec![0.0f32; heads.len() * rows * d];
    SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        // Every value a tile reads is written below before it is read (the padding
        // included), so the buffers are only grown, never cleared.
        let grow = |v: &mut Vec<u32>, n: usize| {
            if v.len() < n {
                v.resize(n, 0);
            }
        };
        grow(&mut s.qt, groups * dt_n * 2 * TILE);
        grow(&mut s.kt, kb32 * 2 * dt_n * 2 * TILE);
        grow(&mut s.vt, kb32 * dc_n * 2 * TILE);
        grow(&mut s.pt, groups * kb32 * 2 * TILE);
        if s.scores.len() < groups * T * stride {
            s.scores.resize(groups * T * stride, 0.0);
        }
        if s.acc.len() < groups * T * d {
            s.acc.resize(groups * T * d, 0.0);
        }

        // K tiles (kb, dt, part): row r = dimensions (32dt + r, 32dt + 16 + r), lane n =
        // key 16kb + n (the pool holds 16 consecutive keys of a dimension contiguously);
        // part 0 the bf16 values, part 1 their residuals. Keys past the context are zeros,
        // up to the last two-tile step.
        let pos_of = |k: usize| (seq.block_table[k / bs] as usize, k % bs);
        let kt_at = |kb: usize, dt: usize, part: usize| ((kb * dt_n + dt) * 2 + part) * TILE;
        for kb in 0..kb32 * 2 {
            let valid = ctx.saturating_sub(kb * T).min(T);
            for dt in 0..dt_n {
                let (dh, dl) = (
                    s.kt.as_mut_ptr().add(kt_at(kb, dt, 0)),
                    s.kt.as_mut_ptr().add(kt_at(kb, dt, 1)),
                );
                if valid == 0 {
                    std::ptr::write_bytes(dh, 0, TILE);
                    std::ptr::write_bytes(dl, 0, TILE);
                    continue;
                }
                let (b, slot) = pos_of(kb * T);
                let base = k_pool.as_ptr().add(lay.k_at(b, slot, kvh));
                let mask: __mmask16 = if valid == T {
                    0xffff
                } else {
                    (1u16 << valid) - 1
                };
                for r in 0..T {
                    let lo = _mm512_maskz_loadu_ps(mask, base.add((32 * dt + r) * bs));
                    let hi = _mm512_maskz_loadu_ps(mask, base.add((32 * dt + 16 + r) * bs));
                    let (top, rest) = pair_bf16_split(lo, hi);
                    _mm512_storeu_si512(dh.add(r * T).cast(), top);
                    _mm512_storeu_si512(dl.add(r * T).cast(), rest);
                }
            }
        }
        // V tiles (kb, c, part): row l = keys (32kb + l, 32kb + 16 + l), lane n = dimension
        // 16c + n; values then residuals. Keys past the context are zeros.
        let vt_at = |kb: usize, c: usize, part: usize| ((kb * dc_n + c) * 2 + part) * TILE;
        for kb in 0..kb32 {
            for l in 0..T {
                let row = |k: usize| -> Option<*const f32> {
                    (k < ctx).then(|| {
                        let (b, slot) = pos_of(k);
                        v_pool.as_ptr().add(lay.v_at(b, slot, kvh))
                    })
                };
                let (r0, r1) = (row(32 * kb + l), row(32 * kb + 16 + l));
                for c in 0..dc_n {
                    let ld = |r: Option<*const f32>| {
                        r.map_or(_mm512_setzero_ps(), |p| _mm512_loadu_ps(p.add(16 * c)))
                    };
                    let (top, rest) = pair_bf16_split(ld(r0), ld(r1));
                    let v0 = s.vt.as_mut_ptr().add(vt_at(kb, c, 0) + l * T);
                    let v1 = s.vt.as_mut_ptr().add(vt_at(kb, c, 1) + l * T);
                    _mm512_storeu_si512(v0.cast(), top);
                    _mm512_storeu_si512(v1.cast(), rest);
                }
            }
        }

        let cfg = TileConfig::all_full();
        std::arch::asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
        let row_bytes = T * 4; // one tile row: 64 bytes
        for (hi, h) in heads.clone().enumerate() {
            let out_h = out.as_mut_ptr().add(hi * rows * d);
            // Q tiles (g, dt, part): row i = query 16g + i, lane l = (q[32dt + l],
            // q[32dt + 16 + l]) · scale, values then residuals; rows past the sequence are
            // zeros.
            let qt_at = |g: usize, dt: usize, part: usize| ((g * dt_n + dt) * 2 + part) * TILE;
            for j in 0..groups * T {
                let (g, i) = (j / T, j % T);
                for dt in 0..dt_n {
                    let (top, rest) = if j < rows {
                        let qv = q.as_ptr().add((seq.query_start + j) * q_width + h * d);
                        let sc = _mm512_set1_ps(scale);
                        let lo = _mm512_mul_ps(_mm512_loadu_ps(qv.add(32 * dt)), sc);
                        let hi = _mm512_mul_ps(_mm512_loadu_ps(qv.add(32 * dt + 16)), sc);
                        pair_bf16_split(lo, hi)
                    } else {
                        (_mm512_setzero_si512(), _mm512_setzero_si512())
                    };
                    let q0 = s.qt.as_mut_ptr().add(qt_at(g, dt, 0) + i * T);
                    let q1 = s.qt.as_mut_ptr().add(qt_at(g, dt, 1) + i * T);
                    _mm512_storeu_si512(q0.cast(), top);
                    _mm512_storeu_si512(q1.cast(), rest);
                }
            }
            // The longest row of group g (its last), and where its scores start.
            let glen = |g: usize| first_len + (g * T + T).min(rows) - 1;
            let sbase_of = |g: usize| s.scores.as_ptr().add(g * T * stride) as *mut f32;
            // Scores: S(16 rows × 16 keys), two key tiles at a time (tmm0, tmm1), over the
            // inner tiles, each product as Qhi·Khi + Qres·Khi + Qhi·Kres (~16 significant
            // bits: with bf16 alone a score of 20 is off by ~0.08, and its probability by
            // 8 %). Key tiles outside, row groups inside: a key tile is read from memory once
            // a head and reused from L1 by every group that sees it.
            for kp in 0..glen(groups - 1).div_ceil(32) {
                for g in (0..groups).filter(|&g| kp < glen(g).div_ceil(32)) {
                    tile_zero!(0);
                    tile_zero!(1);
                    for dt in 0..dt_n {
                        let qt = |part: usize| s.qt.as_ptr().add(qt_at(g, dt, part));
                        let kt =
                            |i: usize, part: usize| s.kt.as_ptr().add(kt_at(2 * kp + i, dt, part));
                        tile_load!(2, qt(0), row_bytes);
                        tile_load!(3, qt(1), row_bytes);
                        tile_load!(4, kt(0, 0), row_bytes);
                        tile_load!(6, kt(1, 0), row_bytes);
                        tile_dp!(0, 2, 4);
                        tile_dp!(1, 2, 6);
                        tile_load!(5, kt(0, 1), row_bytes);
                        tile_load!(7, kt(1, 1), row_bytes);
                        tile_dp!(0, 3, 4);
                        tile_dp!(1, 3, 6);
                        tile_dp!(0, 2, 5);
                        tile_dp!(1, 2, 7);
                    }
                    tile_store!(0, sbase_of(g).add(32 * kp), stride * 4);
                    tile_store!(1, sbase_of(g).add(32 * kp + 16), stride * 4);
                }
            }
            // Softmax per row over its own keys (f32); zeros past them, up to the group's
            // last 32-key tile. Then the group's P tiles (g, kb, part), all written before
            // any is loaded (a tile load right after the vector stores of its bytes waits).
            let gpad = |g: usize| glen(g).div_ceil(32) * 32;
            let pt_at = |g: usize, kb: usize, part: usize| ((g * kb32 + kb) * 2 + part) * TILE;
            let mut inv = vec![0.0f32; groups * T];
            for g in 0..groups {
                let (r0, r1) = (g * T, (g * T + T).min(rows));
                let sbase = sbase_of(g);
                for j in r0..r1 {
                    let len = first_len + j;
                    let row = std::slice::from_raw_parts_mut(sbase.add((j - r0) * stride), gpad(g));
                    let n = len.div_ceil(T) * T;
                    row[len..n].fill(f32::NEG_INFINITY);
                    inv[j] = softmax16(&mut row[..n]);
                    row[n..].fill(0.0);
                }
                for kb in 0..gpad(g) / 32 {
                    let p0 = s.pt.as_mut_ptr().add(pt_at(g, kb, 0));
                    let p1 = s.pt.as_mut_ptr().add(pt_at(g, kb, 1));
                    for i in 0..T {
                        let (top, rest) = if r0 + i < r1 {
                            let p = sbase.add(i * stride + 32 * kb);
                            pair_bf16_split(_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
                        } else {
                            (_mm512_setzero_si512(), _mm512_setzero_si512())
                        };
                        _mm512_storeu_si512(p0.add(i * T).cast(), top);
                        _mm512_storeu_si512(p1.add(i * T).cast(), rest);
                    }
                }
            }
            // Output: O(16 rows × 16 dims) += P(16 × 32 keys) · V(32 keys × 16 dims) as
            // Phi·Vhi + Pres·Vhi + Phi·Vres, in chunks of four output tiles (tmm4–7).
            // (Blocking the keys so that every group reuses a block's V tiles from cache
            // measured no faster: attention_bench, results/2026-12-05-cpu-prefill-bf16.)
            let acc = s.acc.as_mut_ptr();
            let acc_at = |g: usize, c: usize| acc.add(g * T * d + 16 * c);
            for g in 0..groups {
                for c0 in (0..dc_n).step_by(4) {
                    let nc = (dc_n - c0).min(4);
                    tile_zero!(4);
                    tile_zero!(5);
                    tile_zero!(6);
                    tile_zero!(7);
                    for kb in 0..gpad(g) / 32 {
                        tile_load!(0, s.pt.as_ptr().add(pt_at(g, kb, 0)), row_bytes);
                        tile_load!(1, s.pt.as_ptr().add(pt_at(g, kb, 1)), row_bytes);
                        let vt = |c: usize, part: usize| s.vt.as_ptr().add(vt_at(kb, c0 + c, part));
                        macro_rules! out_tile {
                            ($acc:literal, $c:expr) => {
                                tile_load!(2, vt($c, 0), row_bytes);
                                tile_load!(3, vt($c, 1), row_bytes);
                                tile_dp!($acc, 0, 2);
                                tile_dp!($acc, 1, 2);
                                tile_dp!($acc, 0, 3);
                            };
                        }
                        out_tile!(4, 0);
                        if nc > 1 {
                            out_tile!(5, 1);
                        }
                        if nc > 2 {
                            out_tile!(6, 2);
                        }
                        if nc > 3 {
                            out_tile!(7, 3);
                        }
                    }
                    tile_store!(4, acc_at(g, c0), d * 4);
                    if nc > 1 {
                        tile_store!(5, acc_at(g, c0 + 1), d * 4);
                    }
                    if nc > 2 {
                        tile_store!(6, acc_at(g, c0 + 2), d * 4);
                    }
                    if nc > 3 {
                        tile_store!(7, acc_at(g, c0 + 3), d * 4);
                    }
                }
            }
            for j in 0..rows {
                let iv = _mm512_set1_ps(inv[j]);
                for c in 0..dc_n {
                    let a = _mm512_loadu_ps(s.acc.as_ptr().add(j * d + 16 * c));
                    _mm512_storeu_ps(out_h.add(j * d + 16 * c), _mm512_mul_ps(a, iv));
                }
            }
        }
        std::arch::asm!("tilerelease", options(nostack, nomem));
    });
    out
}

#[cfg(test)]
mod tests {
    use super::super::attention::attend;
    use super::super::attention::testing::{
        data as unit_data, row_f64, shuffled_table, test_shape,
    };
    use super::attend_prompt_bf16;
    use crate::SeqInput;

    fn data(n: usize, seed: usize, scale: f32) -> Vec<f32> {
        unit_data(n, seed).into_iter().map(|x| x * scale).collect()
    }

    fn bits(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    /// Prompt attention in bf16 tiles: within bf16's rounding of an f64 softmax, for
    /// partial tiles of rows, keys and blocks and peaked or flat scores; a row's bits do
    /// not depend on the rows computed with it (a prompt chunked differently gives the
    /// same bits). Without AMX-BF16 the call is the f32 kernel, bit for bit.
    #[test]
    fn prompt_attention_in_bf16_tiles_is_close_and_row_independent() {
        let amx = super::available();
        if !amx {
            eprintln!("no AMX-BF16 on this CPU: checking the f32 fallback only");
        }
        for (d, bs, q_scale) in [(64, 16, 1.0), (64, 32, 8.0), (128, 16, 4.0), (32, 48, 1.0)] {
            let (shape, lay, blocks) = test_shape(d, bs);
            let (k, v) = (
                data(lay.pool_len(blocks), 5, 2.0),
                data(lay.pool_len(blocks), 6, 1.0),
            );
            for (query_len, context_len) in [
                (1usize, 1usize),
                (5, 77),
                (17, 17),
                (70, 70),
                (37, 300),
                (64, 931),
            ] {
                let table = shuffled_table(context_len, bs, blocks);
                let seq = |start: usize, len: usize, ctx: usize| SeqInput {
                    query_start: start,
                    query_len: len,
                    context_len: ctx,
                    block_table: table.clone(),
                    prompt_len: context_len,
                };
                let whole = seq(2, query_len, context_len);
                let q = data((2 + query_len) * shape.n_heads * d, query_len, q_scale);
                for h in 0..shape.n_heads {
                    // Heads 3h/3.. of the KV head (a task's heads), this head's rows.
                    let g0 = h / 3 * 3;
                    let all = attend_prompt_bf16(&whole, g0..g0 + 3, &q, &k, &v, shape, bs);
                    let got = all[(h - g0) * query_len * d..][..query_len * d].to_vec();
                    let alone = attend_prompt_bf16(&whole, h..h + 1, &q, &k, &v, shape, bs);
                    assert_eq!(bits(&alone), bits(&got), "one head alone");
                    if !amx {
                        let f32_rows = attend(&whole, h, &q, &k, &v, shape, bs);
                        assert_eq!(bits(&got), bits(&f32_rows));
                        continue;
                    }
                    // The same rows in two pieces, and the last row alone.
                    let cut = query_len / 3;
                    let first_pos = context_len - query_len;
                    let mut pieces = Vec::new();
                    if cut > 0 {
                        pieces.extend(attend_prompt_bf16(
                            &seq(2, cut, first_pos + cut),
                            h..h + 1,
                            &q,
                            &k,
                            &v,
                            shape,
                            bs,
                        ));
                    }
                    pieces.extend(attend_prompt_bf16(
                        &seq(2 + cut, query_len - cut, context_len),
                        h..h + 1,
                        &q,
                        &k,
                        &v,
                        shape,
                        bs,
                    ));
                    assert_eq!(
                        bits(&pieces),
                        bits(&got),
                        "pieces, d {d} bs {bs} q {query_len} ctx {context_len}"
                    );
                    let last = attend_prompt_bf16(
                        &seq(1 + query_len, 1, context_len),
                        h..h + 1,
                        &q,
                        &k,
                        &v,
                        shape,
                        bs,
                    );
                    assert_eq!(bits(&last), bits(&got[(query_len - 1) * d..]), "last row");
                    // Every row against an f64 softmax.
                    let mut worst = 0.0f64;
                    for j in 0..query_len {
                        let qv = &q[(2 + j) * shape.n_heads * d + h * d..][..d];
                        let want = row_f64(qv, &k, &v, lay, &table, h / 3, first_pos + j + 1);
                        for (o, &g) in want.iter().zip(&got[j * d..(j + 1) * d]) {
                            worst = worst.max((o - g as f64).abs());
                        }
                    }
                    // Split products keep ~16 significant bits: 2⁻¹⁷ of |V| ≤ 0.5 ≈ 4e-6
                    // (measured up to 3.2e-6 here; plain bf16 tiles were off by 1.4e-3).
                    assert!(
                        worst < 2e-5,
                        "d {d} bs {bs} q {query_len} ctx {context_len} head {h}: {worst:e}"
                    );
                    assert!(
                        worst > 0.0 || context_len == 1,
                        "bf16 should not be f64-exact"
                    );
                }
            }
        }
    }
}
