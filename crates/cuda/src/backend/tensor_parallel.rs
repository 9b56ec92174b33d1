//! The ops of a tensor-parallel rank: NCCL all-reduce on the backend's stream (so a
//! captured graph records it with the rest of the step), the vocabulary-shard
//! embedding, and the per-row (max, index) of this rank's logit slice.

use super::{CudaBackend, CudaMatrix, CudaTensor, DType, Weights};
use crate::device::{Arg, DeviceBuffer};
use crate::nccl::NcclComm;
use anyhow::{anyhow, ensure, Result};
use cudarc::driver::result;
use std::sync::Arc;

impl CudaBackend {
    /// Makes this backend a rank of `comm`'s group (before the first step). The
    /// communicator must be on this backend's GPU.
    pub fn join_group(&mut self, comm: Arc<NcclComm>) -> Result<()> {
        ensure!(
            comm.ordinal() == self.ctx.ordinal(),
            "rank {}'s NCCL communicator is on cuda:{}, its backend on cuda:{}",
            comm.rank(),
            comm.ordinal(),
            self.ctx.ordinal()
        );
        self.group = Some(comm);
        Ok(())
    }

    pub(super) fn group_ranks_op(&self) -> usize {
        self.group.as_ref().map_or(1, |c| c.ranks())
    }

    pub(super) fn all_reduce_op(&mut self, x: &mut CudaTensor) {
        let Some(comm) = self.group.clone() else {
            return;
        };
        if !self.expect(x, DType::F32, "all_reduce_sum") {
            return;
        }
        // Every row, padding included: the shape is the graph's, the same on every rank.
        // SAFETY: x is a live f32 activation of rows × cols on this backend's GPU; whatever
        // reuses its memory later runs after the sum (same stream), and the stream is this
        // backend's.
        let r = unsafe { comm.all_reduce_sum_f32(x.ptr, x.rows * x.cols, self.cu_stream()) };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    pub(super) fn embed_shard_op(&mut self, table: &CudaMatrix, first: usize) -> CudaTensor {
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
            Arg::I32(first as i32),
            Arg::I32(table.rows as i32),
        ];
        self.launch(
            self.kernels.embed_rows_shard,
            (t as u32, 1, 1),
            256,
            &args,
            "embed_rows_shard",
        );
        out
    }

    pub(super) fn max_rows_op(&mut self, logits: &CudaTensor) -> Option<Vec<(f32, u32)>> {
        if !self.expect(logits, DType::F32, "max_rows") {
            return Some(vec![]);
        }
        let rows = logits.valid_rows;
        if rows == 0 {
            return Some(vec![]);
        }
        let ptr = match self.pairs_buffer() {
            Ok(p) => p,
            Err(e) => {
                self.fail(e);
                return Some(vec![]);
            }
        };
        let args = [
            Arg::Ptr(logits.ptr),
            Arg::I32(logits.cols as i32),
            Arg::Ptr(ptr),
        ];
        self.launch(
            self.kernels.max_rows,
            (rows as u32, 1, 1),
            1024,
            &args,
            "max_rows",
        );
        if !self.ok() {
            return Some(vec![]);
        }
        let mut raw = vec![0u32; 2 * rows];
        let stream = self.cu_stream();
        // SAFETY: the buffer holds 2 × max_tokens u32 ≥ 2 × rows; synchronised before use.
        let copied = unsafe {
            result::memcpy_dtoh_async(&mut raw, ptr, stream)
                .and_then(|_| result::stream::synchronize(stream))
        };
        if let Err(e) = copied {
            self.fail(anyhow!("copying row maxima from the GPU failed: {e:?}"));
            return Some(vec![]);
        }
        Some(
            raw.chunks_exact(2)
                .map(|p| (f32::from_bits(p[1]), p[0]))
                .collect(),
        )
    }

    /// The device address of the (index, value) buffer, allocated at first use (outside
    /// any capture: `max_rows` runs after the step's graph).
    fn pairs_buffer(&mut self) -> Result<u64> {
        anyhow::ensure!(
            self.group.is_some(),
            "max_rows is a tensor-parallel rank's op"
        );
        if self.row_maxima.is_none() {
            let bytes = 8 * self.opts.max_tokens;
            self.row_maxima = Some(DeviceBuffer::alloc(bytes, "row maxima")?);
        }
        Ok(self.row_maxima.as_ref().expect("allocated above").ptr())
    }
}
