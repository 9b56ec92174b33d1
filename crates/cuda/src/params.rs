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
    pub seq_cap: i32,
    pub grid_splits: i32,
    pub scale: f32,
    pub scale_log2: f32,
}

/// Row tiles (8 rows each) per block that `attention_mma_d{D}_n{NT}` is built for.
pub(crate) const MMA_ROW_TILES: [(usize, &[usize]); 2] =
    [(64, &[1, 2, 3, 4, 6]), (128, &[1, 2, 3])];

/// The parameter struct of kernels/linear_small.cu, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SmallLinArgs {
    pub w: u64,
    pub x: u64,
    pub y: u64,
    pub h: u64,
    pub q: u64,
    pub k_pool: u64,
    pub v_pool: u64,
    pub positions: u64,
    pub token_seq: u64,
    pub seq_bt_off: u64,
    pub block_tables: u64,
    pub inv_freq: u64,
    pub t: i32,
    pub k: i32,
    pub rows: i32,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub interleaved: i32,
    pub block_size: i32,
}

/// What follows the small-step GEMM inside its launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmallEpilogue {
    /// f32 rows out.
    Store,
    /// silu(gate) * up of the stacked gate|up rows, bf16 out.
    Silu,
    /// RoPE, q as f32 rows, k and v into the KV pool.
    Qkv,
}

/// Partials and counters of `attention_mma`, sized for one model shape.
pub(crate) struct MmaWorkspace {
    pub parts: DeviceBuffer,
    pub counters: DeviceBuffer,
    pub n_heads: usize,
    pub head_dim: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_args_match_the_kernels_struct() {
        // 11 pointers, 6 ints, 2 floats (kernels/attention/args.cuh).
        assert_eq!(std::mem::size_of::<AttnArgs>(), 11 * 8 + 6 * 4 + 2 * 4);
        assert_eq!(std::mem::offset_of!(AttnArgs, n_heads), 88);
        assert_eq!(std::mem::offset_of!(AttnArgs, scale_log2), 116);
    }

    #[test]
    fn small_linear_args_match_the_kernels_struct() {
        // 12 pointers, 8 ints (kernels/linear_small.cu SmallLinArgs).
        assert_eq!(std::mem::size_of::<SmallLinArgs>(), 12 * 8 + 8 * 4);
        assert_eq!(std::mem::offset_of!(SmallLinArgs, t), 96);
        assert_eq!(std::mem::offset_of!(SmallLinArgs, block_size), 124);
    }
}
