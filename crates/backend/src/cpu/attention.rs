//! Causal attention over the paged KV pool, for decode, verify and prefill alike.
//!
//! The K pool is stored transposed inside each block (`[block][kv_head][dim][slot]`),
//! V as rows (`[block][slot][kv_head][dim]`), so both products run with the lanes over
//! *keys* (scores) or *dimensions* (output) and no horizontal sum per score:
//!
//! - score `s_k = (Σ_d q[d]·K[k][d]) · scale`: one FMA chain in dimension order per
//!   (query, key), eight keys per vector;
//! - `p_k = exp(s_k − max)` with [`exp_scalar`]'s polynomial (vectorised, the same
//!   operations per lane), `denom` = lane `l` summing `p_k` for `k ≡ l (mod 8)` in key
//!   order, then the fixed tree of [`hsum`](super::simd::hsum);
//! - `o[d] = (Σ_k p_k·V[k][d]) · (1/denom)`, the sum one FMA chain in key order.
//!
//! Every value of a query row therefore depends on its own query, its own causal
//! length and the K/V it sees, never on the other rows computed with it: register
//! tiles of query rows × key vectors, the 64-key chunks the loops walk for cache reuse,
//! the task split and the thread count only decide *which* values are computed
//! together. Decode, verify and prefill give a row the same bits ([`attend_reference`]
//! is the portable order, bit for bit).

use super::aligned::Aligned;
use super::simd::tree8;
#[cfg(target_arch = "x86_64")]
use super::simd::{has_avx2, hsum};
use crate::{AttnShape, SeqInput};
use std::cell::RefCell;

/// Where K and V of (block, slot, kv head) live in a layer's pools.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KvLayout {
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl KvLayout {
    /// The layout of `shape`'s K/V heads in blocks of `block_size` slots.
    pub fn of(shape: AttnShape, block_size: usize) -> Self {
        Self {
            block_size,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
        }
    }

    /// Offset of `K[dim 0]` of (block, slot, kv head); dimension `i` is `i · block_size`
    /// further.
    #[inline]
    pub fn k_at(&self, block: usize, slot: usize, kvh: usize) -> usize {
        (block * self.n_kv_heads + kvh) * self.head_dim * self.block_size + slot
    }

    /// Offset of `V[dim 0..head_dim]` of (block, slot, kv head).
    #[inline]
    pub fn v_at(&self, block: usize, slot: usize, kvh: usize) -> usize {
        ((block * self.block_size + slot) * self.n_kv_heads + kvh) * self.head_dim
    }

    /// Values per layer pool of `num_blocks` blocks (K and V alike).
    pub fn pool_len(&self, num_blocks: usize) -> usize {
        num_blocks * self.block_size * self.n_kv_heads * self.head_dim
    }

    /// Writes one token's K and V (`[kv_head][dim]` each) into `slot` of `block`.
    pub fn store(
        &self,
        k_pool: &mut [f32],
        v_pool: &mut [f32],
        block: usize,
        slot: usize,
        k: &[f32],
        v: &[f32],
    ) {
        let d = self.head_dim;
        for kvh in 0..self.n_kv_heads {
            let base = self.k_at(block, slot, kvh);
            let col = &mut k_pool[base..base + (d - 1) * self.block_size + 1];
            for (i, &x) in k[kvh * d..(kvh + 1) * d].iter().enumerate() {
                col[i * self.block_size] = x;
            }
            let vb = self.v_at(block, slot, kvh);
            v_pool[vb..vb + d].copy_from_slice(&v[kvh * d..(kvh + 1) * d]);
        }
    }
}

/// Keys per chunk of the cache-blocked loops (K and V of a chunk stay in L1 while
/// every row of the task uses them).
const KEY_CHUNK: usize = 64;

/// Below this, `exp` returns 0 (`exp(-87)` ≈ 1.6e-38, the edge of normal f32).
const EXP_MIN: f32 = -87.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two (Cephes): `C1` exact in a few bits, `C2` the rest.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5, // Cephes: 5.0000001201e-1, which rounds to 0.5 in f32
];

/// `exp(x)` for `x ≤ 0` (softmax arguments): `x = n·ln2 + r`, a degree-7 polynomial
/// for `e^r`, times `2^n` (Cephes' `expf`, fused multiply-adds). Within 2 ulp; 0 below
/// [`EXP_MIN`]. The AVX2 kernel runs exactly these operations per lane.
pub(crate) fn exp_scalar(x: f32) -> f32 {
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        p = p.mul_add(r, c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    let pow = f32::from_bits(((n as i32).wrapping_add(127) as u32) << 23);
    if x < EXP_MIN {
        0.0
    } else {
        y * pow
    }
}

thread_local! {
    /// Per-thread scratch: scores/probabilities `[row][keys]`, output accumulators
    /// `[row][dim]`, V row offsets per position.
    static SCRATCH: RefCell<(Aligned<f32>, Aligned<f32>, Vec<usize>)> = RefCell::new((Aligned::zeroed(0), Aligned::zeroed(0), Vec::new()));
}

/// Attention of query head `h` of one sequence (its `query_len` rows, causal) over its
/// cached context. Returns `[query_len][head_dim]`.
pub fn attend(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    block_size: usize,
) -> Vec<f32> {
    attend_on(
        Kernel::fastest(),
        seq,
        h,
        q,
        k_pool,
        v_pool,
        shape,
        block_size,
    )
}

/// [`attend`] on `kernel`, or on the next narrower one where the kernel cannot take
/// this block size or head dimension (or this CPU lacks its features): the same bits.
#[allow(clippy::too_many_arguments)]
pub fn attend_on(
    kernel: Kernel,
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    block_size: usize,
) -> Vec<f32> {
    let lay = KvLayout::of(shape, block_size);
    check(seq, q, k_pool, v_pool, shape, lay);
    attend_with(kernel, seq, h, q, k_pool, v_pool, shape, lay)
}

/// Every block the context touches lies inside both pools and `q` holds the sequence's
/// rows (checked once, so the kernels read unchecked).
pub(crate) fn check(
    seq: &SeqInput,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    lay: KvLayout,
) {
    let blocks = seq.context_len.div_ceil(lay.block_size);
    assert!(
        seq.block_table.len() >= blocks,
        "attention: block table too short"
    );
    let pool = k_pool.len().min(v_pool.len());
    for &b in &seq.block_table[..blocks] {
        assert!(
            lay.pool_len(b as usize + 1) <= pool,
            "attention: block {b} beyond the pool ({pool} values)"
        );
    }
    let q_width = shape.n_heads * shape.head_dim;
    assert!(
        q.len() >= (seq.query_start + seq.query_len) * q_width,
        "attention: short query tensor"
    );
}

/// Which implementation computes attention (all give the same bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// [`attend_reference`]: one row at a time, portable.
    Reference,
    /// 8 lanes: AVX2 and FMA, block size and head dimension multiples of 8.
    Avx2,
    /// 16 lanes: AVX-512F too, block size and head dimension multiples of 16.
    Avx512,
}

impl Kernel {
    /// The widest this CPU runs (`simd::has_avx512` honours `WRING_CPU_AVX512=0`).
    pub fn fastest() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if super::simd::has_avx512() {
                return Kernel::Avx512;
            }
            if has_avx2() {
                return Kernel::Avx2;
            }
        }
        Kernel::Reference
    }

    /// Whether this CPU has the kernel's features.
    pub fn available(self) -> bool {
        match self {
            Kernel::Reference => true,
            Kernel::Avx2 => cfg!(target_arch = "x86_64") && Kernel::fastest() != Kernel::Reference,
            Kernel::Avx512 => Kernel::fastest() == Kernel::Avx512,
        }
    }
}

/// [`attend_on`] past its checks.
#[allow(clippy::too_many_arguments)]
fn attend_with(
    kernel: Kernel,
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    lay: KvLayout,
) -> Vec<f32> {
    let fits = |w: usize| lay.block_size.is_multiple_of(w) && shape.head_dim.is_multiple_of(w);
    #[cfg(target_arch = "x86_64")]
    {
        if kernel == Kernel::Avx512 && fits(16) && Kernel::Avx512.available() {
            // SAFETY: features detected; pool ranges checked by `attend`.
            return unsafe { attend_avx512(seq, h, q, k_pool, v_pool, shape, lay) };
        }
        if kernel != Kernel::Reference && fits(8) && Kernel::Avx2.available() {
            // SAFETY: as above.
            return unsafe { attend_avx2(seq, h, q, k_pool, v_pool, shape, lay) };
        }
    }
    let _ = (kernel, fits);
    attend_reference(seq, h, q, k_pool, v_pool, shape, lay.block_size)
}

/// The portable order of every value (module docs), one row at a time: the AVX2
/// kernel's bits.
pub fn attend_reference(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    block_size: usize,
) -> Vec<f32> {
    let lay = KvLayout::of(shape, block_size);
    let d = shape.head_dim;
    let kvh = h / (shape.n_heads / shape.n_kv_heads);
    let q_width = shape.n_heads * d;
    let scale = 1.0 / (d as f32).sqrt();
    let at = |pos: usize| (seq.block_table[pos / block_size] as usize, pos % block_size);
    let mut out = vec![0.0f32; seq.query_len * d];
    let mut p = vec![0.0f32; seq.context_len];
    for j in 0..seq.query_len {
        let t = seq.query_start + j;
        let qv = &q[t * q_width + h * d..t * q_width + (h + 1) * d];
        let len = seq.context_len - seq.query_len + j + 1;
        let mut max = f32::NEG_INFINITY;
        for (k, s) in p[..len].iter_mut().enumerate() {
            let (b, slot) = at(k);
            let base = lay.k_at(b, slot, kvh);
            let mut acc = 0.0f32;
            for (i, &x) in qv.iter().enumerate() {
                acc = x.mul_add(k_pool[base + i * block_size], acc);
            }
            *s = acc * scale;
            max = max.max(*s);
        }
        let mut lanes = [0.0f32; 8];
        for (k, s) in p[..len].iter_mut().enumerate() {
            *s = exp_scalar(*s - max);
            lanes[k % 8] += *s;
        }
        let inv = 1.0 / tree8(lanes);
        let o = &mut out[j * d..(j + 1) * d];
        for (k, &pk) in p[..len].iter().enumerate() {
            let (b, slot) = at(k);
            let vb = lay.v_at(b, slot, kvh);
            for (oi, &vi) in o.iter_mut().zip(&v_pool[vb..vb + d]) {
                *oi = pk.mul_add(vi, *oi);
            }
        }
        for oi in o.iter_mut() {
            *oi *= inv;
        }
    }
    out
}

/// The vector width a kernel runs at. Every value is computed by the same operations in
/// the same order at either width (lanes hold independent keys or dimensions; the
/// softmax denominator is always summed in eight lanes, key `k` into lane `k mod 8`), so
/// the width changes speed, never bits.
#[cfg(target_arch = "x86_64")]
trait Lanes {
    /// Keys per score vector and dimensions per output vector.
    const W: usize;
    /// Query rows per scores tile (at most 6).
    const SCORE_ROWS: usize;
    /// Key vectors per scores tile of `r` rows (index `r`, 1..=`SCORE_ROWS`).
    const SCORE_VECS: [usize; 7];
    /// Query rows per output tile (at most 6).
    const PV_ROWS: usize;

    /// Scores of rows `q` against key vectors `k` (`W` keys each, dimension `i` at
    /// `i · stride`), times `scale`, stored at `out[r] + W·v`.
    unsafe fn scores(
        q: &[*const f32],
        k: &[*const f32],
        d: usize,
        stride: usize,
        scale: f32,
        out: &[*mut f32],
    );

    /// `row` (a multiple of `W` long, padded with −∞) becomes `exp(s − max)`; returns
    /// `1 / Σ`, summed as [`attend_reference`] does.
    unsafe fn softmax(row: &mut [f32]) -> f32;

    /// [`Lanes::softmax`] of up to four rows (`rows[r]`: `nvec[r]` vectors), returning
    /// each row's `1 / Σ`; the same bits as one row at a time, the rows' dependency
    /// chains interleaved.
    unsafe fn softmax_rows(rows: &[*mut f32], nvec: &[usize]) -> [f32; 4] {
        let mut inv = [0.0; 4];
        for (i, (&row, &n)) in rows.iter().zip(nvec).enumerate() {
            inv[i] = Self::softmax(std::slice::from_raw_parts_mut(row, n * Self::W));
        }
        inv
    }

    /// `o[r][0..d] += Σ_k p[r][k] · V[k][0..d]` over keys `k0..k1`, one FMA per key in
    /// key order (`vrow[k]`: the offset of key `k`'s V row in `v`).
    unsafe fn pv(
        p: &[*const f32],
        o: &[*mut f32],
        v: *const f32,
        vrow: &[usize],
        k0: usize,
        k1: usize,
        d: usize,
    );

    /// `o = acc · inv`, `W` values at a time.
    unsafe fn scale_row(o: &mut [f32], acc: &[f32], inv: f32);
}

/// Calls `$run!(R, NV)` for a scores tile of `$r` rows (1..=6) and `$nv` key vectors
/// (up to [`Lanes::SCORE_VECS`] by row count).
#[cfg(target_arch = "x86_64")]
macro_rules! scores_dispatch {
    ($r:expr, $nv:expr, $run:ident) => {
        match ($r, $nv) {
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
            (3, 1) => $run!(3, 1),
            (3, 2) => $run!(3, 2),
            (3, 3) => $run!(3, 3),
            (3, 4) => $run!(3, 4),
            (4, 1) => $run!(4, 1),
            (4, 2) => $run!(4, 2),
            (4, 3) => $run!(4, 3),
            (4, 4) => $run!(4, 4),
            (5, 1) => $run!(5, 1),
            (5, 2) => $run!(5, 2),
            (5, 3) => $run!(5, 3),
            (5, 4) => $run!(5, 4),
            (6, 1) => $run!(6, 1),
            (6, 2) => $run!(6, 2),
            (6, 3) => $run!(6, 3),
            (6, 4) => $run!(6, 4),
            (r, nv) => unreachable!("no {r}x{nv} scores tile"),
        }
    };
}

/// Calls `$tile::<R, DV>` over `d` dimensions for `R = $p.len()` rows (1..=6): blocks of
/// four vectors, then a tail of one to three.
#[cfg(target_arch = "x86_64")]
macro_rules! pv_by_rows {
    ($tile:ident, $w:expr, $p:expr, $o:expr, $v:expr, $vrow:expr, $k0:expr, $k1:expr, $d:expr) => {{
        macro_rules! rows {
            ($R:literal) => {{
                let ps: [*const f32; $R] = std::array::from_fn(|i| $p[i]);
                let mut off = 0;
                while off + 4 * $w <= $d {
                    let os: [*mut f32; $R] = std::array::from_fn(|i| $o[i].add(off));
                    $tile::<$R, 4>(ps, os, $v.add(off), $vrow, $k0, $k1);
                    off += 4 * $w;
                }
                let os: [*mut f32; $R] = std::array::from_fn(|i| $o[i].add(off));
                match ($d - off) / $w {
                    0 => {}
                    1 => $tile::<$R, 1>(ps, os, $v.add(off), $vrow, $k0, $k1),
                    2 => $tile::<$R, 2>(ps, os, $v.add(off), $vrow, $k0, $k1),
                    _ => $tile::<$R, 3>(ps, os, $v.add(off), $vrow, $k0, $k1),
                }
            }};
        }
        match $p.len() {
            1 => rows!(1),
            2 => rows!(2),
            3 => rows!(3),
            4 => rows!(4),
            5 => rows!(5),
            _ => rows!(6),
        }
    }};
}

/// 8 lanes (AVX2 + FMA).
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    const W: usize = 8;
    // 8 to 12 accumulators (4 × 3: seven loads per twelve FMAs).
    const SCORE_ROWS: usize = 4;
    const SCORE_VECS: [usize; 7] = [0, 8, 4, 4, 3, 0, 0];
    const PV_ROWS: usize = 3;

    #[inline(always)]
    unsafe fn scores(
        q: &[*const f32],
        k: &[*const f32],
        d: usize,
        stride: usize,
        scale: f32,
        out: &[*mut f32],
    ) {
        macro_rules! run {
            ($R:literal, $NV:literal) => {{
                let qs: [*const f32; $R] = std::array::from_fn(|i| q[i]);
                let ks: [*const f32; $NV] = std::array::from_fn(|i| k[i]);
                let os: [*mut f32; $R] = std::array::from_fn(|i| out[i]);
                scores_tile8::<$R, $NV>(qs, ks, d, stride, scale, os);
            }};
        }
        scores_dispatch!(q.len(), k.len(), run);
    }

    #[inline(always)]
    unsafe fn softmax(row: &mut [f32]) -> f32 {
        softmax8(row)
    }

    #[inline(always)]
    unsafe fn pv(
        p: &[*const f32],
        o: &[*mut f32],
        v: *const f32,
        vrow: &[usize],
        k0: usize,
        k1: usize,
        d: usize,
    ) {
        pv_by_rows!(pv_tile8, 8, p, o, v, vrow, k0, k1, d);
    }

    #[inline(always)]
    unsafe fn scale_row(o: &mut [f32], acc: &[f32], inv: f32) {
        use std::arch::x86_64::*;
        let iv = _mm256_set1_ps(inv);
        for (oc, ac) in o.chunks_exact_mut(8).zip(acc.chunks_exact(8)) {
            _mm256_storeu_ps(
                oc.as_mut_ptr(),
                _mm256_mul_ps(_mm256_loadu_ps(ac.as_ptr()), iv),
            );
        }
    }
}

/// 16 lanes (AVX-512F): twice the keys per score vector and dimensions per output vector,
/// and 32 registers for the tiles.
#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512 {
    const W: usize = 16;
    // A 64-key chunk is four vectors: every row count takes all four (16 accumulators).
    const SCORE_ROWS: usize = 6;
    const SCORE_VECS: [usize; 7] = [0, 4, 4, 4, 4, 4, 4];
    const PV_ROWS: usize = 6;

    #[inline(always)]
    unsafe fn scores(
        q: &[*const f32],
        k: &[*const f32],
        d: usize,
        stride: usize,
        scale: f32,
        out: &[*mut f32],
    ) {
        macro_rules! run {
            ($R:literal, $NV:literal) => {{
                let qs: [*const f32; $R] = std::array::from_fn(|i| q[i]);
                let ks: [*const f32; $NV] = std::array::from_fn(|i| k[i]);
                let os: [*mut f32; $R] = std::array::from_fn(|i| out[i]);
                scores_tile16::<$R, $NV>(qs, ks, d, stride, scale, os);
            }};
        }
        scores_dispatch!(q.len(), k.len(), run);
    }

    #[inline(always)]
    unsafe fn softmax(row: &mut [f32]) -> f32 {
        softmax16(row)
    }

    #[inline(always)]
    unsafe fn softmax_rows(rows: &[*mut f32], nvec: &[usize]) -> [f32; 4] {
        let mut inv = [0.0; 4];
        macro_rules! run {
            ($R:literal) => {{
                let r: [f32; $R] = softmax16_rows::<$R>(
                    std::array::from_fn(|i| rows[i]),
                    std::array::from_fn(|i| nvec[i]),
                );
                inv[..$R].copy_from_slice(&r);
            }};
        }
        match rows.len() {
            1 => run!(1),
            2 => run!(2),
            3 => run!(3),
            _ => run!(4),
        }
        inv
    }

    #[inline(always)]
    unsafe fn pv(
        p: &[*const f32],
        o: &[*mut f32],
        v: *const f32,
        vrow: &[usize],
        k0: usize,
        k1: usize,
        d: usize,
    ) {
        pv_by_rows!(pv_tile16, 16, p, o, v, vrow, k0, k1, d);
    }

    #[inline(always)]
    unsafe fn scale_row(o: &mut [f32], acc: &[f32], inv: f32) {
        use std::arch::x86_64::*;
        let iv = _mm512_set1_ps(inv);
        for (oc, ac) in o.chunks_exact_mut(16).zip(acc.chunks_exact(16)) {
            _mm512_storeu_ps(
                oc.as_mut_ptr(),
                _mm512_mul_ps(_mm512_loadu_ps(ac.as_ptr()), iv),
            );
        }
    }
}

/// Scores of query rows `q[0..R]` against `NV` key vectors (8 keys each, `kt[v]`
/// pointing at dimension 0, dimension `i` at `i · stride`), times `scale`, stored at
/// `out[r] + 8·v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn scores_tile8<const R: usize, const NV: usize>(
    q: [*const f32; R],
    kt: [*const f32; NV],
    d: usize,
    stride: usize,
    scale: f32,
    out: [*mut f32; R],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); NV]; R];
    for i in 0..d {
        let mut kv = [_mm256_setzero_ps(); NV];
        for v in 0..NV {
            kv[v] = _mm256_loadu_ps(kt[v].add(i * stride));
        }
        for r in 0..R {
            let qb = _mm256_set1_ps(*q[r].add(i));
            for v in 0..NV {
                acc[r][v] = _mm256_fmadd_ps(qb, kv[v], acc[r][v]);
            }
        }
    }
    let sv = _mm256_set1_ps(scale);
    for r in 0..R {
        for v in 0..NV {
            _mm256_storeu_ps(out[r].add(8 * v), _mm256_mul_ps(acc[r][v], sv));
        }
    }
}

/// [`scores_tile8`] with 16 keys a vector.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn scores_tile16<const R: usize, const NV: usize>(
    q: [*const f32; R],
    kt: [*const f32; NV],
    d: usize,
    stride: usize,
    scale: f32,
    out: [*mut f32; R],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NV]; R];
    for i in 0..d {
        let mut kv = [_mm512_setzero_ps(); NV];
        for v in 0..NV {
            kv[v] = _mm512_loadu_ps(kt[v].add(i * stride));
        }
        for r in 0..R {
            let qb = _mm512_set1_ps(*q[r].add(i));
            for v in 0..NV {
                acc[r][v] = _mm512_fmadd_ps(qb, kv[v], acc[r][v]);
            }
        }
    }
    let sv = _mm512_set1_ps(scale);
    for r in 0..R {
        for v in 0..NV {
            _mm512_storeu_ps(out[r].add(16 * v), _mm512_mul_ps(acc[r][v], sv));
        }
    }
}

/// `o[r][0..8·DV] += Σ_k p[r][k] · V[k][0..8·DV]` over keys `k0..k1` (`vrow[k]`: the
/// offset of key `k`'s V row in `v`), one FMA per key in key order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn pv_tile8<const R: usize, const DV: usize>(
    p: [*const f32; R],
    o: [*mut f32; R],
    v: *const f32,
    vrow: &[usize],
    k0: usize,
    k1: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); DV]; R];
    for r in 0..R {
        for j in 0..DV {
            acc[r][j] = _mm256_loadu_ps(o[r].add(8 * j));
        }
    }
    for k in k0..k1 {
        let vp = v.add(*vrow.get_unchecked(k));
        let mut pb = [_mm256_setzero_ps(); R];
        for r in 0..R {
            pb[r] = _mm256_set1_ps(*p[r].add(k));
        }
        for j in 0..DV {
            let vv = _mm256_loadu_ps(vp.add(8 * j));
            for r in 0..R {
                acc[r][j] = _mm256_fmadd_ps(pb[r], vv, acc[r][j]);
            }
        }
    }
    for r in 0..R {
        for j in 0..DV {
            _mm256_storeu_ps(o[r].add(8 * j), acc[r][j]);
        }
    }
}

/// [`pv_tile8`] with 16 dimensions a vector.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn pv_tile16<const R: usize, const DV: usize>(
    p: [*const f32; R],
    o: [*mut f32; R],
    v: *const f32,
    vrow: &[usize],
    k0: usize,
    k1: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); DV]; R];
    for r in 0..R {
        for j in 0..DV {
            acc[r][j] = _mm512_loadu_ps(o[r].add(16 * j));
        }
    }
    for k in k0..k1 {
        let vp = v.add(*vrow.get_unchecked(k));
        let mut pb = [_mm512_setzero_ps(); R];
        for r in 0..R {
            pb[r] = _mm512_set1_ps(*p[r].add(k));
        }
        for j in 0..DV {
            let vv = _mm512_loadu_ps(vp.add(16 * j));
            for r in 0..R {
                acc[r][j] = _mm512_fmadd_ps(pb[r], vv, acc[r][j]);
            }
        }
    }
    for r in 0..R {
        for j in 0..DV {
            _mm512_storeu_ps(o[r].add(16 * j), acc[r][j]);
        }
    }
}

/// [`exp_scalar`] on 8 lanes, the same operations per lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn exp8(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    let e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    );
    let v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    let tiny = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ);
    _mm256_andnot_ps(tiny, v)
}

/// [`exp_scalar`] on 16 lanes, the same operations per lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn exp16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let y = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let v = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    let tiny = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_MIN));
    _mm512_maskz_mov_ps(!tiny, v)
}

/// Softmax of one padded row at 8 lanes: max, `exp(s − max)` in place, lane sums in key
/// order, the fixed tree; returns `1 / Σ`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn softmax8(row: &mut [f32]) -> f32 {
    use std::arch::x86_64::*;
    let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
    for c in row.chunks_exact(8) {
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(c.as_ptr()));
    }
    let mut m = [0.0f32; 8];
    _mm256_storeu_ps(m.as_mut_ptr(), mv);
    let maxv = _mm256_set1_ps(m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)));
    let mut lanes = _mm256_setzero_ps();
    for c in row.chunks_exact_mut(8) {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), maxv));
        _mm256_storeu_ps(c.as_mut_ptr(), e);
        lanes = _mm256_add_ps(lanes, e);
    }
    1.0 / hsum(lanes)
}

/// [`softmax8`] with the exponentials 16 at a time; the sum still runs in eight lanes
/// (each vector's low half, then its high half), so the bits are `softmax8`'s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) unsafe fn softmax16(row: &mut [f32]) -> f32 {
    softmax16_rows::<1>([row.as_mut_ptr()], [row.len() / 16])[0]
}

/// [`softmax16`] of `R` rows at once (row `r`: `nvec[r]` vectors at `rows[r]`): the max
/// in four independent chains (a max is exact in any order), then each vector's
/// exponentials and lane sums with the rows interleaved, so `R` sum chains run side by
/// side; every row's bits are `softmax16`'s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn softmax16_rows<const R: usize>(rows: [*mut f32; R], nvec: [usize; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let mut maxv = [_mm512_setzero_ps(); R];
    for r in 0..R {
        let at = |c: usize| _mm512_loadu_ps(rows[r].add(16 * c));
        let (mut m0, mut m1, mut m2, mut m3) = (at(0), at(0), at(0), at(0));
        let mut c = 0;
        while c + 4 <= nvec[r] {
            m0 = _mm512_max_ps(m0, at(c));
            m1 = _mm512_max_ps(m1, at(c + 1));
            m2 = _mm512_max_ps(m2, at(c + 2));
            m3 = _mm512_max_ps(m3, at(c + 3));
            c += 4;
        }
        for c in c..nvec[r] {
            m0 = _mm512_max_ps(m0, at(c));
        }
        let m = _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3));
        maxv[r] = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    }
    let mut lanes = [_mm256_setzero_ps(); R];
    let step = |r: usize, c: usize, lanes: &mut [__m256; R]| {
        let at = rows[r].add(16 * c);
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(at), maxv[r]));
        _mm512_storeu_ps(at, e);
        lanes[r] = _mm256_add_ps(lanes[r], _mm512_castps512_ps256(e));
        lanes[r] = _mm256_add_ps(
            lanes[r],
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))),
        );
    };
    let common = nvec.iter().copied().min().unwrap_or(0);
    for c in 0..common {
        for r in 0..R {
            step(r, c, &mut lanes);
        }
    }
    for r in 0..R {
        for c in common..nvec[r] {
            step(r, c, &mut lanes);
        }
    }
    std::array::from_fn(|r| 1.0 / hsum(lanes[r]))
}

/// [`attend_reference`] with SIMD tiles and cache blocking; the same bits.
///
/// # Safety
/// AVX2 and FMA available; `lay.block_size` and `head_dim` multiples of 8; every block
/// of the context inside both pools; `q` holds the sequence's rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    lay: KvLayout,
) -> Vec<f32> {
    attend_simd::<Avx2>(seq, h, q, k_pool, v_pool, shape, lay)
}

/// [`attend_avx2`] at 16 lanes; the same bits.
///
/// # Safety
/// AVX-512F, AVX2 and FMA available; `lay.block_size` and `head_dim` multiples of 16;
/// every block of the context inside both pools; `q` holds the sequence's rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn attend_avx512(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    lay: KvLayout,
) -> Vec<f32> {
    attend_simd::<Avx512>(seq, h, q, k_pool, v_pool, shape, lay)
}

/// The cache-blocked loops of the SIMD kernels, at `L::W` lanes (inlined into each
/// width's entry point, which enables its features).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn attend_simd<L: Lanes>(
    seq: &SeqInput,
    h: usize,
    q: &[f32],
    k_pool: &[f32],
    v_pool: &[f32],
    shape: AttnShape,
    lay: KvLayout,
) -> Vec<f32> {
    let w = L::W;
    let d = shape.head_dim;
    let bs = lay.block_size;
    let kvh = h / (shape.n_heads / shape.n_kv_heads);
    let q_width = shape.n_heads * d;
    let scale = 1.0 / (d as f32).sqrt();
    let rows = seq.query_len;
    let ctx = seq.context_len;
    let first_len = ctx - rows + 1; // row j sees keys 0..first_len + j
    let len = |j: usize| first_len + j;
    let nvec = ctx.div_ceil(w);
    let stride = nvec * w;
    let mut out = vec![0.0f32; rows * d];
    SCRATCH.with(|s| {
        let (sbuf, obuf, vrow) = &mut *s.borrow_mut();
        // Not cleared: every score a row reads is written first (below).
        sbuf.ensure_len(rows * stride);
        obuf.ensure_len(rows * d);
        obuf[..rows * d].fill(0.0);
        vrow.clear();
        let slot_step = lay.n_kv_heads * d;
        for (i, &b) in seq.block_table[..ctx.div_ceil(bs)].iter().enumerate() {
            let base = lay.v_at(b as usize, 0, kvh);
            vrow.extend((0..bs.min(ctx - i * bs)).map(|slot| base + slot * slot_step));
        }
        let kp = k_pool.as_ptr();
        let kvec = |v: usize| {
            let pos = w * v;
            kp.add(lay.k_at(seq.block_table[pos / bs] as usize, pos % bs, kvh))
        };
        let qrow = |j: usize| q.as_ptr().add((seq.query_start + j) * q_width + h * d);
        let sp = sbuf.as_mut_ptr();

        // Scores, chunk by chunk of keys; each row tile stops at its last row's length.
        for c0 in (0..nvec).step_by(KEY_CHUNK / w) {
            let c1 = (c0 + KEY_CHUNK / w).min(nvec);
            // The chunk's key vectors, located once for all its row tiles.
            let chunk_k: [*const f32; KEY_CHUNK / 8] = std::array::from_fn(|i| {
                if c0 + i < c1 {
                    kvec(c0 + i)
                } else {
                    std::ptr::null()
                }
            });
            for r0 in (0..rows).step_by(L::SCORE_ROWS) {
                let rt = (rows - r0).min(L::SCORE_ROWS);
                let vend = c1.min(len(r0 + rt - 1).div_ceil(w));
                let qs: [*const f32; 6] = std::array::from_fn(|i| qrow((r0 + i).min(rows - 1)));
                let mut v = c0;
                while v < vend {
                    let nv = (vend - v).min(L::SCORE_VECS[rt]);
                    let os: [*mut f32; 6] =
                        std::array::from_fn(|i| sp.add((r0 + i).min(rows - 1) * stride + w * v));
                    let ks = &chunk_k[v - c0..v - c0 + nv];
                    L::scores(&qs[..rt], ks, d, bs, scale, &os[..rt]);
                    v += nv;
                }
            }
        }

        // Softmax per row over its own keys.
        let mut inv = vec![0.0f32; rows];
        for j in 0..rows {
            let n = len(j);
            sbuf[j * stride + n..j * stride + n.div_ceil(w) * w].fill(f32::NEG_INFINITY);
        }
        let sp = sbuf.as_mut_ptr();
        for j0 in (0..rows).step_by(4) {
            let group = j0..rows.min(j0 + 4);
            let ptrs: [*mut f32; 4] = std::array::from_fn(|i| sp.add((j0 + i) * stride));
            let nvec: [usize; 4] = std::array::from_fn(|i| len(j0 + i).div_ceil(w));
            let r = L::softmax_rows(&ptrs[..group.len()], &nvec[..group.len()]);
            inv[group.clone()].copy_from_slice(&r[..group.len()]);
        }

        // Output: chunks of keys, rows in groups of `PV_ROWS` over their common keys, then
        // each row's own remainder, so every row sums exactly its keys in key order.
        let (op, vp) = (obuf.as_mut_ptr(), v_pool.as_ptr());
        let sp = sbuf.as_ptr();
        for k0 in (0..ctx).step_by(KEY_CHUNK) {
            let k1 = (k0 + KEY_CHUNK).min(ctx);
            // Row groups (lengths grow by one per row): segment `s` of the keys is the one
            // rows `r0+s..` still need after row `r0+s-1` has ended.
            for r0 in (0..rows).step_by(L::PV_ROWS) {
                let n = (rows - r0).min(L::PV_ROWS);
                for s in 0..n {
                    let from = if s == 0 {
                        k0
                    } else {
                        len(r0 + s - 1).clamp(k0, k1)
                    };
                    let to = len(r0 + s).min(k1);
                    if to <= from {
                        continue;
                    }
                    let rs = r0 + s..r0 + n;
                    let ps: [*const f32; 6] =
                        std::array::from_fn(|i| sp.add((r0 + s + i).min(rows - 1) * stride));
                    let os: [*mut f32; 6] =
                        std::array::from_fn(|i| op.add((r0 + s + i).min(rows - 1) * d));
                    L::pv(&ps[..rs.len()], &os[..rs.len()], vp, vrow, from, to, d);
                }
            }
        }
        for (j, o) in out.chunks_exact_mut(d).enumerate() {
            L::scale_row(o, &obuf[j * d..(j + 1) * d], inv[j]);
        }
    });
    out
}

/// Inputs and an f64 reference for the attention tests of this module and its siblings.
#[cfg(test)]
pub(crate) mod testing {
    use super::KvLayout;
    use crate::AttnShape;

    /// The tests' head layout (6 query heads over 2 KV heads of `d` dimensions, blocks of
    /// `bs` slots) and the pool size in blocks.
    pub fn test_shape(d: usize, bs: usize) -> (AttnShape, KvLayout, usize) {
        let shape = AttnShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: d,
        };
        (shape, KvLayout::of(shape, bs), 60)
    }

    /// A block table for `context_len` positions that visits the pool's blocks out of order.
    pub fn shuffled_table(context_len: usize, bs: usize, blocks: usize) -> Vec<u32> {
        (0..context_len.div_ceil(bs) as u32)
            .map(|b| (b * 7) % blocks as u32)
            .collect()
    }

    /// `n` values in [−0.5, 0.5), a fixed sequence per `seed`.
    pub fn data(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104729) % 997) as f32 / 997.0 - 0.5)
            .collect()
    }

    /// One query row's attention output in f64 over keys `0..len` of KV head `kvh`.
    pub fn row_f64(
        qv: &[f32],
        k: &[f32],
        v: &[f32],
        lay: KvLayout,
        table: &[u32],
        kvh: usize,
        len: usize,
    ) -> Vec<f64> {
        let (d, bs) = (lay.head_dim, lay.block_size);
        let at = |p: usize| (table[p / bs] as usize, p % bs);
        let sc: Vec<f64> = (0..len)
            .map(|p| {
                let base = lay.k_at(at(p).0, at(p).1, kvh);
                (0..d)
                    .map(|i| qv[i] as f64 * k[base + i * bs] as f64)
                    .sum::<f64>()
                    / (d as f64).sqrt()
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..d)
            .map(|i| {
                (0..len)
                    .map(|p| e[p] / z * v[lay.v_at(at(p).0, at(p).1, kvh) + i] as f64)
                    .sum()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{data, row_f64, shuffled_table, test_shape};
    use super::*;

    #[test]
    fn exp_is_close_to_libm_and_zero_far_below() {
        let mut worst = 0.0f64;
        for i in 0..200_000 {
            let x = -(i as f32) * 87.0 / 200_000.0;
            let (got, want) = (exp_scalar(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 4e-7, "relative error {worst:e}");
        assert_eq!(exp_scalar(0.0), 1.0);
        assert_eq!(exp_scalar(-100.0), 0.0);
        assert_eq!(exp_scalar(f32::NEG_INFINITY), 0.0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp8_matches_exp_scalar_bitwise() {
        if !has_avx2() {
            return;
        }
        use std::arch::x86_64::*;
        for i in 0..100_000 {
            let base = -(i as f32) * 0.000_9;
            let x: [f32; 8] = std::array::from_fn(|l| base - l as f32 * 1.3e-5);
            let mut got = [0.0f32; 8];
            // SAFETY: features detected above.
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), exp8(_mm256_loadu_ps(x.as_ptr()))) };
            for l in 0..8 {
                assert_eq!(got[l].to_bits(), exp_scalar(x[l]).to_bits(), "x {}", x[l]);
            }
        }
    }

    /// A head's rows from the SIMD kernel equal the portable order bit for bit, for
    /// decode, verify and prefill shapes over a shuffled block table; a row's bits do
    /// not depend on the rows computed with it (a prefill's last row = the decode of
    /// that position); and it is attention (close to an f64 softmax).
    #[test]
    fn attention_kernel_matches_the_portable_order_and_is_row_independent() {
        for (d, bs) in [
            (64, 16),
            (128, 16),
            (64, 8),
            (40, 24),
            (64, 5),
            (80, 32),
            (48, 16),
        ] {
            let (shape, lay, blocks) = test_shape(d, bs);
            let (k, v) = (data(lay.pool_len(blocks), 5), data(lay.pool_len(blocks), 6));
            for (query_len, context_len) in [
                (1usize, 1usize),
                (1, 150),
                (5, 77),
                (13, 190),
                (70, 70),
                (37, 300),
            ] {
                let table = shuffled_table(context_len, bs, blocks);
                let seq = SeqInput {
                    query_start: 2,
                    query_len,
                    context_len,
                    block_table: table.clone(),
                    prompt_len: 0,
                };
                let q = data((2 + query_len) * shape.n_heads * d, query_len);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                for h in 0..shape.n_heads {
                    let want = attend_reference(&seq, h, &q, &k, &v, shape, bs);
                    // Every width this CPU has (a width that cannot take the shape falls
                    // back to the next narrower one).
                    for kernel in [Kernel::Avx512, Kernel::Avx2] {
                        if !kernel.available() {
                            continue;
                        }
                        let got = attend_with(kernel, &seq, h, &q, &k, &v, shape, lay);
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{kernel:?} d {d} bs {bs} q {query_len} ctx {context_len} head {h}"
                        );
                    }
                    let got = attend(&seq, h, &q, &k, &v, shape, bs);
                    assert_eq!(bits(&got), bits(&want));
                    // The last row alone (a decode step at that position).
                    let last = SeqInput {
                        query_start: 1 + query_len,
                        query_len: 1,
                        context_len,
                        block_table: table.clone(),
                        prompt_len: 0,
                    };
                    let one = attend(&last, h, &q, &k, &v, shape, bs);
                    assert_eq!(
                        bits(&one),
                        bits(&got[(query_len - 1) * d..]),
                        "last row, d {d} bs {bs}"
                    );
                    // Against an f64 softmax for the last row.
                    let qv = &q[(1 + query_len) * shape.n_heads * d + h * d..][..d];
                    let want = row_f64(qv, &k, &v, lay, &table, h / 3, context_len);
                    for (o, &got) in want.iter().zip(&one) {
                        assert!((o - got as f64).abs() < 1e-5, "{o} vs {got}");
                    }
                }
            }
        }
    }
}
