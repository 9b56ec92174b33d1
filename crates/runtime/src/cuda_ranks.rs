//! Tensor parallelism on CUDA: rank i on GPU `first + i`, each a `CudaBackend` with its
//! own stream and NCCL communicator (all created here by `ncclCommInitAll`), driven by a
//! [`TensorParallelRunner`]. The all-reduces run on each rank's stream, so the CUDA
//! graphs every rank captures per (batch bucket, query length) contain them; every rank
//! sees the same steps, so they capture and replay the same graphs in the same order.

use crate::tensor_parallel::{step_timeout, RankBuilder, TensorParallelRunner};
use anyhow::{ensure, Context, Result};
use std::sync::Arc;
use wring_cuda::{CudaBackend, CudaOptions};
use wring_model::shard::ShardPlan;
use wring_model::{LoadedModel, RunnerOptions, ShardRunner};

/// The model split over GPUs `first..first + opts.tensor_parallel_size`.
pub fn cuda_tensor_parallel(
    model: LoadedModel,
    first: usize,
    opts: &RunnerOptions,
) -> Result<TensorParallelRunner> {
    let n = opts.tensor_parallel_size;
    // Cheap checks first: the split itself, the GPUs, then NCCL.
    let shards = ShardPlan::all(&model.config, n)?;
    let present = wring_cuda::device_count()?;
    ensure!(
        first + n <= present,
        "--tensor-parallel-size {n} from cuda:{first} needs GPUs {first}..{} but {present} {} present",
        first + n - 1,
        if present == 1 { "is" } else { "are" }
    );
    let cuda = CudaOptions::from_env()?;
    let num_blocks = model.kv_blocks(opts)?;
    let block_size = opts.block_size;
    let ordinals: Vec<usize> = (first..first + n).collect();
    let comms = wring_cuda::nccl::init_group(&ordinals)
        .with_context(|| format!("cannot connect GPUs {ordinals:?} through NCCL"))?;
    if let Ok((path, v)) = wring_cuda::nccl::version() {
        tracing::info!("NCCL {v} ({path}): {n} ranks on GPUs {ordinals:?}, NCCL_NVLS_ENABLE=0");
    }
    let shared = Arc::new(model.into_weights());
    let abort = {
        let comms = comms.clone();
        Arc::new(move |why: &str| {
            tracing::error!("aborting the tensor-parallel group: {why}");
            comms.iter().for_each(|c| c.abort());
        })
    };
    let builders = comms
        .into_iter()
        .zip(shards)
        .map(|(comm, shard)| {
            let (shared, cuda) = (shared.clone(), cuda.clone());
            Box::new(move || -> Result<Box<dyn ShardRunner>> {
                let mut backend = CudaBackend::new(comm.ordinal(), cuda)?;
                backend.join_group(comm)?;
                Ok(Box::new(
                    shared.rank_runner(backend, shard, num_blocks, block_size)?,
                ))
            }) as RankBuilder
        })
        .collect();
    TensorParallelRunner::start(builders, abort, step_timeout()?)
}
