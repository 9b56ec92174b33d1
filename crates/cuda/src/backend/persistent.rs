//! The persistent step kernel (kernels/persistent.cu, `WRING_CUDA_PERSISTENT=on|auto`): while a
//! step of at most 8 tokens on the bf16 gemv path with the fused norm is captured into a
//! graph, the launches it supports (the gemv forms of that step's token bucket and the
//! default decode attention build) are not launched but recorded; a run of them becomes one
//! launch of the persistent kernel, which walks the recorded ops in device memory with a
//! grid barrier between ops. Any other stream work (another kernel, cuBLAS, a copy, the end
//! of the capture) first flushes the run, so the order of the step's work never changes. A
//! run is uploaded once, after its capture ends and before the graph's first replay (no
//! synchronous copy may run while a stream is captured); eager steps launch as before.

use super::CudaBackend;
use crate::device::{launch_params, launch_struct_smem, DeviceBuffer};
use crate::kernels::PERSISTENT_ATTENTION_KIND as KIND_ATTENTION;
use crate::options::PersistentMode;
use crate::params::{persistent_smem_bytes, AttnArgs, GemvArgs, GEMV_BUCKETS};
use crate::persistent::{
    program_bytes, OpArgs, Persistent, PersistentOp, Recorded, Recording, POOL_BYTES,
};
use anyhow::anyhow;
use cudarc::driver::{result, sys};
use std::ffi::c_void;

impl CudaBackend {
    /// At the start of a capture: record this step when its path takes the persistent
    /// kernel (`step_path.rs` gives it only to dense gemv with the fused norm, never on a
    /// tensor-parallel rank) and a build fits its token bucket and head size.
    pub(super) fn persistent_begin(&mut self) {
        if !self.path.persistent {
            return;
        }
        let Some(bucket) = GEMV_BUCKETS
            .iter()
            .position(|&b| self.layout.tokens >= 1 && self.layout.tokens <= b)
        else {
            return;
        };
        let Some(head_dim) = self.kv.as_ref().map(|kv| kv.spec.head_dim) else {
            return;
        };
        if self.kernels.persistent(head_dim, bucket).is_none() {
            return;
        }
        if self.persistent.is_none() {
            match DeviceBuffer::alloc(POOL_BYTES, "persistent step programs") {
                Ok(pool) => {
                    self.persistent = Some(Persistent {
                        pool,
                        used: 0,
                        recording: None,
                        uploads: vec![],
                        launches: 0,
                        fused_ops: 0,
                    })
                }
                Err(e) => {
                    tracing::warn!("persistent step kernel off: {e:#}");
                    self.opts.persistent = PersistentMode::Off;
                    return;
                }
            }
        }
        if let Some(p) = self.persistent.as_mut() {
            p.recording = Some(Recording {
                bucket,
                head_dim,
                ops: vec![],
            });
        }
    }

    /// Records the launch of `f` when a capture records and the persistent kernel runs it;
    /// false: the caller launches it (after the run recorded so far, flushed here).
    pub(super) fn persistent_record<T: Copy>(
        &mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        smem: u32,
        args: &T,
    ) -> bool {
        let Some(rec) = self.persistent.as_ref().and_then(|p| p.recording.as_ref()) else {
            return false;
        };
        let kind = self.kernels.persistent_kind(f, rec.head_dim, rec.bucket);
        let size_ok = match kind {
            Some(KIND_ATTENTION) => std::mem::size_of::<T>() == std::mem::size_of::<AttnArgs>(),
            Some(_) => std::mem::size_of::<T>() == std::mem::size_of::<GemvArgs>(),
            None => false,
        };
        let (Some(kind), true, 0) = (kind, size_ok, smem) else {
            self.persistent_flush();
            return false;
        };
        // SAFETY: zeroed plain data, then the caller's struct (checked to be the kernel's
        // argument type by size and kernel) copied over its start.
        let mut op = PersistentOp {
            kind,
            grid: [grid.0, grid.1, grid.2],
            args: unsafe { std::mem::zeroed() },
        };
        unsafe {
            std::ptr::copy_nonoverlapping(
                args as *const T as *const u8,
                &mut op.args as *mut OpArgs as *mut u8,
                std::mem::size_of::<T>(),
            );
        }
        if let Some(rec) = self.persistent.as_mut().and_then(|p| p.recording.as_mut()) {
            rec.ops.push(Recorded { f, op });
        }
        true
    }

    /// Launches the run recorded so far: one persistent launch (a barrier counter zeroed
    /// first), or the one recorded kernel as itself.
    pub(super) fn persistent_flush(&mut self) {
        let Some(p) = self.persistent.as_mut() else {
            return;
        };
        let Some(rec) = p.recording.as_mut() else {
            return;
        };
        if rec.ops.is_empty() {
            return;
        }
        let ops = std::mem::take(&mut rec.ops);
        let (bucket, head_dim) = (rec.bucket, rec.head_dim);
        let bytes = program_bytes(&ops);
        let need = bytes.len().div_ceil(256) * 256 + 256;
        let stream = self.stream.cu_stream();
        let f = self.kernels.persistent(head_dim, bucket);
        if ops.len() < 2 || p.used + need > POOL_BYTES || f.is_none() {
            for r in &ops {
                let grid = (r.op.grid[0], r.op.grid[1], r.op.grid[2]);
                // SAFETY: the union member the kernel reads (chosen by its kind).
                let res = unsafe {
                    if r.op.kind == KIND_ATTENTION {
                        launch_struct_smem(
                            r.f,
                            grid,
                            128,
                            0,
                            stream,
                            &r.op.args.attention,
                            self.opts.pdl,
                        )
                    } else {
                        launch_struct_smem(
                            r.f,
                            grid,
                            128,
                            0,
                            stream,
                            &r.op.args.gemv,
                            self.opts.pdl,
                        )
                    }
                };
                if let Err(e) = res {
                    self.fail(anyhow!("launching a recorded kernel failed: {e:?}"));
                    return;
                }
            }
            return;
        }
        let f = f.expect("checked above");
        let program = p.pool.ptr() + p.used as u64;
        let barrier = program + (need - 256) as u64;
        p.used += need;
        p.uploads.push((program, bytes));
        p.launches += 1;
        p.fused_ops += ops.len() as u64;
        let mut n_ops = ops.len() as i32;
        let (mut prog_arg, mut bar_arg) = (program, barrier);
        let grid = (self.sm_count as u32, 1, 1);
        let smem = persistent_smem_bytes(GEMV_BUCKETS[bucket]) as u32;
        // SAFETY: the counter lies in the pool; the parameters match persistent_t*_d*'s
        // (const PkOp*, int, u32*) and live until the driver has copied them.
        let res = unsafe {
            result::memset_d8_async(barrier, 0, 4, stream).and_then(|()| {
                let mut params = [
                    &mut prog_arg as *mut u64 as *mut c_void,
                    &mut n_ops as *mut i32 as *mut c_void,
                    &mut bar_arg as *mut u64 as *mut c_void,
                ];
                launch_params(f, grid, 128, smem, stream, &mut params, self.opts.pdl)
            })
        };
        if let Err(e) = res {
            self.fail(anyhow!(
                "launching the persistent step kernel failed: {e:?}"
            ));
        }
    }

    /// At the end of a capture: the last run launched, recording stopped; the programs its
    /// launches read, for [`upload`] once the capture has ended.
    pub(super) fn persistent_end_recording(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.persistent_flush();
        match self.persistent.as_mut() {
            Some(p) => {
                p.recording = None;
                std::mem::take(&mut p.uploads)
            }
            None => vec![],
        }
    }

    /// The graphs holding programs were dropped: the pool is free again.
    pub(super) fn persistent_reset(&mut self) {
        if let Some(p) = self.persistent.as_mut() {
            p.used = 0;
            p.uploads.clear();
        }
    }

    /// (persistent launches, ops they run) so far.
    pub fn persistent_counts(&self) -> (u64, u64) {
        self.persistent
            .as_ref()
            .map_or((0, 0), |p| (p.launches, p.fused_ops))
    }
}
