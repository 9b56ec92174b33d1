//! The persistent step kernel's programs (kernels/persistent.cu): the recorded ops in the
//! layout the kernel reads, the device pool they live in, and their upload. What records
//! them and launches the kernel is `backend/persistent.rs`.

use crate::device::DeviceBuffer;
use crate::params::{AttnArgs, GemvArgs};
use anyhow::{anyhow, Result};
use cudarc::driver::{result, sys};

/// Device bytes for recorded programs and their barrier counters (allocated at the first
/// recording; 16k ops: a 135M decode step is 151).
pub(crate) const POOL_BYTES: usize = 4 << 20;

/// One recorded launch: kernels/persistent.cu's `PkOp`, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PersistentOp {
    pub(crate) kind: i32,
    pub(crate) grid: [u32; 3],
    pub(crate) args: OpArgs,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union OpArgs {
    pub(crate) gemv: GemvArgs,
    pub(crate) attention: AttnArgs,
}

/// A recorded op and the kernel it stands for (a run of one is launched as that kernel).
pub(crate) struct Recorded {
    pub(crate) f: sys::CUfunction,
    pub(crate) op: PersistentOp,
}

// SAFETY: kernel handles are context-wide (as in `Kernels`); one backend thread uses them.
unsafe impl Send for Recorded {}

/// What the step being captured records.
pub(crate) struct Recording {
    /// Index into `GEMV_BUCKETS` of the step's token bucket.
    pub(crate) bucket: usize,
    pub(crate) head_dim: usize,
    pub(crate) ops: Vec<Recorded>,
}

/// The backend's persistent-kernel state (present once a persistent step was recorded).
pub(crate) struct Persistent {
    pub(crate) pool: DeviceBuffer,
    pub(crate) used: usize,
    pub(crate) recording: Option<Recording>,
    /// (device address, bytes) of the programs recorded by the capture under way.
    pub(crate) uploads: Vec<(u64, Vec<u8>)>,
    /// Persistent launches recorded and the ops they hold (checks read them).
    pub(crate) launches: u64,
    pub(crate) fused_ops: u64,
}

/// Copies recorded programs to their places in the pool (after their capture has ended,
/// before the graph's first launch: a synchronous copy may not run during a capture).
pub(crate) fn upload(programs: Vec<(u64, Vec<u8>)>) -> Result<()> {
    for (ptr, bytes) in programs {
        // SAFETY: ptr .. ptr + len lies in the pool, which no queued work touches yet.
        unsafe { result::memcpy_htod_sync(ptr, &bytes) }
            .map_err(|e| anyhow!("uploading a persistent step program failed: {e:?}"))?;
    }
    Ok(())
}

/// The recorded program as the bytes the kernel reads.
pub(crate) fn program_bytes(ops: &[Recorded]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ops.len() * std::mem::size_of::<PersistentOp>());
    for r in ops {
        // SAFETY: PersistentOp is plain data (integers and pointers); every byte of a union
        // member shorter than the union is still a byte of this value (zeroed at recording).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                &r.op as *const PersistentOp as *const u8,
                std::mem::size_of::<PersistentOp>(),
            )
        };
        out.extend_from_slice(bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::PERSISTENT_ATTENTION_KIND as KIND_ATTENTION;
    use crate::params::{persistent_smem_bytes, GemvEpilogue, GEMV_BUCKETS};

    #[test]
    fn an_op_is_the_kernels_248_bytes_with_the_arguments_at_16() {
        // kernels/persistent.cu's PkOp: int kind, u32 grid[3], then the union (8-aligned).
        assert_eq!(std::mem::size_of::<PersistentOp>(), 248);
        assert_eq!(std::mem::offset_of!(PersistentOp, args), 16);
        assert!(std::mem::size_of::<AttnArgs>() <= std::mem::size_of::<GemvArgs>());
    }

    #[test]
    fn the_dynamic_shared_memory_is_the_gemvs_and_fits_48_kb() {
        for tb in GEMV_BUCKETS {
            assert!(
                persistent_smem_bytes(tb) <= 48 << 10,
                "bucket {tb}: {}",
                persistent_smem_bytes(tb)
            );
        }
        // GvSmem<GV_BF16, 1>: 1 x 1096 x 2 staged bytes + 8 stages x 4 warps x 2 rows x 32 lanes x 16.
        assert_eq!(persistent_smem_bytes(1), 2192 + 32768);
        assert_eq!(persistent_smem_bytes(8), 8 * 2192 + 24576);
    }

    #[test]
    fn gemv_epilogues_keep_the_kernels_kind_numbers() {
        // kernels/persistent.cu: PK_GEMV_STORE 0, PK_GEMV_SILU 1, PK_GEMV_QKV 2, PK_ATTENTION 3
        // (`Kernels::persistent_kind` returns the epilogue's number for a gemv).
        assert_eq!(GemvEpilogue::Store as i32, 0);
        assert_eq!(GemvEpilogue::Silu as i32, 1);
        assert_eq!(GemvEpilogue::Qkv as i32, 2);
        assert_eq!(KIND_ATTENTION, 3);
    }
}
