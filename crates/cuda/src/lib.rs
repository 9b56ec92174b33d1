//! The CUDA backend of wring for NVIDIA GPUs (tuned for Hopper): bf16 weights (or
//! quantized: FP8 W8A8 via cuBLASLt, int4/NVFP4 weight-only, see [`qweights`]), an
//! activation arena, a paged bf16 KV pool, kernels compiled at run time by NVRTC,
//! cuBLAS GEMMs and CUDA graphs for uniform decode/verify steps.
//!
//! Everything CUDA is loaded at run time (cudarc `dynamic-loading`): this crate builds
//! and links on machines without CUDA, and [`CudaBackend::new`] returns an error, not a
//! panic, when the driver or libraries are missing.

mod arena;
mod backend;
mod blas;
mod blaslt;
mod device;
mod gemm;
mod graphs;
pub mod kernels;
mod loader;
mod meta;
pub mod nccl;
pub mod nccl_bench;
mod options;
mod params;
mod persistent;
pub mod qweights;
mod warm_up;

pub use backend::{
    measure_copy_bandwidth, CudaBackend, CudaMatrix, CudaTensor, CudaVector, SmallStepChoice,
};
pub use blas::GemmTuneReport;
pub use graphs::GraphKey;
pub use loader::{ensure_cuda_libraries, ensure_nvrtc};
pub use options::{
    AttentionKernel, CudaOptions, GraphMode, MmaSplits, MultiGemvPath, PersistentMode,
    SmallStepPath, DEFAULT_SMALL_LINEAR_MAX_T,
};
pub use params::GEMV_4BIT_LIMIT;

/// CUDA devices present (0 when the driver is missing or sees none).
pub fn device_count() -> anyhow::Result<usize> {
    loader::ensure_cuda_libraries()?;
    let n = cudarc::driver::CudaContext::device_count()
        .map_err(|e| anyhow::anyhow!("cannot count the CUDA devices: {e:?}"))?;
    Ok(n.max(0) as usize)
}

/// Starts (`true`) or stops the CUDA profiler's collection (`ncu --profile-from-start off`
/// records only in between), on the calling thread's current context.
pub fn set_profiler(on: bool) {
    // SAFETY: plain driver calls; a failure only means no profiler is attached.
    unsafe {
        if on {
            cudarc::driver::sys::cuProfilerStart();
        } else {
            cudarc::driver::sys::cuProfilerStop();
        }
    }
}
