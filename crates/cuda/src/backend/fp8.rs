//! FP8 W8A8 with no passes of its own (`CudaOptions::fp8_fused`): the kernel that produces
//! an FP8 GEMM's input writes E4M3 codes and per-token scales (RMSNorm, SiLU·mul; the
//! attention output still takes one `fp8_quantize_rows` launch before the o projection),
//! and the kernel that reads the GEMM's f32 output applies the per-token × per-channel
//! rescale (the q/k/v split with RoPE, SiLU·mul, add + RMSNorm). Any other reader of an
//! unscaled output settles it first (`settle`: one `fp8_rescale`, e.g. before the last
//! layer's residual add or a tensor-parallel all-reduce). The bits are those of the
//! unfused path (quantise, GEMM, rescale), which `WRING_CUDA_FP8_FUSED=off` keeps.
//!
//! The model names each GEMM input's consumer first (`Backend::next_input_for`); the
//! producer then asks [`CudaBackend::take_fp8_input`] whether to write E4M3. That answer
//! and the linear's choice of kernel come from one rule, [`CudaBackend::fp8_gemm_input`].

use super::tensor::{CudaMatrix, CudaTensor, CudaVector, DType, Fp8Rescale, Weights};
use super::CudaBackend;
use crate::blaslt::{fp8_pad_tokens, fp8_shape_ok};
use crate::device::Arg;
use anyhow::anyhow;
use std::sync::Arc;

/// Where an FP8 producer writes: E4M3 codes and per-token scales, or bf16.
pub(super) struct Fp8Out {
    pub q: u64,
    pub qs: u64,
}

impl CudaBackend {
    /// True when `w` runs through the fused FP8 path (FP8 weights, cuBLASLt present, a
    /// shape it takes, fusion on).
    pub(super) fn fp8_fused_weights(&self, w: &CudaMatrix) -> bool {
        self.opts.fp8_fused
            && self.lt.is_some()
            && matches!(w.w, Weights::Fp8 { .. })
            && fp8_shape_ok(w.cols, w.rows)
    }

    /// Whether a linear over `w` (`n_in` × `n_out`, FP8) at `t` tokens runs the cuBLASLt
    /// FP8 GEMM, and so wants its input as E4M3 codes. The one rule both the producers
    /// and the linear follow (a kernel for small steps that reads bf16 activations adds
    /// its condition here).
    pub(super) fn fp8_gemm_input(&mut self, t: usize, n_in: usize, n_out: usize) -> bool {
        // Steps the gemv kernels take read bf16 activations (W8A16 there).
        if t <= self.dense_gemv_max_t() {
            return false;
        }
        let tp = fp8_pad_tokens(t);
        self.lt
            .as_mut()
            .is_some_and(|lt| lt.supports(tp, n_in, n_out))
    }

    /// Whether a linear over `w` with input `x` takes the FP8 W8A8 ops: E4M3 input, or
    /// FP8 weights at a step the gemv kernels do not take (those read bf16 and apply the
    /// row scale themselves, so their output needs no rescale).
    pub(super) fn fp8_route(&self, x: &CudaTensor, w: &CudaMatrix) -> bool {
        x.dtype == DType::Fp8 || (self.fp8_fused_weights(w) && !self.gemv_takes(x, w))
    }

    /// A linear by the rule above: the FP8 W8A8 GEMM (its output may carry a pending
    /// rescale) or the bf16 / gemv / quantized paths. `Backend::linear` and the fused
    /// q|k|v and gate|up ops all take their GEMM from here.
    pub(super) fn any_linear_op(
        &mut self,
        x: &CudaTensor,
        w: &CudaMatrix,
        bias: Option<&CudaVector>,
    ) -> CudaTensor {
        if self.fp8_route(x, w) {
            self.fp8_linear_op(x, w, bias)
        } else {
            self.linear_op(x, w, bias)
        }
    }

    /// `Backend::next_input_for`: remembers the consumer of the next GEMM input.
    pub(super) fn next_input_for_op(&mut self, w: &CudaMatrix) {
        self.fp8_next = self.fp8_fused_weights(w).then_some((w.cols, w.rows));
    }

    /// Called by every producer of a GEMM input (`t` × `cols`): the E4M3 output to write
    /// when its consumer is an FP8 GEMM that reads codes, else None (bf16). The hint is
    /// used once.
    pub(super) fn take_fp8_input(&mut self, t: usize, cols: usize) -> Option<CudaTensor> {
        let (n_in, n_out) = self.fp8_next.take()?;
        if n_in != cols || !self.fp8_gemm_input(t, n_in, n_out) {
            return None;
        }
        Some(self.alloc_fp8(t, cols))
    }

    /// An FP8 GEMM input of `rows` tokens: codes for the padded token count, scales beside.
    pub(super) fn alloc_fp8(&mut self, rows: usize, cols: usize) -> CudaTensor {
        let tp = fp8_pad_tokens(rows);
        let mut codes = self.alloc(tp, cols, DType::Fp8, rows);
        let scales = self.alloc(tp, 1, DType::F32, tp);
        if !self.ok() {
            return CudaTensor::empty();
        }
        codes.rows = rows;
        codes.aux = scales._block.map(Arc::new);
        codes
    }

    /// The codes/scales pointers of an FP8 producer's output (0, 0: bf16).
    pub(super) fn fp8_out(t: Option<&CudaTensor>) -> Fp8Out {
        t.map_or(Fp8Out { q: 0, qs: 0 }, |t| Fp8Out {
            q: t.ptr,
            qs: t.aux_ptr(),
        })
    }

    /// Applies a pending FP8 rescale to `t` in place (one `fp8_rescale`).
    pub(super) fn settle(&mut self, t: &CudaTensor) {
        let Some(r) = t.pending.take() else {
            return;
        };
        let total = t.rows * t.cols;
        let args = [
            Arg::Ptr(t.ptr),
            Arg::Ptr(r.xs),
            Arg::Ptr(r.ws),
            Arg::I32(t.cols as i32),
            Arg::I64(total as i64),
        ];
        self.launch(
            self.kernels.fp8_rescale,
            Self::grid_for(total),
            256,
            &args,
            "fp8_rescale",
        );
    }

    /// `x · Wᵀ (+ bias)` for FP8 weights on the fused path; `x` is E4M3 (written by its
    /// producer) or bf16 (quantised here, or another kernel when the rule says so). The
    /// output's rescale is left pending for its reader.
    pub(super) fn fp8_linear_op(
        &mut self,
        x: &CudaTensor,
        w: &CudaMatrix,
        bias: Option<&CudaVector>,
    ) -> CudaTensor {
        if !self.ok() {
            return CudaTensor::empty();
        }
        if x.cols != w.cols || !matches!(x.dtype, DType::Fp8 | DType::Bf16) || x.ptr == 0 {
            self.fail(anyhow!(
                "linear: a {:?} input of {} columns for a weight of {} columns",
                x.dtype,
                x.cols,
                w.cols
            ));
            return CudaTensor::empty();
        }
        let out = match &w.w {
            Weights::Fp8 { q, scale }
                if x.dtype == DType::Fp8 || self.fp8_gemm_input(x.rows, w.cols, w.rows) =>
            {
                let (wq, ws) = (q.ptr(), scale.ptr());
                self.fp8_linear(x, w, wq, ws)
            }
            _ if x.dtype == DType::Fp8 => {
                self.fail(anyhow!(
                    "linear: E4M3 activations for a {} weight of {}x{} (the FP8 input rule and the linear disagree)",
                    w.scheme(),
                    w.rows,
                    w.cols
                ));
                return CudaTensor::empty();
            }
            _ => self.quant_linear(x, w),
        };
        if let Some(b) = bias.filter(|_| self.ok()) {
            self.settle(&out);
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

    /// SiLU·mul of a gate|up output `[T][2n]` (a pending rescale applied) into the next
    /// GEMM's input: E4M3 + scales when the hint asks for it, else bf16.
    pub(super) fn silu_rows(&mut self, gu: &CudaTensor) -> CudaTensor {
        let n = gu.cols / 2;
        let r = gu.pending.take();
        let fp8 = self.take_fp8_input(gu.rows, n);
        let out = match fp8 {
            Some(t) => t,
            None => self.alloc(gu.rows, n, DType::Bf16, gu.valid_rows),
        };
        if !self.ok() {
            return out;
        }
        let dst = Self::fp8_out((out.dtype == DType::Fp8).then_some(&out));
        let bf16 = if out.dtype == DType::Bf16 { out.ptr } else { 0 };
        let r = r.unwrap_or(Fp8Rescale { xs: 0, ws: 0 });
        let args = [
            Arg::Ptr(gu.ptr),
            Arg::Ptr(r.xs),
            Arg::Ptr(r.ws),
            Arg::Ptr(bf16),
            Arg::Ptr(dst.q),
            Arg::Ptr(dst.qs),
            Arg::I32(n as i32),
        ];
        let f = self
            .kernels
            .silu_mul_row_regs
            .iter()
            .find(|(regs, _)| n <= regs * 1024)
            .map_or(self.kernels.silu_mul_row, |&(_, f)| f);
        self.launch(f, (gu.rows as u32, 1, 1), 1024, &args, "silu_mul_row");
        out
    }
}
