//! `--warm-up`: before serving, every step shape the runner names
//! (`ModelRunner::warm_up_steps`: on CUDA its graph keys and eager token buckets) runs three
//! times — first sighting, capture, first replay on a graph backend — so the first requests
//! do not pay for captures and per-shape set-up (results/2026-12-04-chunk-graphs: a fresh server's
//! eager prompt steps cost 5.3 ms against 2.5 ms in a second pass). The steps use real K/V blocks
//! from the pool, freed after; nothing reaches the drafter, the metrics or the prefix cache.

use std::time::Instant;

use wring_model::runner::ModelRunner;

use crate::block_manager::BlockManager;
use crate::spec_decode::{KPolicy, SpecConfig};
use crate::synthetic_step::{self, SyntheticSeq};

/// Runs of each shape: eager first sighting, capture, replay.
const RUNS: usize = 3;

/// What a warm-up did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmUpReport {
    pub shapes: usize,
    pub steps: usize,
    /// Shapes the KV pool could not hold at once.
    pub skipped: usize,
    pub seconds: f64,
}

/// Query lengths the engine's rows will have: 1 without speculation; 1 and 1 + K for a
/// fixed padded K; every captured length for policies that move K.
pub fn query_lens(spec: &SpecConfig, runner: &dyn ModelRunner) -> Vec<usize> {
    match (&spec.k_policy, spec.enabled(), spec.pad) {
        (_, false, _) => vec![1],
        (KPolicy::Fixed(k), true, true) => vec![1, 1 + k],
        _ => runner.captured_query_lens().unwrap_or_else(|| vec![1]),
    }
}

pub fn warm_up(
    runner: &mut dyn ModelRunner,
    blocks: &mut BlockManager,
    query_lens: &[usize],
    max_seqs: usize,
    max_tokens: usize,
) -> anyhow::Result<WarmUpReport> {
    let t0 = Instant::now();
    let shapes = runner.warm_up_steps(query_lens, max_seqs, max_tokens);
    let vocab = runner.vocab_size() as u32;
    let (mut steps, mut skipped) = (0, 0);
    for shape in &shapes {
        let rows = SyntheticSeq {
            query_len: shape.query_len,
            all_logits: true,
        };
        let chunk = SyntheticSeq {
            query_len: shape.chunk,
            all_logits: false,
        };
        let seqs: Vec<SyntheticSeq> = std::iter::repeat_n(rows, shape.rows)
            .chain((shape.chunk > 0).then_some(chunk))
            .collect();
        let Some(tables) = synthetic_step::allocate(blocks, &seqs, 0) else {
            skipped += 1;
            continue;
        };
        let step = synthetic_step::step(&seqs, 0, &tables, vocab);
        for _ in 0..RUNS {
            synthetic_step::run(runner, &step)?;
            steps += 1;
        }
        synthetic_step::free(blocks, tables);
    }
    Ok(WarmUpReport {
        shapes: shapes.len(),
        steps,
        skipped,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
