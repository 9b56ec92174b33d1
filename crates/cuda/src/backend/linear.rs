//! Linears: cuBLAS for bf16 weights, `qlinear` for quantized ones, and for steps of at most
//! `GEMV_MAX_T` tokens (and `small_linear_max_t`) the weight-streaming kernels of
//! kernels/gemv.cu for every format, with the work after the GEMM (RoPE and the K/V store,
//! SiLU·mul) in the same launch. On a step whose path fuses the norm
//! (`small_step.rs`), the q|k|v and gate|up gemv normalise the f32 residual stream in their
//! prologue and the o and down gemv add into it in their epilogue.

use super::tensor::{CudaMatrix, CudaTensor, CudaVector, DType, Weights};
use super::CudaBackend;
use crate::device::Arg;
use crate::gemm::Gemm;
use crate::params::{gemv_splits, GemvArgs, GemvEpilogue, GemvFormat, GEMV_BUCKETS};
use anyhow::anyhow;
use wring_backend::{AttnShape, RopeSpec};

/// Most tokens a step may carry to take the gemv kernels (their largest token bucket).
/// Steps of at least this many tokens split q|k|v with one block per token (prefill chunks;
/// decode and verify steps keep a block per head, which spreads few tokens over the GPU).
const ROPE_BLOCK_PER_TOKEN_MIN_T: usize = 512;

pub(crate) const GEMV_MAX_T: usize = GEMV_BUCKETS[GEMV_BUCKETS.len() - 1];

impl CudaBackend {
    /// Whether a plain (store) linear over `w` with input `x` runs the gemv kernels.
    pub(super) fn gemv_takes(&self, x: &CudaTensor, w: &CudaMatrix) -> bool {
        self.gemv_args(x, w, GemvEpilogue::Store, 0, None).is_some()
    }

    /// The gemv arguments that describe `w` (format and weight pointers) when the gemv
    /// kernels can run `x · wᵀ` with `epilogue`: few enough tokens, shapes they tile, and
    /// the counters allocated. The caller fills in the outputs. With `norm` (weights, eps)
    /// `x` is the f32 residual stream, normalised in the kernel's prologue; else bf16.
    fn gemv_args(
        &self,
        x: &CudaTensor,
        w: &CudaMatrix,
        epilogue: GemvEpilogue,
        head_dim: usize,
        norm: Option<(&CudaVector, f32)>,
    ) -> Option<(GemvFormat, GemvArgs)> {
        let max_t = match w.w {
            Weights::Int4 { .. } | Weights::Nvfp4 { .. } => self.four_bit_gemv_max_t(),
            _ => self.dense_gemv_max_t().min(GEMV_MAX_T),
        };
        let dtype = if norm.is_some() {
            DType::F32
        } else {
            DType::Bf16
        };
        if x.rows == 0 || x.rows > max_t || x.dtype != dtype {
            return None;
        }
        if norm.is_some_and(|(nw, _)| nw.len != x.cols) {
            return None;
        }
        if !w.cols.is_multiple_of(32) || !w.rows.is_multiple_of(16) || x.cols != w.cols {
            return None;
        }
        let opt = |s: &Option<crate::device::DeviceBuffer>| s.as_ref().map_or(0, |b| b.ptr());
        let mut a = GemvArgs {
            t: x.rows as i32,
            k: w.cols as i32,
            rows: w.rows as i32,
            ..Default::default()
        };
        let format = match &w.w {
            Weights::Bf16(buf) => {
                a.w = buf.ptr();
                GemvFormat::Bf16
            }
            Weights::Fp8 { q, scale } => {
                a.w = q.ptr();
                a.scale = scale.ptr();
                GemvFormat::Fp8
            }
            Weights::Int4 {
                q,
                scale,
                zero,
                group,
                smooth,
                ..
            } => {
                // A 128-column chunk must be one group (its scale multiplies the f32 sums).
                if !group.is_multiple_of(128) {
                    return None;
                }
                a.w = q.ptr();
                a.scale = scale.ptr();
                a.zero = zero.ptr();
                a.smooth = opt(smooth);
                a.group = *group as i32;
                GemvFormat::Int4
            }
            Weights::Nvfp4 {
                q,
                block_scale,
                row_scale,
                smooth,
                ..
            } => {
                a.w = q.ptr();
                a.scale = row_scale.ptr();
                a.bscale = block_scale.ptr();
                a.smooth = opt(smooth);
                GemvFormat::Nvfp4
            }
        };
        match norm {
            Some((nw, eps)) => {
                a.xf = x.ptr;
                a.norm_w = nw.buf.ptr();
                a.eps = eps;
            }
            None => a.x = x.ptr,
        }
        let groups = Self::gemv_groups(w.rows, epilogue, head_dim)?;
        (groups <= self.gemv_counter_words).then_some((format, a))
    }

    /// Row groups (blocks of 4 tiles of 16 rows) of a gemv launch; None when the
    /// epilogue cannot tile `rows` (gate|up halves of 32-row multiples, whole 64-row
    /// halves of heads).
    fn gemv_groups(rows: usize, epilogue: GemvEpilogue, head_dim: usize) -> Option<usize> {
        match epilogue {
            GemvEpilogue::Store => Some(rows.div_ceil(64)),
            GemvEpilogue::Silu => (rows / 2).is_multiple_of(32).then_some(rows / 64),
            GemvEpilogue::Qkv => {
                (head_dim > 0 && head_dim.is_multiple_of(64) && rows.is_multiple_of(head_dim))
                    .then_some(rows / 64)
            }
        }
    }

    /// Launches the gemv kernel over `groups` row groups, with the split partials (when K
    /// is split) in a workspace from the arena.
    fn gemv_launch(
        &mut self,
        format: GemvFormat,
        epilogue: GemvEpilogue,
        mut a: GemvArgs,
        groups: usize,
    ) {
        let (t, rows, k) = (a.t as usize, a.rows as usize, a.k as usize);
        let Some(f) = self.kernels.gemv(format, epilogue, t) else {
            self.fail(anyhow!("gemv has no build for {t} tokens"));
            return;
        };
        // The multi-tile builds split K exactly as the 8-token ones (the shape alone), so a
        // token's bits are the same in every bucket (verify = plain decode across them).
        let (splits, per) = gemv_splits(groups, k, 4 * format.lane_cols(), self.sm_count);
        let part = if splits > 1 {
            self.alloc(splits * t, rows, DType::F32, splits * t)
        } else {
            CudaTensor::empty()
        };
        if !self.ok() {
            return;
        }
        a.part = part.ptr;
        a.counters = self.gemv_counters.as_ref().map_or(0, |b| b.ptr());
        a.splits = splits as i32;
        a.chunks_per_split = per as i32;
        self.launch_args(f, (groups as u32, splits as u32, 1), 128, &a, "gemv");
        self.gemv_launches += 1;
        // The next kernel waits for this one before it touches the arena (PDL included).
        drop(part);
    }

    /// `x · wᵀ` as f32 rows through the gemv kernels, when they take this step.
    fn gemv_store(&mut self, x: &CudaTensor, w: &CudaMatrix) -> Option<CudaTensor> {
        let (format, mut a) = self.gemv_args(x, w, GemvEpilogue::Store, 0, None)?;
        let out = self.alloc(x.rows, w.rows, DType::F32, x.valid_rows);
        if !self.ok() {
            return Some(out);
        }
        a.y = out.ptr;
        self.gemv_launch(format, GemvEpilogue::Store, a, w.rows.div_ceil(64));
        Some(out)
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
        if x.rows == 0 {
            // The LM head of a step whose tokens need no logits (a prompt's first chunks):
            // nothing to multiply, and cuBLAS rejects an empty GEMM.
            return self.alloc(0, w.rows, DType::F32, 0);
        }
        let out = match &w.w {
            _ if self.gemv_takes(x, w) => self.gemv_store(x, w).unwrap_or_else(CudaTensor::empty),
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
                self.persistent_flush();
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

    /// `Backend::linear_add_residual`: `resid += input · wᵀ`, the add in the gemv epilogue
    /// when the gemv kernels take the step (else a linear and an add).
    pub(super) fn linear_add_residual_op(
        &mut self,
        resid: &mut CudaTensor,
        input: &CudaTensor,
        w: &CudaMatrix,
    ) {
        if !self.expect(resid, DType::F32, "linear_add_residual") {
            return;
        }
        let gemv = self.gemv_args(input, w, GemvEpilogue::Store, 0, None);
        match gemv {
            Some((format, mut a)) if resid.rows == input.rows && resid.cols == w.rows => {
                a.y = resid.ptr;
                a.accumulate = 1;
                self.gemv_launch(format, GemvEpilogue::Store, a, w.rows.div_ceil(64));
            }
            _ => {
                let y = self.any_linear_op(input, w, None);
                if self.ok() {
                    self.settle(&y);
                    self.add_assign_op(resid, &y);
                }
            }
        }
    }

    /// `Backend::rms_norm_qkv_rope`: [`Self::qkv_rope_op`] of `rms_norm(x)`, the norm in
    /// the gemv prologue when the gemv kernels take the step.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rms_norm_qkv_rope_op(
        &mut self,
        layer: usize,
        x: &CudaTensor,
        norm: &CudaVector,
        eps: f32,
        w: &CudaMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        if self
            .gemv_args(x, w, GemvEpilogue::Qkv, shape.head_dim, Some((norm, eps)))
            .is_some()
        {
            return self.qkv_rope_normed(layer, x, w, shape, rope, Some((norm, eps)));
        }
        let h = self.rms_norm_op(x, norm, eps);
        self.qkv_rope_op(layer, &h, w, shape, rope)
    }

    pub(super) fn qkv_rope_op(
        &mut self,
        layer: usize,
        x: &CudaTensor,
        w: &CudaMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        self.qkv_rope_normed(layer, x, w, shape, rope, None)
    }

    /// The q|k|v projection with RoPE; with `norm`, `x` is the f32 residual stream and the
    /// gemv kernels (the caller checked they take it) normalise it first.
    fn qkv_rope_normed(
        &mut self,
        layer: usize,
        x: &CudaTensor,
        w: &CudaMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
        norm: Option<(&CudaVector, f32)>,
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
        let gemv = self.gemv_args(x, w, GemvEpilogue::Qkv, shape.head_dim, norm);
        let q = self.alloc(x.rows, qd, DType::F32, x.valid_rows);
        let k = self.alloc(x.rows, kvd, DType::F32, x.valid_rows);
        let v = self.alloc(x.rows, kvd, DType::F32, x.valid_rows);
        if !self.ok() {
            return empty();
        }
        if let Some((format, mut a)) = gemv {
            a.q = q.ptr;
            a.k_out = k.ptr;
            a.v_out = v.ptr;
            a.k_pool = k_pool;
            a.v_pool = v_pool;
            a.positions = self.meta_ptr(self.layout.off_positions);
            a.token_seq = self.meta_ptr(self.layout.off_token_seq);
            a.seq_bt_off = self.meta_ptr(self.layout.off_seq_bt_off);
            a.block_tables = self.meta_ptr(self.layout.off_block_tables);
            a.inv_freq = freqs;
            a.n_heads = shape.n_heads as i32;
            a.n_kv_heads = shape.n_kv_heads as i32;
            a.head_dim = shape.head_dim as i32;
            a.interleaved = rope.interleaved as i32;
            a.block_size = block_size as i32;
            self.gemv_launch(format, GemvEpilogue::Qkv, a, w.rows / 64);
            self.kv_stored = (k_pool != 0).then_some(layer);
            return (q, k, v);
        }
        if norm.is_some() {
            self.fail(anyhow!(
                "qkv_rope: the norm prologue needs the gemv kernels"
            ));
            return empty();
        }
        // An FP8 GEMM leaves its rescale to the split, which applies it as it reads.
        let fused = self.any_linear_op(x, w, None);
        if !self.ok() {
            return empty();
        }
        let rescale = fused.pending.take();
        let (f, what) = if rescale.is_some() {
            (self.kernels.rope_split_qkv_fp8, "rope_split_qkv_fp8")
        } else {
            (self.kernels.rope_split_qkv, "rope_split_qkv")
        };
        let mut args = vec![
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
        if let Some(r) = rescale {
            args.extend([Arg::Ptr(r.xs), Arg::Ptr(r.ws)]);
        }
        self.kv_stored = (k_pool != 0).then_some(layer);
        // Long steps: one block per token shares each angle across the heads (same bits).
        let (blocks_per_token, threads) = if x.rows >= ROPE_BLOCK_PER_TOKEN_MIN_T {
            (1, 128)
        } else {
            ((shape.n_heads + 2 * shape.n_kv_heads) as u32, 64)
        };
        self.launch(
            f,
            (x.rows as u32, blocks_per_token, 1),
            threads,
            &args,
            what,
        );
        drop(fused);
        (q, k, v)
    }

    /// `Backend::rms_norm_gate_up_silu`: [`Self::gate_up_silu_op`] of `rms_norm(x)`, the
    /// norm in the gemv prologue when the gemv kernels take the step.
    pub(super) fn rms_norm_gate_up_silu_op(
        &mut self,
        x: &CudaTensor,
        norm: &CudaVector,
        eps: f32,
        w: &CudaMatrix,
    ) -> CudaTensor {
        let fused = w.rows.is_multiple_of(2)
            && self
                .gemv_args(x, w, GemvEpilogue::Silu, 0, Some((norm, eps)))
                .is_some();
        if !fused {
            // The hint (the down projection's input format) is for the SiLU, not the norm.
            let hint = self.fp8_next.take();
            let h = self.rms_norm_op(x, norm, eps);
            self.fp8_next = hint;
            return self.gate_up_silu_op(&h, w);
        }
        // The gemv kernel writes bf16: a down-projection hint is dropped.
        self.fp8_next = None;
        let Some((format, mut a)) = self.gemv_args(x, w, GemvEpilogue::Silu, 0, Some((norm, eps)))
        else {
            return CudaTensor::empty();
        };
        let out = self.alloc(x.rows, w.rows / 2, DType::Bf16, x.valid_rows);
        if !self.ok() {
            return out;
        }
        a.h = out.ptr;
        self.gemv_launch(format, GemvEpilogue::Silu, a, w.rows / 64);
        out
    }

    pub(super) fn gate_up_silu_op(&mut self, x: &CudaTensor, w: &CudaMatrix) -> CudaTensor {
        if !w.rows.is_multiple_of(2) {
            self.fail(anyhow!(
                "gate_up_silu: fused weight has an odd row count {}",
                w.rows
            ));
            return CudaTensor::empty();
        }
        let fp8 = self.fp8_route(x, w);
        if !fp8 {
            // The bf16 kernels write bf16: a down-projection hint is dropped.
            self.fp8_next = None;
        }
        if let Some((format, mut a)) = self.gemv_args(x, w, GemvEpilogue::Silu, 0, None) {
            let out = self.alloc(x.rows, w.rows / 2, DType::Bf16, x.valid_rows);
            if !self.ok() {
                return out;
            }
            a.h = out.ptr;
            self.gemv_launch(format, GemvEpilogue::Silu, a, w.rows / 64);
            return out;
        }
        if fp8 {
            // SiLU·mul applies the FP8 GEMM's rescale and writes the down projection's
            // input (E4M3 when that GEMM reads codes).
            let gu = self.fp8_linear_op(x, w, None);
            if !self.ok() {
                return CudaTensor::empty();
            }
            return self.silu_rows(&gu);
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
        let args = [Arg::Ptr(gu.ptr), Arg::Ptr(out.ptr), Arg::I32(n as i32)];
        self.launch(
            self.kernels.silu_mul_fused,
            (n.div_ceil(256) as u32, x.rows as u32, 1),
            256,
            &args,
            "silu_mul_fused",
        );
        drop(gu);
        out
    }
}
