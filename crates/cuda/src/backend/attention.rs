//! Paged attention: the K/V store and the choice of attention kernel.
//!
//! `attention_mma` (kernels/attention/mma.cu, the default) runs decode and verify steps on
//! the tensor cores: one block per (sequence, KV head, row chunk, key split) loads each K/V
//! tile once for all of the sequence's query tokens and grouped heads (with head_dim 64 each
//! warp loads its next tile while computing this one: `PREFETCH_HEAD_DIMS`;
//! `WRING_CUDA_ATTENTION=mma-staged`: each warp copies its tiles with cp.async into its own
//! ring in shared memory, faster but not the default yet, see `AttentionKernel`). Keys split at
//! fixed points of the sequence's own context (`MmaSplits`: keys per query token for
//! decode/verify, and optionally for prefill chunks). Sequences of more than 16 query tokens
//! (prefill chunks) go to `attention_flash` (flash.cu, FlashAttention-2's decomposition: a
//! warp owns 16 query rows and walks its keys in 64-key stages staged in shared memory for
//! the whole block; head_dim 64 and 128, `FLASH_HEAD_DIMS`), and both run in one step when it
//! mixes the two (`mma-only`: everything on `attention_mma`). The per-head kernels of
//! kernels/attention/paged.cu serve head_dim 256 and block sizes that are not multiples of
//! 16, and stay as the reference (`WRING_CUDA_ATTENTION=reference`) and an older default
//! (`split`) for side-by-side measurements.

use super::tensor::{CudaTensor, DType};
use super::CudaBackend;
use crate::device::{Arg, DeviceBuffer};
use crate::kernels::MmaBuild;
use crate::options::{AttentionKernel, SplitGrid};
use crate::params::{AttnArgs, MmaWorkspace, FLASH_HEAD_DIMS, MMA_ROW_TILES, PREFILL_MIN_Q};
use anyhow::anyhow;
use wring_backend::AttnShape;

/// kernels/attention/mma.cu's limits.
const MMA_MAX_SPLITS: usize = 8;
/// Sequences of up to this many query tokens may split their keys (one less than
/// [`PREFILL_MIN_Q`], where kernels/attention/flash.cu takes over).
const MMA_SPLIT_MAX_Q: usize = PREFILL_MIN_Q - 1;
/// kernels/attention/flash.cu: warps a block, and query rows a block (16 a warp).
const FLASH_WARPS: usize = 4;
const FLASH_ROWS: usize = 16 * FLASH_WARPS;
/// Head dims whose `attention_mma` prefetches each warp's next K/V tile: faster for the 135M
/// shape (64: verify 32 x 5 1.243 vs 1.390 ms, decode 32 x 1 1.141 vs 1.184) and slower for
/// the 8B one (128: decode 8 x 1 5.64 vs 5.31 ms, 32 x 1 6.91 vs 6.60; twice the tile's
/// registers). results/2026-12-01-prefill-attention.
const PREFETCH_HEAD_DIMS: [usize; 1] = [64];
/// Tokens of a step whose rows may split their keys when prefill chunks run on
/// attention_flash (decode and verify rows only: 256 sequences of up to 16 tokens); rows of later
/// tokens of a larger eager step run unsplit. Where `attention_mma` takes prefill chunks
/// the partials cover `max_tokens`, every token a step can have.
const MMA_SPLIT_TOKENS: usize = 256 * MMA_SPLIT_MAX_Q;
/// The split-KV reference variant's split count (the previous default).
const SPLIT_KERNEL_SPLITS: usize = 4;

/// (row tiles per block, row chunks) for `rows` rows per (sequence, KV head), with at
/// most `max_nt` row tiles a block.
fn mma_tiles(head_dim: usize, rows: usize, max_nt: usize) -> Option<(usize, usize)> {
    let (_, built) = MMA_ROW_TILES.iter().find(|(d, _)| *d == head_dim)?;
    let allowed = || built.iter().copied().filter(|&nt| nt <= max_nt.max(1));
    let tiles = rows.div_ceil(8).max(1);
    let largest = allowed().next_back()?;
    match allowed().find(|&nt| nt >= tiles) {
        Some(nt) => Some((nt, 1)),
        None => Some((largest, tiles.div_ceil(largest))),
    }
}

impl CudaBackend {
    /// Pool base addresses of `layer`'s K and V.
    pub(super) fn kv_pools(&self, layer: usize) -> Option<(u64, u64)> {
        let kv = self.kv.as_ref()?;
        let k_pool = kv.buf.ptr() + (2 * layer * kv.part_bytes) as u64;
        Some((k_pool, k_pool + kv.part_bytes as u64))
    }

    pub(super) fn attention_op(
        &mut self,
        layer: usize,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        shape: AttnShape,
    ) -> CudaTensor {
        for t in [q, k, v] {
            if !self.expect(t, DType::F32, "attention") {
                return CudaTensor::empty();
            }
        }
        let Some(kv) = &self.kv else {
            self.fail(anyhow!("KV pool not allocated"));
            return CudaTensor::empty();
        };
        if shape.n_kv_heads == 0
            || !shape.n_heads.is_multiple_of(shape.n_kv_heads)
            || shape.head_dim != kv.spec.head_dim
        {
            self.fail(anyhow!(
                "attention shape {shape:?} does not match the KV pool"
            ));
            return CudaTensor::empty();
        }
        let block_size = kv.spec.block_size;
        let (k_pool, v_pool) = self.kv_pools(layer).expect("pool checked above");
        if self.kv_stored.take() != Some(layer) {
            self.kv_store(k, v, k_pool, v_pool, shape, block_size);
        }
        let out = self.alloc(
            q.rows,
            shape.n_heads * shape.head_dim,
            DType::Bf16,
            q.valid_rows,
        );
        if !self.ok() {
            return out;
        }
        let scale = 1.0 / (shape.head_dim as f32).sqrt();
        let mut args = AttnArgs {
            q: q.ptr,
            out: out.ptr,
            k_pool,
            v_pool,
            positions: self.meta_ptr(self.layout.off_positions),
            token_seq: self.meta_ptr(self.layout.off_token_seq),
            seq_q_start: self.meta_ptr(self.layout.off_seq_q_start),
            seq_bt_off: self.meta_ptr(self.layout.off_seq_bt_off),
            block_tables: self.meta_ptr(self.layout.off_block_tables),
            n_heads: shape.n_heads as i32,
            n_kv_heads: shape.n_kv_heads as i32,
            head_dim: shape.head_dim as i32,
            block_size: block_size as i32,
            scale,
            scale_log2: scale * std::f32::consts::LOG2_E,
            ..Default::default()
        };
        let t = self.layout.tokens as u32;
        let group = shape.n_heads / shape.n_kv_heads;
        let max_nt = if self.max_query_len > MMA_SPLIT_MAX_Q {
            self.opts.mma_splits.prefill_nt
        } else {
            usize::MAX
        };
        let mma = mma_tiles(shape.head_dim, self.max_query_len * group, max_nt)
            .filter(|_| block_size.is_multiple_of(16));
        let prefill = self.prefill_kernel_takes(shape)
            && self.max_query_len >= PREFILL_MIN_Q
            && mma.is_some();
        match (self.opts.attention, mma) {
            (_, Some(_)) if prefill => {
                self.attention_flash(&mut args, shape);
                if self.short_query_len > 0 {
                    // The step's shorter sequences (decode, verify, short chunks), on
                    // blocks sized for the longest of them: sized for 16 tokens, a chunk
                    // step's decode rows took 0.55 ms of attention instead of 0.35–0.38
                    // (135M, 32 × 1 and 32 × 5 beside 55 prompt tokens; results/2026-12-04-chunk-graphs).
                    let short = self.short_query_len;
                    let (nt, chunks) =
                        mma_tiles(shape.head_dim, short * group, usize::MAX).expect("built above");
                    self.attention_mma(&mut args, shape, nt, chunks, short);
                }
            }
            (
                AttentionKernel::Mma
                | AttentionKernel::MmaStaged
                | AttentionKernel::MmaOnly
                | AttentionKernel::MmaSerial,
                Some((nt, chunks)),
            ) => {
                self.attention_mma(&mut args, shape, nt, chunks, self.max_query_len);
            }
            (AttentionKernel::Split, _) if self.max_query_len <= 64 => {
                let parts = self.alloc(
                    q.rows * shape.n_heads * SPLIT_KERNEL_SPLITS,
                    shape.head_dim + 2,
                    DType::F32,
                    q.rows * shape.n_heads * SPLIT_KERNEL_SPLITS,
                );
                if !self.ok() {
                    return out;
                }
                args.parts = parts.ptr;
                args.grid_splits = SPLIT_KERNEL_SPLITS as i32;
                let f = self.kernels.paged_attention_split;
                let grid = (t, shape.n_heads as u32, SPLIT_KERNEL_SPLITS as u32);
                self.launch_args(f, grid, 128, &args, "paged_attention_split");
                let f = self.kernels.attention_combine;
                let grid = (t, shape.n_heads as u32, 1);
                self.launch_args(f, grid, 128, &args, "attention_combine");
            }
            _ => {
                let f = self.kernels.paged_attention;
                let grid = (t, shape.n_heads as u32, 1);
                self.launch_args(f, grid, 128, &args, "paged_attention");
            }
        }
        out
    }

    /// Writes this step's K and V rows (f32) into the pool as bf16.
    fn kv_store(
        &mut self,
        k: &CudaTensor,
        v: &CudaTensor,
        k_pool: u64,
        v_pool: u64,
        shape: AttnShape,
        block_size: usize,
    ) {
        let store = [
            Arg::Ptr(k.ptr),
            Arg::Ptr(v.ptr),
            Arg::Ptr(k_pool),
            Arg::Ptr(v_pool),
            Arg::Ptr(self.meta_ptr(self.layout.off_positions)),
            Arg::Ptr(self.meta_ptr(self.layout.off_token_seq)),
            Arg::Ptr(self.meta_ptr(self.layout.off_seq_bt_off)),
            Arg::Ptr(self.meta_ptr(self.layout.off_block_tables)),
            Arg::I32((shape.n_kv_heads * shape.head_dim) as i32),
            Arg::I32(block_size as i32),
        ];
        let t = self.layout.tokens as u32;
        self.launch(self.kernels.kv_store, (t, 1, 1), 128, &store, "kv_store");
    }

    /// `max_q`: the longest query of the sequences this launch computes.
    fn attention_mma(
        &mut self,
        args: &mut AttnArgs,
        shape: AttnShape,
        nt: usize,
        chunks: usize,
        max_q: usize,
    ) {
        let Some((parts, counters, part_tokens)) = self.mma_workspace(shape) else {
            return;
        };
        let seqs = self.layout.seqs;
        let splits = self.opts.mma_splits;
        let prefill_split = self.prefill_splits_on_mma(shape);
        // Blocks per (sequence, KV head, chunk): one per split (`All`; blocks past a
        // sequence's splits return at once), or enough to fill the GPU twice over when the
        // step has few sequences (`Fill`). It decides which block computes a split, never
        // where the splits fall, so results do not depend on it.
        let units = (seqs * shape.n_kv_heads * chunks).max(1);
        let grid_splits = if max_q > MMA_SPLIT_MAX_Q && !prefill_split {
            1
        } else if splits.grid == SplitGrid::All {
            MMA_MAX_SPLITS
        } else {
            (2 * self.sm_count).div_ceil(units).clamp(1, MMA_MAX_SPLITS)
        };
        args.parts = parts;
        args.counters = counters;
        args.part_tokens = part_tokens as i32;
        args.split_keys_per_q = splits.per_q as i32;
        args.prefill_split_keys = if prefill_split {
            splits.prefill as i32
        } else {
            0
        };
        args.grid_splits = grid_splits as i32;
        let build = match self.opts.attention {
            AttentionKernel::MmaStaged => MmaBuild::Staged,
            AttentionKernel::MmaSerial => MmaBuild::Serial,
            _ if PREFETCH_HEAD_DIMS.contains(&shape.head_dim) => MmaBuild::Prefetch,
            _ => MmaBuild::Serial,
        };
        let smem = if build == MmaBuild::Staged {
            crate::params::mma_staged_smem(shape.head_dim) as u32
        } else {
            0
        };
        let Some(f) = self.kernels.attention_mma(shape.head_dim, nt, build) else {
            self.fail(anyhow!(
                "attention_mma has no build for head_dim {} with {nt} row tiles",
                shape.head_dim
            ));
            return;
        };
        let grid = (
            seqs as u32,
            shape.n_kv_heads as u32,
            (chunks * grid_splits) as u32,
        );
        self.launch_args_smem(f, grid, 128, smem, args, "attention_mma");
    }

    /// The step's sequences of at least `PREFILL_MIN_Q` query tokens on `attention_flash`;
    /// `attention_mma` then skips them (`prefill_min_q`). One block per (sequence, KV head,
    /// FLASH_ROWS rows).
    fn attention_flash(&mut self, args: &mut AttnArgs, shape: AttnShape) {
        let rows = self.max_query_len * (shape.n_heads / shape.n_kv_heads);
        args.prefill_min_q = PREFILL_MIN_Q as i32;
        let Some(f) = self.kernels.attention_flash(shape.head_dim) else {
            self.fail(anyhow!(
                "attention_flash has no build for head_dim {}",
                shape.head_dim
            ));
            return;
        };
        let grid = (
            self.layout.seqs as u32,
            shape.n_kv_heads as u32,
            rows.div_ceil(FLASH_ROWS) as u32,
        );
        let smem = crate::params::flash_smem(shape.head_dim) as u32;
        self.launch_args_smem(
            f,
            grid,
            (FLASH_WARPS * 32) as u32,
            smem,
            args,
            "attention_flash",
        );
    }

    /// Whether this shape's prefill chunks run on `attention_flash` under the chosen
    /// attention kernel.
    fn prefill_kernel_takes(&self, shape: AttnShape) -> bool {
        matches!(
            self.opts.attention,
            AttentionKernel::Mma | AttentionKernel::MmaStaged
        ) && FLASH_HEAD_DIMS.contains(&shape.head_dim)
    }

    /// Whether prefill chunks of this shape run on `attention_mma` (not on the prefill
    /// kernel) and split their keys there.
    fn prefill_splits_on_mma(&self, shape: AttnShape) -> bool {
        self.opts.mma_splits.prefill > 0 && !self.prefill_kernel_takes(shape)
    }

    /// Query tokens the split partials of this model shape cover.
    fn mma_workspace_tokens(&self, shape: AttnShape) -> usize {
        if self.prefill_splits_on_mma(shape) {
            self.opts.max_tokens
        } else {
            MMA_SPLIT_TOKENS.min(self.opts.max_tokens)
        }
    }

    /// Bytes of the split partials and counters for this model shape.
    pub(super) fn mma_workspace_bytes(&self, shape: AttnShape) -> usize {
        let tokens = self.mma_workspace_tokens(shape);
        4 * tokens * shape.n_heads * (MMA_MAX_SPLITS * (shape.head_dim + 2) + 1)
    }

    /// The partials, counters and the tokens they cover for this model shape (allocated at
    /// the first eager use).
    fn mma_workspace(&mut self, shape: AttnShape) -> Option<(u64, u64, usize)> {
        let tokens = self.mma_workspace_tokens(shape);
        if let Some(w) = &self.mma_ws {
            if w.n_heads == shape.n_heads
                && w.n_kv_heads == shape.n_kv_heads
                && w.head_dim == shape.head_dim
                && w.tokens >= tokens
            {
                return Some((w.parts.ptr(), w.counters.ptr(), w.tokens));
            }
        }
        if self.graphs.capturing() {
            self.fail(anyhow!(
                "attention workspace first needed inside a graph capture"
            ));
            return None;
        }
        self.mma_ws = None;
        let part_floats = tokens * shape.n_heads * MMA_MAX_SPLITS * (shape.head_dim + 2);
        // One counter per row chunk, at the chunk's first row of the step (per KV head).
        let counter_words = shape.n_kv_heads * tokens * (shape.n_heads / shape.n_kv_heads);
        let made = DeviceBuffer::alloc(part_floats * 4, "attention partials").and_then(|parts| {
            let counters = DeviceBuffer::alloc(counter_words * 4, "attention counters")?;
            counters.zero(counter_words * 4)?;
            Ok(MmaWorkspace {
                parts,
                counters,
                tokens,
                n_heads: shape.n_heads,
                n_kv_heads: shape.n_kv_heads,
                head_dim: shape.head_dim,
            })
        });
        match made {
            Ok(w) => {
                let ptrs = (w.parts.ptr(), w.counters.ptr(), w.tokens);
                self.mma_ws = Some(w);
                Some(ptrs)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_tiles_cover_the_rows_with_the_smallest_build() {
        // 135M (head_dim 64, 3 heads a group): decode 3 rows, verify K=4 15, K=12 39.
        let any = usize::MAX;
        assert_eq!(mma_tiles(64, 3, any), Some((1, 1)));
        assert_eq!(mma_tiles(64, 15, any), Some((2, 1)));
        assert_eq!(mma_tiles(64, 39, any), Some((6, 1)));
        assert_eq!(mma_tiles(64, 2048 * 3, any), Some((6, 128)));
        // A cap on the row tiles: more, smaller chunks.
        assert_eq!(mma_tiles(64, 2048 * 3, 3), Some((3, 256)));
        assert_eq!(mma_tiles(64, 2048 * 3, 5), Some((4, 192)));
        // 8B (head_dim 128, 4 a group): decode 4, K=4 20, K=12 52.
        assert_eq!(mma_tiles(128, 4, any), Some((1, 1)));
        assert_eq!(mma_tiles(128, 20, any), Some((3, 1)));
        assert_eq!(mma_tiles(128, 52, any), Some((3, 3)));
        assert_eq!(mma_tiles(256, 4, any), None);
    }
}
