//! The CUDA backend's settings for a runner ([`cuda_options`]), and tensor parallelism on
//! CUDA: rank i on GPU `first + i`, each a `CudaBackend` with its
//! own stream and NCCL communicator (all created here by `ncclCommInitAll`), driven by a
//! [`TensorParallelRunner`]. The all-reduces run on each rank's stream, so the CUDA
//! graphs every rank captures per (batch bucket, query length) contain them; every rank
//! sees the same steps, so they capture and replay the same graphs in the same order.

use crate::tensor_parallel::{step_timeout, RankBuilder, TensorParallelRunner};
use anyhow::{ensure, Context, Result};
use std::sync::Arc;
use wring_cuda::{CudaBackend, CudaOptions};
use wring_model::shard::ShardPlan;
use wring_model::{KvPoolSize, LoadedModel, ModelWeights, RunnerOptions, ShardRunner};

/// The model split over GPUs `first..first + opts.tensor_parallel_size`.
pub fn cuda_tensor_parallel(
    model: LoadedModel,
    first: usize,
    opts: &RunnerOptions,
) -> Result<TensorParallelRunner> {
    // The split itself is checked before the GPUs are touched.
    ShardPlan::all(&model.config, opts.tensor_parallel_size)?;
    let kv = model.kv_pool_size(opts)?;
    cuda_ranks(
        Arc::new(model.into_weights()),
        first,
        opts.tensor_parallel_size,
        kv,
        opts.block_size,
        cuda_options(opts)?,
    )
}

/// The CUDA backend's settings for `opts`: `WRING_CUDA_*`, activations sized for the step
/// token cap, and `opts.gpu_weights` over `WRING_CUDA_WEIGHTS` where given.
pub fn cuda_options(opts: &RunnerOptions) -> Result<CudaOptions> {
    let cuda = CudaOptions::from_env()?.with_step_token_cap(opts.max_step_tokens);
    Ok(match &opts.gpu_weights {
        Some(w) => cuda.with_weights(wring_cuda::qweights::parse_weights(w)?),
        None => cuda,
    })
}

/// `weights` split over GPUs `first..first + n`, each rank with a KV pool of
/// `num_blocks` (for tools that build models without a tokenizer).
pub fn cuda_ranks(
    weights: Arc<ModelWeights>,
    first: usize,
    n: usize,
    num_blocks: impl Into<KvPoolSize>,
    block_size: usize,
    cuda: CudaOptions,
) -> Result<TensorParallelRunner> {
    let num_blocks = num_blocks.into();
    let shards = ShardPlan::all(&weights.config, n)?;
    let present = wring_cuda::device_count()?;
    ensure!(
        first + n <= present,
        "--tensor-parallel-size {n} from cuda:{first} needs GPUs {first}..{} but {present} {} present",
        first + n - 1,
        if present == 1 { "is" } else { "are" }
    );
    let ordinals: Vec<usize> = (first..first + n).collect();
    let comms = wring_cuda::nccl::init_group(&ordinals)
        .with_context(|| format!("cannot connect GPUs {ordinals:?} through NCCL"))?;
    if let Ok((path, v)) = wring_cuda::nccl::version() {
        tracing::info!("NCCL {v} ({path}): {n} ranks on GPUs {ordinals:?}, NCCL_NVLS_ENABLE=0");
    }
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
            let (weights, cuda) = (weights.clone(), cuda.clone());
            Box::new(move || -> Result<Box<dyn ShardRunner>> {
                let mut backend = CudaBackend::new(comm.ordinal(), cuda)?;
                backend.join_group(comm)?;
                Ok(Box::new(
                    weights.rank_runner(backend, shard, num_blocks, block_size)?,
                ))
            }) as RankBuilder
        })
        .collect();
    TensorParallelRunner::start(builders, abort, step_timeout()?)
}
