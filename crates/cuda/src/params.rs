//! What the backend hands its own kernels: the `#[repr(C)]` mirrors of the parameter structs
//! the kernels take, the shapes each kernel family is built for, and the workspace the
//! attention kernel keeps between launches. A leaf: the backend's files and the kernel
//! loader read it, it reads nothing of theirs.

use crate::device::DeviceBuffer;

/// The parameter struct every attention kernel takes (kernels/attention/args.cuh).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AttnArgs {
    pub q: u64,
    pub out: u64,
    pub k_pool: u64,
    pub v_pool: u64,
    pub positions: u64,
    pub token_seq: u64,
    pub seq_q_start: u64,
    pub seq_bt_off: u64,
    pub block_tables: u64,
    pub parts: u64,
    pub counters: u64,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub block_size: i32,
    pub part_tokens: i32,
    pub grid_splits: i32,
    pub scale: f32,
    pub scale_log2: f32,
    pub prefill_min_q: i32,
    pub split_keys_per_q: i32,
    pub prefill_split_keys: i32,
}

/// Sequences of at least this many query tokens (prefill chunks) run on attention_flash
/// (flash.cu); shorter ones (decode, verify) on attention_mma, which splits their keys.
pub(crate) const PREFILL_MIN_Q: usize = 17;

/// Head dims `attention_flash_d{D}` is built for (kernels/attention/flash.cu).
pub(crate) const FLASH_HEAD_DIMS: [usize; 2] = [64, 128];

/// Dynamic shared memory of `attention_flash_d{D}`: FL_STAGES(D) stages of 64 keys' K and V
/// rows (3 for head_dim 64, 2 for 128: 48 and 64 KB).
pub(crate) fn flash_smem(head_dim: usize) -> usize {
    let stages = if head_dim == 128 { 2 } else { 3 };
    stages * 2 * 64 * head_dim * 2
}

/// Dynamic shared memory of `attention_mma_staged_d{D}_n{NT}`: 4 warps × MMA_STAGES(D)
/// tiles × MMA_TILE_BYTES(D) (kernels/attention/mma.cu), 64 KB for both head dims.
pub(crate) fn mma_staged_smem(head_dim: usize) -> usize {
    let stages = if head_dim == 128 { 2 } else { 4 };
    4 * stages * 64 * head_dim
}

/// Row tiles (8 rows each) per block that `attention_mma_d{D}_n{NT}` is built for.
pub(crate) const MMA_ROW_TILES: [(usize, &[usize]); 2] =
    [(64, &[1, 2, 3, 4, 6]), (128, &[1, 2, 3])];

/// The parameter struct of kernels/gemv.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GemvArgs {
    pub w: u64,
    pub scale: u64,
    pub zero: u64,
    pub bscale: u64,
    pub smooth: u64,
    pub x: u64,
    pub part: u64,
    pub counters: u64,
    pub y: u64,
    pub h: u64,
    pub q: u64,
    pub k_out: u64,
    pub v_out: u64,
    pub k_pool: u64,
    pub v_pool: u64,
    pub positions: u64,
    pub token_seq: u64,
    pub seq_bt_off: u64,
    pub block_tables: u64,
    pub inv_freq: u64,
    /// Norm prologue: the f32 residual rows the kernel normalises (then `x` is unused).
    pub xf: u64,
    /// Norm prologue: the f32 norm weights; 0 = no prologue, `x` is the bf16 input.
    pub norm_w: u64,
    pub t: i32,
    pub k: i32,
    pub rows: i32,
    pub splits: i32,
    pub chunks_per_split: i32,
    pub group: i32,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub interleaved: i32,
    pub block_size: i32,
    pub eps: f32,
    /// Store epilogue: 1 = `y += sum` (the residual add), 0 = `y = sum`.
    pub accumulate: i32,
}

/// Token buckets the gemv kernels are built for (`_t1` .. `_t8`): a step of T tokens runs
/// the smallest that holds it.
pub(crate) const GEMV_BUCKETS: [usize; 4] = [1, 2, 4, 8];

/// Token buckets of the multi-tile int4 / nvfp4 builds (kernels/gemv_multi.cu, `_t16` ..
/// `_t64`): steps of 9 to 64 tokens, padded up to the bucket's n-tiles of 8.
pub(crate) const GEMV_MULTI_BUCKETS: [usize; 3] = [16, 32, 64];

/// Most tokens a 4-bit step may carry to take the gemv kernels (the largest multi bucket).
pub const GEMV_4BIT_LIMIT: usize = GEMV_MULTI_BUCKETS[GEMV_MULTI_BUCKETS.len() - 1];

/// What follows the weight-streaming GEMV inside its launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GemvEpilogue {
    /// f32 rows out.
    Store = 0,
    /// silu(gate) * up of the stacked gate|up rows, bf16 out.
    Silu = 1,
    /// RoPE, q as f32 rows, k and v into the KV pool (or f32 rows).
    Qkv = 2,
}

impl GemvEpilogue {
    pub const ALL: [GemvEpilogue; 3] = [Self::Store, Self::Silu, Self::Qkv];

    pub fn name(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Silu => "silu",
            Self::Qkv => "qkv",
        }
    }
}

/// The weight format a gemv kernel streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GemvFormat {
    Bf16 = 0,
    Fp8 = 1,
    Int4 = 2,
    Nvfp4 = 3,
}

impl GemvFormat {
    pub const ALL: [GemvFormat; 4] = [Self::Bf16, Self::Fp8, Self::Int4, Self::Nvfp4];

    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Fp8 => "fp8",
            Self::Int4 => "int4",
            Self::Nvfp4 => "nvfp4",
        }
    }

    /// Columns one lane's 16-byte load holds; a chunk (4 lanes of a row) is 4× that.
    pub fn lane_cols(self) -> usize {
        match self {
            Self::Bf16 => 8,
            Self::Fp8 => 16,
            Self::Int4 | Self::Nvfp4 => 32,
        }
    }
}

/// Columns of K one gemv block stages in shared memory (GV_KR_MAX in kernels/gemv.cu).
pub(crate) const GEMV_KR_MAX: usize = 1024;

/// (splits, chunks per split) of a gemv launch over `groups` row groups (blocks of 4 tiles
/// of 16 rows) and `k` columns in chunks of `chunk_cols`: enough blocks to cover every SM
/// about 4 times, at least 2 chunks per warp (so the split reduction stays small against
/// the stream), and a block's K range within the staged maximum. A function of the matrix
/// shape and the GPU only, never of the tokens: a row's bits do not depend on the batch.
pub(crate) fn gemv_splits(
    groups: usize,
    k: usize,
    chunk_cols: usize,
    sm_count: usize,
) -> (usize, usize) {
    let chunks = k.div_ceil(chunk_cols).max(1);
    let min_for_smem = chunks.div_ceil(GEMV_KR_MAX / chunk_cols);
    let want = (4 * sm_count).div_ceil(groups.max(1));
    let splits = want.min((chunks / 2).max(1)).max(min_for_smem).max(1);
    let per = chunks.div_ceil(splits);
    (chunks.div_ceil(per), per)
}

/// Partials and counters of `attention_mma`, sized for one model shape.
pub(crate) struct MmaWorkspace {
    pub parts: DeviceBuffer,
    pub counters: DeviceBuffer,
    /// Tokens of a step the partials cover (rows of later tokens run unsplit).
    pub tokens: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// Dynamic shared memory of the persistent kernel for token bucket `tb`: kernels/gemv.cu's
/// `GvSmem<GV_BF16, TB>::BYTES` (staged x, then the weight rings of 4 warps).
pub(crate) fn persistent_smem_bytes(tb: usize) -> usize {
    const XS_MAX: usize = 1024 + 64 + 8;
    let stages = if tb >= 8 { 6 } else { 8 };
    tb * XS_MAX * 2 + stages * 4 * 2 * 32 * 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_args_match_the_kernels_struct() {
        // 11 pointers, 6 ints, 2 floats, 3 ints (kernels/attention/args.cuh), padded to 8.
        assert_eq!(
            std::mem::size_of::<AttnArgs>(),
            11 * 8 + 6 * 4 + 2 * 4 + 3 * 4 + 4
        );
        assert_eq!(std::mem::offset_of!(AttnArgs, n_heads), 88);
        assert_eq!(std::mem::offset_of!(AttnArgs, scale_log2), 116);
        assert_eq!(std::mem::offset_of!(AttnArgs, prefill_min_q), 120);
        assert_eq!(std::mem::offset_of!(AttnArgs, prefill_split_keys), 128);
    }

    #[test]
    fn gemv_args_match_the_kernels_struct() {
        // 22 pointers, 11 ints, a float and an int (kernels/gemv.cu GemvArgs), padded to 8.
        assert_eq!(std::mem::size_of::<GemvArgs>(), 22 * 8 + 13 * 4 + 4);
        assert_eq!(std::mem::offset_of!(GemvArgs, t), 176);
        assert_eq!(std::mem::offset_of!(GemvArgs, block_size), 216);
        assert_eq!(std::mem::offset_of!(GemvArgs, accumulate), 224);
    }

    #[test]
    fn gemv_splits_cover_k_and_fill_the_gpu() {
        // (groups, k, chunk columns) of SmolLM2-135M and Llama-3.1-8B at bf16 and int4.
        let cases = [
            (15, 576, 32, (9, 2)),     // 135M q|k|v: 15 heads
            (9, 576, 32, (9, 2)),      // 135M o
            (48, 576, 32, (9, 2)),     // 135M gate|up
            (9, 1536, 32, (24, 2)),    // 135M down
            (768, 576, 32, (1, 18)),   // 135M lm head
            (96, 4096, 32, (6, 22)),   // 8B q|k|v
            (448, 4096, 32, (4, 32)),  // 8B gate|up
            (64, 14336, 32, (14, 32)), // 8B down
            (2004, 4096, 32, (4, 32)), // 8B lm head: the staged range caps a block's K
            (9, 576, 128, (2, 3)),     // 135M o, int4: 4.5 chunks
        ];
        for (groups, k, cw, want) in cases {
            let (s, per) = gemv_splits(groups, k, cw, 132);
            assert_eq!((s, per), want, "groups {groups} k {k} cw {cw}");
            let chunks = k.div_ceil(cw);
            assert!(
                s * per >= chunks && (s - 1) * per < chunks,
                "every split non-empty"
            );
            assert!(per * cw <= GEMV_KR_MAX);
        }
    }
}
