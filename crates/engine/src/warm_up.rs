//! `--warm-up`: before serving, every step shape the runner names
//! (`ModelRunner::warm_up_steps`: on CUDA its graph keys and eager token buckets) runs three
//! times — first sighting, capture, first replay on a graph backend — so the first requests
//! do not pay for captures and per-shape set-up (BENCHMARKS, session 17: a fresh server's
//! eager prompt steps cost 5.3 ms against 2.5 ms in a second pass). The steps use real K/V blocks
//! from the pool, freed after; nothing reaches the drafter, the metrics or the prefix cache.

use std::time::Instant;

use wring_model::runner::{ModelRunner, SeqInput, StepInput, WarmUpStep};

use crate::block_manager::BlockManager;
use crate::config::{KPolicy, SpecConfig};

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
        let lens: Vec<usize> = std::iter::repeat_n(shape.query_len, shape.rows)
            .chain((shape.chunk > 0).then_some(shape.chunk))
            .collect();
        let mut tables = Vec::with_capacity(lens.len());
        for &n in &lens {
            let mut t = Vec::new();
            if !blocks.allocate(&mut t, n) {
                break;
            }
            tables.push(t);
        }
        if tables.len() == lens.len() {
            let step = step_of(shape, &lens, &tables, vocab);
            for _ in 0..RUNS {
                if runner.forward_greedy(&step)?.is_none() {
                    runner.forward(&step)?;
                }
                steps += 1;
            }
        } else {
            skipped += 1;
        }
        for mut t in tables {
            blocks.free_all(&mut t);
        }
    }
    Ok(WarmUpReport {
        shapes: shapes.len(),
        steps,
        skipped,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Sequences at position 0 with the logit rows serving asks for: every token of a
/// decode/verify row, the last token of the chunk.
fn step_of(shape: &WarmUpStep, lens: &[usize], tables: &[Vec<u32>], vocab: u32) -> StepInput {
    let mut s = StepInput::default();
    for (i, (&q, t)) in lens.iter().zip(tables).enumerate() {
        let start = s.tokens.len();
        s.tokens
            .extend((0..q as u32).map(|j| (1 + 31 * i as u32 + 7 * j) % vocab));
        s.positions.extend(0..q as u32);
        if i < shape.rows {
            s.logit_rows.extend(start..start + q);
        } else {
            s.logit_rows.push(start + q - 1);
        }
        s.seqs.push(SeqInput {
            query_start: start,
            query_len: q,
            context_len: q,
            block_table: t.clone(),
        });
    }
    s
}
