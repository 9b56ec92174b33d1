//! Linears over bf16 weights: cuBLAS, or for steps of at most `small_linear_max_t` tokens the
//! fused tensor-core kernels of kernels/linear_small.cu (the work after the GEMM — RoPE and
//! the K/V store, SiLU·mul — in the same launch); quantized weights go to `qlinear`.

use super::tensor::{CudaMatrix, CudaTensor, CudaVector, DType, Weights};
use super::CudaBackend;
use crate::device::Arg;
use crate::gemm::Gemm;
use crate::params::{SmallEpilogue, SmallLinArgs};
use anyhow::anyhow;
use wring_backend::{AttnShape, RopeSpec};

/// Tokens one n-tile of the small-step kernels holds; they are built for 1 to 4 tiles.
const SMALL_TILE_TOKENS: usize = 8;
const SMALL_MAX_TILES: usize = 4;

impl CudaBackend {
    /// The bf16 weight buffer of `w` when the small-step kernels can run `x · wᵀ` with
    /// `epilogue` (bf16 weights, few enough tokens, shapes the kernels tile).
    fn small_linear_weights(
        &self,
        x: &CudaTensor,
        w: &CudaMatrix,
        epilogue: SmallEpilogue,
    ) -> Option<u64> {
        let Weights::Bf16(buf) = &w.w else {
            return None;
        };
        let rows_ok = match epilogue {
            SmallEpilogue::Store => w.rows.is_multiple_of(32),
            SmallEpilogue::Silu => w.rows.is_multiple_of(32),
            SmallEpilogue::Qkv => true,
        };
        (x.rows >= 1
            && x.rows
                <= self
                    .opts
                    .small_linear_max_t
                    .min(SMALL_MAX_TILES * SMALL_TILE_TOKENS)
            && w.cols.is_multiple_of(32)
            && rows_ok)
            .then(|| buf.ptr())
    }

    /// Launches the small-step kernel for `args` (x, w, t, k, rows and the epilogue's
    /// outputs filled in by the caller).
    fn small_linear(&mut self, epilogue: SmallEpilogue, args: &SmallLinArgs, blocks: usize) {
        let tiles = (args.t as usize).div_ceil(SMALL_TILE_TOKENS);
        let f = self.kernels.linear_small(epilogue, tiles);
        let Some(f) = f else {
            self.fail(anyhow!("linear_small has no build for {tiles} token tiles"));
            return;
        };
        self.launch_args(f, (blocks as u32, 1, 1), 128, args, "linear_small");
    }

    pub(super) fn linear_op(
        &mut self,
        x: &CudaTensor,
        w: &CudaMatrix,
        bias: Option<&CudaVector>,
    ) -> CudaTensor {
        if !self.expect(x, DType::Bf16, "linear") {
            return CudaTensor::empty();
        }
        if x.cols != w.cols {
            self.fail(anyhow!(
                "linear: input has {} columns, weight expects {}",
                x.cols,
                w.cols
            ));
            return CudaTensor::empty();
        }
        let small = bias
            .is_none()
            .then(|| self.small_linear_weights(x, w, SmallEpilogue::Store))
            .flatten();
        let out = match &w.w {
            Weights::Bf16(_) if small.is_some() => {
                let out = self.alloc(x.rows, w.rows, DType::F32, x.valid_rows);
                if !self.ok() {
                    return out;
                }
                let args = SmallLinArgs {
                    w: small.unwrap_or_default(),
                    x: x.ptr,
                    y: out.ptr,
                    t: x.rows as i32,
                    k: w.cols as i32,
                    rows: w.rows as i32,
                    ..Default::default()
                };
                self.small_linear(SmallEpilogue::Store, &args, w.rows / 32);
                out
            }
            Weights::Bf16(buf) => {
                let out = self.alloc(x.rows, w.rows, DType::F32, x.valid_rows);
                if !self.ok() {
                    return out;
                }
                let g = Gemm {
                    x: x.ptr,
                    w: buf.ptr(),
                    y: out.ptr,
                    tokens: x.rows,
                    n_in: w.cols,
                    n_out: w.rows,
                };
                if let Err(e) = self.blas.linear(g, !self.graphs.capturing()) {
                    self.fail(e);
                    return out;
                }
                out
            }
            _ => self.quant_linear(x, w),
        };
        if !self.ok() {
            return out;
        }
        if let Some(b) = bias {
            let n = out.rows * out.cols;
            let args = [
                Arg::Ptr(out.ptr),
                Arg::Ptr(b.buf.ptr()),
                Arg::I32(out.cols as i32),
                Arg::I64(n as i64),
            ];
            self.launch(
                self.kernels.add_bias_f32,
                Self::grid_for(n),
                256,
                &args,
                "bias",
            );
        }
        out
    }

    pub(super) fn qkv_rope_op(
        &mut self,
        layer: usize,
        x: &CudaTensor,
        w: &CudaMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        let empty = || {
            (
                CudaTensor::empty(),
                CudaTensor::empty(),
                CudaTensor::empty(),
            )
        };
        let (qd, kvd) = (
            shape.n_heads * shape.head_dim,
            shape.n_kv_heads * shape.head_dim,
        );
        if w.rows != qd + 2 * kvd {
            self.fail(anyhow!(
                "qkv_rope: fused weight has {} rows, expected {}",
                w.rows,
                qd + 2 * kvd
            ));
            return empty();
        }
        let Some(freqs) = self.rope_freqs_ptr(rope) else {
            return empty();
        };
        // K and V straight into the pool when its layout matches this shape (else null
        // pools: k and v are written and `attention` stores them).
        let pools = self.kv.as_ref().filter(|kv| {
            self.opts.fused_kv_store
                && layer < kv.spec.layers
                && kv.spec.head_dim == shape.head_dim
                && kv.spec.n_kv_heads == shape.n_kv_heads
        });
        let (k_pool, v_pool, block_size) = match pools {
            Some(kv) => {
                let k_pool = kv.buf.ptr() + (2 * layer * kv.part_bytes) as u64;
                (k_pool, k_pool + kv.part_bytes as u64, kv.spec.block_size)
            }
            None => (0, 0, 0),
        };
        let small = self
            .small_linear_weights(x, w, SmallEpilogue::Qkv)
            .filter(|_| k_pool != 0 && shape.head_dim.is_multiple_of(32));
        let q = self.alloc(x.rows, qd, DType::F32, x.valid_rows);
        let k = self.alloc(x.rows, kvd, DType::F32, x.valid_rows);
        let v = self.alloc(x.rows, kvd, DType::F32, x.valid_rows);
        if !self.ok() {
            return empty();
        }
        if let Some(wptr) = small {
            let args = SmallLinArgs {
                w: wptr,
                x: x.ptr,
                q: q.ptr,
                k_pool,
                v_pool,
                positions: self.meta_ptr(self.layout.off_positions),
                token_seq: self.meta_ptr(self.layout.off_token_seq),
                seq_bt_off: self.meta_ptr(self.layout.off_seq_bt_off),
                block_tables: self.meta_ptr(self.layout.off_block_tables),
                inv_freq: freqs,
                t: x.rows as i32,
                k: w.cols as i32,
                rows: w.rows as i32,
                n_heads: shape.n_heads as i32,
                n_kv_heads: shape.n_kv_heads as i32,
                head_dim: shape.head_dim as i32,
                interleaved: rope.interleaved as i32,
                block_size: block_size as i32,
                ..Default::default()
            };
            let blocks = (shape.n_heads + 2 * shape.n_kv_heads) * (shape.head_dim / 32);
            self.small_linear(SmallEpilogue::Qkv, &args, blocks);
            self.kv_stored = Some(layer);
            return (q, k, v);
        }
        let fused = self.linear_op(x, w, None);
        if !self.ok() {
            return empty();
        }
        let args = [
            Arg::Ptr(fused.ptr),
            Arg::Ptr(q.ptr),
            Arg::Ptr(k.ptr),
            Arg::Ptr(v.ptr),
            Arg::Ptr(self.meta_ptr(self.layout.off_positions)),
            Arg::Ptr(freqs),
            Arg::I32(shape.n_heads as i32),
            Arg::I32(shape.n_kv_heads as i32),
            Arg::I32(shape.head_dim as i32),
            Arg::I32(rope.interleaved as i32),
            Arg::Ptr(k_pool),
            Arg::Ptr(v_pool),
            Arg::Ptr(self.meta_ptr(self.layout.off_token_seq)),
            Arg::Ptr(self.meta_ptr(self.layout.off_seq_bt_off)),
            Arg::Ptr(self.meta_ptr(self.layout.off_block_tables)),
            Arg::I32(block_size as i32),
        ];
        self.kv_stored = (k_pool != 0).then_some(layer);
        let blocks_per_token = (shape.n_heads + 2 * shape.n_kv_heads) as u32;
        self.launch(
            self.kernels.rope_split_qkv,
            (x.rows as u32, blocks_per_token, 1),
            64,
            &args,
            "rope_split_qkv",
        );
        drop(fused);
        (q, k, v)
    }

    pub(super) fn gate_up_silu_op(&mut self, x: &CudaTensor, w: &CudaMatrix) -> CudaTensor {
        if !w.rows.is_multiple_of(2) {
            self.fail(anyhow!(
                "gate_up_silu: fused weight has an odd row count {}",
                w.rows
            ));
            return CudaTensor::empty();
        }
        if let Some(wptr) = self.small_linear_weights(x, w, SmallEpilogue::Silu) {
            let n = w.rows / 2;
            let out = self.alloc(x.rows, n, DType::Bf16, x.valid_rows);
            if !self.ok() {
                return out;
            }
            let args = SmallLinArgs {
                w: wptr,
                x: x.ptr,
                h: out.ptr,
                t: x.rows as i32,
                k: w.cols as i32,
                rows: w.rows as i32,
                ..Default::default()
            };
            self.small_linear(SmallEpilogue::Silu, &args, n / 16);
            return out;
        }
        let gu = self.linear_op(x, w, None);
        if !self.ok() {
            return CudaTensor::empty();
        }
        let n = w.rows / 2;
        let out = self.alloc(x.rows, n, DType::Bf16, x.valid_rows);
        if !self.ok() {
            return out;
        }
        let total = x.rows * n;
        let args = [
            Arg::Ptr(gu.ptr),
            Arg::Ptr(out.ptr),
            Arg::I32(n as i32),
            Arg::I64(total as i64),
        ];
        self.launch(
            self.kernels.silu_mul_fused,
            Self::grid_for(total),
            256,
            &args,
            "silu_mul_fused",
        );
        drop(gu);
        out
    }
}
