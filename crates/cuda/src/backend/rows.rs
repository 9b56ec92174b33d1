//! The row ops of the CUDA backend (embedding lookup, norms, RoPE, SiLU·mul, residual add,
//! logit-row gather): one launch each over rows of the step's activations.

use super::tensor::{CudaMatrix, CudaTensor, CudaVector, DType, Weights};
use super::CudaBackend;
use crate::device::Arg;
use anyhow::anyhow;
use wring_backend::RopeSpec;

impl CudaBackend {
    pub(super) fn embed_op(&mut self, table: &CudaMatrix) -> CudaTensor {
        if let Some(&bad) = self
            .layout
            .host_tokens
            .iter()
            .find(|&&t| t as usize >= table.rows)
        {
            self.fail(anyhow!(
                "token id {bad} is outside the vocabulary of {}",
                table.rows
            ));
            return CudaTensor::empty();
        }
        let Weights::Bf16(table_buf) = &table.w else {
            self.fail(anyhow!(
                "the CUDA embedding lookup needs a bf16 table, got {}",
                table.scheme()
            ));
            return CudaTensor::empty();
        };
        let table_ptr = table_buf.ptr();
        let t = self.layout.tokens;
        let out = self.alloc(t, table.cols, DType::F32, t);
        let args = [
            Arg::Ptr(self.meta_ptr(self.layout.off_tokens)),
            Arg::Ptr(table_ptr),
            Arg::Ptr(out.ptr),
            Arg::I32(table.cols as i32),
        ];
        self.launch(
            self.kernels.embed_rows,
            (t as u32, 1, 1),
            256,
            &args,
            "embed",
        );
        out
    }

    /// The output of a norm over `x`: E4M3 codes + per-token scales when the next GEMM
    /// reads them (`fp8.rs`), else bf16.
    fn norm_output(&mut self, x: &CudaTensor) -> CudaTensor {
        match self.take_fp8_input(x.rows, x.cols) {
            Some(t) => t,
            None => self.alloc(x.rows, x.cols, DType::Bf16, x.valid_rows),
        }
    }

    pub(super) fn rms_norm_op(&mut self, x: &CudaTensor, w: &CudaVector, eps: f32) -> CudaTensor {
        if !self.expect(x, DType::F32, "rms_norm") {
            return CudaTensor::empty();
        }
        let out = self.norm_output(x);
        debug_assert_eq!(w.len, x.cols);
        let fp8 = Self::fp8_out((out.dtype == DType::Fp8).then_some(&out));
        let bf16 = if out.dtype == DType::Bf16 { out.ptr } else { 0 };
        let args = [
            Arg::Ptr(x.ptr),
            Arg::Ptr(w.buf.ptr()),
            Arg::Ptr(bf16),
            Arg::I32(x.cols as i32),
            Arg::F32(eps),
            Arg::Ptr(fp8.q),
            Arg::Ptr(fp8.qs),
        ];
        self.launch(
            self.kernels.rms_norm,
            (x.rows as u32, 1, 1),
            256,
            &args,
            "rms_norm",
        );
        out
    }

    pub(super) fn add_rms_norm_op(
        &mut self,
        x: &mut CudaTensor,
        y: &CudaTensor,
        w: &CudaVector,
        eps: f32,
    ) -> CudaTensor {
        // An FP8 GEMM's unscaled output is rescaled as it is added.
        let ys = y.pending.take();
        if !self.expect(x, DType::F32, "add_rms_norm")
            || !self.expect(y, DType::F32, "add_rms_norm")
        {
            return CudaTensor::empty();
        }
        let out = self.norm_output(x);
        let fp8 = Self::fp8_out((out.dtype == DType::Fp8).then_some(&out));
        let bf16 = if out.dtype == DType::Bf16 { out.ptr } else { 0 };
        let args = [
            Arg::Ptr(x.ptr),
            Arg::Ptr(y.ptr),
            Arg::Ptr(w.buf.ptr()),
            Arg::Ptr(bf16),
            Arg::I32(x.cols as i32),
            Arg::F32(eps),
            Arg::Ptr(ys.map_or(0, |r| r.xs)),
            Arg::Ptr(ys.map_or(0, |r| r.ws)),
            Arg::Ptr(fp8.q),
            Arg::Ptr(fp8.qs),
        ];
        // The smallest register-resident variant that holds a row (256 threads per block).
        let f = self
            .kernels
            .add_rms_norm_regs
            .iter()
            .find(|(regs, _)| x.cols <= regs * 256)
            .map_or(self.kernels.add_rms_norm, |&(_, f)| f);
        self.launch(f, (x.rows as u32, 1, 1), 256, &args, "add_rms_norm");
        out
    }

    pub(super) fn add_assign_op(&mut self, x: &mut CudaTensor, y: &CudaTensor) {
        if !self.expect(x, DType::F32, "add_assign") || !self.expect(y, DType::F32, "add_assign") {
            return;
        }
        let n = x.rows * x.cols;
        let args = [Arg::Ptr(x.ptr), Arg::Ptr(y.ptr), Arg::I64(n as i64)];
        self.launch(self.kernels.add_f32, Self::grid_for(n), 256, &args, "add");
    }

    pub(super) fn rope_op(
        &mut self,
        x: &mut CudaTensor,
        n_heads: usize,
        head_dim: usize,
        rope: &RopeSpec,
    ) {
        if !self.expect(x, DType::F32, "rope") {
            return;
        }
        let Some(freqs) = self.rope_freqs_ptr(rope) else {
            return;
        };
        let args = [
            Arg::Ptr(x.ptr),
            Arg::Ptr(self.meta_ptr(self.layout.off_positions)),
            Arg::Ptr(freqs),
            Arg::I32(n_heads as i32),
            Arg::I32(head_dim as i32),
            Arg::I32(rope.interleaved as i32),
        ];
        self.launch(self.kernels.rope, (x.rows as u32, 1, 1), 256, &args, "rope");
    }

    /// Qwen3's q/k norms in place: every `head_dim` slice of `x`'s rows normed with `w`.
    pub(super) fn head_rms_norm_op(
        &mut self,
        x: &mut CudaTensor,
        n_heads: usize,
        w: &CudaVector,
        eps: f32,
    ) {
        if !self.expect(x, DType::F32, "head_rms_norm") {
            return;
        }
        debug_assert_eq!(x.cols, n_heads * w.len);
        const HEADS_PER_BLOCK: usize = 8;
        let args = [
            Arg::Ptr(x.ptr),
            Arg::Ptr(w.buf.ptr()),
            Arg::I32(n_heads as i32),
            Arg::I32(w.len as i32),
            Arg::F32(eps),
        ];
        let grid = (x.rows as u32, n_heads.div_ceil(HEADS_PER_BLOCK) as u32, 1);
        let threads = 32 * HEADS_PER_BLOCK as u32;
        self.launch(
            self.kernels.head_rms_norm,
            grid,
            threads,
            &args,
            "head_rms_norm",
        );
    }

    pub(super) fn silu_mul_op(&mut self, gate: &CudaTensor, up: &CudaTensor) -> CudaTensor {
        if !self.expect(gate, DType::F32, "silu_mul") || !self.expect(up, DType::F32, "silu_mul") {
            return CudaTensor::empty();
        }
        let out = self.alloc(gate.rows, gate.cols, DType::Bf16, gate.valid_rows);
        let n = gate.rows * gate.cols;
        let args = [
            Arg::Ptr(gate.ptr),
            Arg::Ptr(up.ptr),
            Arg::Ptr(out.ptr),
            Arg::I64(n as i64),
        ];
        self.launch(
            self.kernels.silu_mul,
            Self::grid_for(n),
            256,
            &args,
            "silu_mul",
        );
        out
    }

    pub(super) fn gather_logit_rows_op(&mut self, x: &CudaTensor) -> CudaTensor {
        if !self.expect(x, DType::F32, "gather_logit_rows") {
            return CudaTensor::empty();
        }
        let l = self.layout.logit_rows;
        let out = self.alloc(l, x.cols, DType::F32, self.layout.real_logit_rows);
        if l == 0 {
            return out;
        }
        let args = [
            Arg::Ptr(x.ptr),
            Arg::Ptr(self.meta_ptr(self.layout.off_logit_rows)),
            Arg::Ptr(out.ptr),
            Arg::I32(x.cols as i32),
        ];
        self.launch(
            self.kernels.gather_rows,
            (l as u32, 1, 1),
            256,
            &args,
            "gather_rows",
        );
        out
    }
}
