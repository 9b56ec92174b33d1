//! The all-reduce time of one tensor-parallel step, measured on its own: each rank's
//! step makes `per_step` in-place sums of its `[tokens][hidden]` f32 activations (2 per
//! layer + the embedding's), recorded into a CUDA graph per rank as the model's steps
//! are, then replayed. What a step spends in collectives, next to its measured time.

use crate::device::DeviceBuffer;
use crate::nccl::{init_group, NcclComm};
use anyhow::{anyhow, Result};
use cudarc::driver::{sys, CudaContext};
use std::sync::Arc;
use std::time::Instant;

/// Median seconds per replay of `per_step` all-reduces of `count` f32 over the GPUs in
/// `ordinals` (rank 0's host time from launch to completion, `reps` replays).
pub fn time_step_all_reduces(
    ordinals: &[usize],
    count: usize,
    per_step: usize,
    reps: usize,
) -> Result<f64> {
    crate::loader::ensure_cuda_libraries()?;
    let comms = init_group(ordinals)?;
    let threads: Vec<_> = comms
        .iter()
        .cloned()
        .map(|comm| {
            let all = comms.clone();
            std::thread::spawn(move || -> Result<f64> {
                let rank = comm.rank();
                let r = run_rank(comm, count, per_step, reps);
                if r.is_err() {
                    // The other ranks would wait for this one's collectives forever.
                    all.iter().for_each(|c| c.abort());
                }
                r.map_err(|e| e.context(format!("rank {rank}")))
            })
        })
        .collect();
    let mut rank0 = None;
    for (r, t) in threads.into_iter().enumerate() {
        let t = t
            .join()
            .map_err(|_| anyhow!("all-reduce test rank {r} panicked"))??;
        rank0.get_or_insert(t);
    }
    rank0.ok_or_else(|| anyhow!("no ranks"))
}

fn run_rank(comm: Arc<NcclComm>, count: usize, per_step: usize, reps: usize) -> Result<f64> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err| anyhow!("{what}: {err:?}")
    };
    let ctx = CudaContext::new(comm.ordinal()).map_err(e("cuda context"))?;
    ctx.bind_to_thread().map_err(e("bind"))?;
    // SAFETY: before any cudarc allocation on this context (raw buffers only).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(e("stream"))?;
    let buf = DeviceBuffer::alloc(4 * count, "all-reduce test")?;
    buf.zero(4 * count)?;
    let step = || -> Result<()> {
        for _ in 0..per_step {
            // SAFETY: buf holds count f32 on this GPU for the whole test; the
            // stream is this thread's.
            unsafe { comm.all_reduce_sum_f32(buf.ptr(), count, stream.cu_stream())? };
        }
        Ok(())
    };
    step()?; // eager once: connections and NCCL's own warm-up
    stream.synchronize().map_err(e("sync"))?;
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(e("begin capture"))?;
    let captured = step();
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(e("end capture"))?;
    captured?;
    let graph = graph.ok_or_else(|| anyhow!("the capture recorded no graph"))?;
    let mut times = Vec::with_capacity(reps);
    for i in 0..reps + 3 {
        let t0 = Instant::now();
        graph.launch().map_err(e("launch"))?;
        stream.synchronize().map_err(e("sync"))?;
        if i >= 3 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}
