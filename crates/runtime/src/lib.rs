//! Opens the device a model runs on and builds its [`ModelRunner`]: the CPU backend
//! (`wring-backend`) or a CUDA GPU (`wring-cuda`, settings from `WRING_CUDA_*`, and the weight
//! format from [`RunnerOptions::gpu_weights`] where the caller gives one); and says what this
//! machine's CPU can run ([`cpu_bf16_attention_available`]).
//!
//! This is the one crate that knows every backend; `wring-model` stays generic over
//! `Backend` and never links a GPU library, so the dependency arrows point downward:
//! engine → runtime → {model, cuda} → backend.

pub mod cpu_ranks;
#[cfg(feature = "cuda")]
pub mod cuda_ranks;
pub mod tensor_parallel;

use anyhow::{ensure, Result};
use wring_model::{Device, LoadedModel, ModelRunner, RunnerOptions};

pub use tensor_parallel::TensorParallelRunner;

/// The model's runner on `opts.device`, its KV pool sized from the memory budget; split
/// over `opts.tensor_parallel_size` ranks (GPUs `N..N+size`, or CPU threads) when > 1.
pub fn open_runner(model: LoadedModel, opts: &RunnerOptions) -> Result<Box<dyn ModelRunner>> {
    ensure!(
        opts.tensor_parallel_size >= 1,
        "the tensor-parallel size must be at least 1"
    );
    #[cfg(feature = "cuda")]
    if let Device::Cuda(_) = opts.device {
        // Before the device is opened: a model it cannot run is refused in words.
        let cuda = cuda_ranks::cuda_options(opts)?;
        model
            .config
            .refuse_unsupported("cuda", |op| wring_cuda::CudaBackend::runs(&cuda, op))?;
    }
    match (opts.device, opts.tensor_parallel_size) {
        (Device::Cpu, 1) => model.into_runner(opts),
        (Device::Cpu, _) => cpu_ranks::cpu_runner(model, opts),
        (Device::Cuda(ordinal), 1) => cuda_runner(model, ordinal, opts),
        (Device::Cuda(ordinal), _) => cuda_tensor_parallel(model, ordinal, opts),
    }
}

/// Whether this CPU runs prompt attention in bf16 on AMX tiles, what
/// `--cpu-prefill-attention bf16` needs (`WRING_CPU_AMX=0` turns the tiles off).
pub fn cpu_bf16_attention_available() -> bool {
    wring_backend::cpu::attention_amx::available()
}

#[cfg(feature = "cuda")]
fn cuda_runner(
    model: LoadedModel,
    ordinal: usize,
    opts: &RunnerOptions,
) -> Result<Box<dyn ModelRunner>> {
    let backend = wring_cuda::CudaBackend::new(ordinal, cuda_ranks::cuda_options(opts)?)?;
    model.runner_on(backend, opts)
}

#[cfg(feature = "cuda")]
fn cuda_tensor_parallel(
    model: LoadedModel,
    first_ordinal: usize,
    opts: &RunnerOptions,
) -> Result<Box<dyn ModelRunner>> {
    Ok(Box::new(cuda_ranks::cuda_tensor_parallel(
        model,
        first_ordinal,
        opts,
    )?))
}

#[cfg(not(feature = "cuda"))]
fn cuda_tensor_parallel(
    model: LoadedModel,
    ordinal: usize,
    opts: &RunnerOptions,
) -> Result<Box<dyn ModelRunner>> {
    cuda_runner(model, ordinal, opts)
}

#[cfg(not(feature = "cuda"))]
fn cuda_runner(_: LoadedModel, _: usize, _: &RunnerOptions) -> Result<Box<dyn ModelRunner>> {
    anyhow::bail!(
        "this build of wring has no CUDA support (feature `cuda` of wring-runtime); use --device cpu"
    )
}
