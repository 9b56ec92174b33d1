//! Tensor parallelism on the CPU backend: N ranks as threads of this process, their
//! all-reduces through host memory in a fixed rank order (`wring_backend::cpu::host_comm`).
//! It computes what the GPU ranks compute, where CI can run it; it is no faster than one
//! rank (the ranks share the same cores).

use crate::tensor_parallel::{step_timeout, RankBuilder, TensorParallelRunner};
use anyhow::Result;
use std::sync::Arc;
use wring_backend::cpu::host_comm::HostComm;
use wring_backend::cpu::CpuBackend;
use wring_model::shard::ShardPlan;
use wring_model::{LoadedModel, ModelRunner, RunnerOptions, ShardRunner};

/// The model split over `opts.tensor_parallel_size` CPU ranks.
pub fn cpu_tensor_parallel(
    model: LoadedModel,
    opts: &RunnerOptions,
) -> Result<TensorParallelRunner> {
    let n = opts.tensor_parallel_size;
    let shards = ShardPlan::all(&model.config, n)?;
    let num_blocks = model.kv_blocks(opts)?;
    let weights = model.cpu_weights(opts.cpu_weights);
    let block_size = opts.block_size;
    let shared = Arc::new(model.into_weights());
    let timeout = step_timeout()?;
    let (comms, abort) = HostComm::group(n, timeout);
    let builders = comms
        .into_iter()
        .zip(shards)
        .map(|(comm, shard)| {
            let shared = shared.clone();
            Box::new(move || -> Result<Box<dyn ShardRunner>> {
                let backend = CpuBackend::with_comm(weights, comm);
                Ok(Box::new(
                    shared.rank_runner(backend, shard, num_blocks, block_size)?,
                ))
            }) as RankBuilder
        })
        .collect();
    TensorParallelRunner::start(
        builders,
        Arc::new(move |why: &str| abort.abort(why)),
        timeout,
    )
}

/// Boxed for `open_runner`.
pub fn cpu_runner(model: LoadedModel, opts: &RunnerOptions) -> Result<Box<dyn ModelRunner>> {
    Ok(Box::new(cpu_tensor_parallel(model, opts)?))
}
