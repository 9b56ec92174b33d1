//! Opens the device a model runs on and builds its [`ModelRunner`]: the CPU backend
//! (`wring-backend`) or a CUDA GPU (`wring-cuda`, settings from `WRING_CUDA_*`).
//!
//! This is the one crate that knows every backend; `wring-model` stays generic over
//! `Backend` and never links a GPU library, so the dependency arrows point downward:
//! engine → runtime → {model, cuda} → backend.

use anyhow::Result;
use wring_model::{Device, LoadedModel, ModelRunner, RunnerOptions};

/// The model's runner on `opts.device`, its KV pool sized from the memory budget.
pub fn open_runner(model: LoadedModel, opts: &RunnerOptions) -> Result<Box<dyn ModelRunner>> {
    match opts.device {
        Device::Cpu => model.into_runner(opts),
        Device::Cuda(ordinal) => cuda_runner(model, ordinal, opts),
    }
}

#[cfg(feature = "cuda")]
fn cuda_runner(
    model: LoadedModel,
    ordinal: usize,
    opts: &RunnerOptions,
) -> Result<Box<dyn ModelRunner>> {
    let cuda = wring_cuda::CudaOptions::from_env()?;
    let backend = wring_cuda::CudaBackend::new(ordinal, cuda)?;
    model.runner_on(backend, opts)
}

#[cfg(not(feature = "cuda"))]
fn cuda_runner(_: LoadedModel, _: usize, _: &RunnerOptions) -> Result<Box<dyn ModelRunner>> {
    anyhow::bail!(
        "this build of wring has no CUDA support (feature `cuda` of wring-runtime); use --device cpu"
    )
}
