//! What drafted rows add to a decode step on the CPU: 32 sequences at 256 tokens of
//! context decode one token each, with 0, 1, 2 or 4 extra (draft) rows on the first
//! sequence, every row a logit row, run the way greedy serving runs them
//! (`forward_greedy`). Variants alternate step by step; medians of the step times.
//! `cargo run --release -p wring-model --example verify_bench [-- f32|q8 [STEPS]]`

use std::time::Instant;
use wring_model::{load_model, ModelSpec, RunnerOptions, SeqInput, StepInput};

fn main() -> anyhow::Result<()> {
    let cpu_weights = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "q8".into())
        .parse()?;
    let steps: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let m = load_model(&ModelSpec::default())?;
    let (bs, ctx, batch) = (16usize, 256usize, 32usize);
    let r = &mut *m.into_runner(&RunnerOptions {
        kv_cache_bytes: 1 << 30,
        max_model_len: 2048,
        cpu_weights,
        ..Default::default()
    })?;
    let blocks_per = (ctx + 16).div_ceil(bs);
    let tables: Vec<Vec<u32>> = (0..batch)
        .map(|b| ((b * blocks_per) as u32..((b + 1) * blocks_per) as u32).collect())
        .collect();
    // The contexts: one prefill step per sequence.
    for t in &tables {
        r.forward(&StepInput {
            tokens: (0..ctx as u32).map(|i| 100 + i % 1000).collect(),
            positions: (0..ctx as u32).collect(),
            seqs: vec![SeqInput {
                query_start: 0,
                query_len: ctx,
                context_len: ctx,
                block_table: t.clone(),
                prompt_len: ctx,
            }],
            logit_rows: vec![ctx - 1],
        })?;
    }
    let step_of = |extra: usize| {
        let mut step = StepInput::default();
        for (b, t) in tables.iter().enumerate() {
            let q = if b == 0 { 1 + extra } else { 1 };
            let start = step.tokens.len();
            step.seqs.push(SeqInput {
                query_start: start,
                query_len: q,
                context_len: ctx + q,
                block_table: t.clone(),
                prompt_len: ctx,
            });
            step.tokens.extend((0..q as u32).map(|j| 500 + j));
            step.positions.extend((ctx as u32)..(ctx + q) as u32);
            step.logit_rows.extend(start..start + q);
        }
        step
    };
    let extras = [0usize, 1, 2, 4];
    let inputs: Vec<StepInput> = extras.iter().map(|&e| step_of(e)).collect();
    let mut times = vec![Vec::new(); extras.len()];
    for s in 0..steps + 2 {
        for (i, input) in inputs.iter().enumerate() {
            let t0 = Instant::now();
            if r.forward_greedy(input)?.is_none() {
                r.forward(input)?;
            }
            if s >= 2 {
                times[i].push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    for (e, mut t) in extras.iter().zip(times) {
        t.sort_by(f64::total_cmp);
        println!(
            "{batch} sequences + {e} drafted rows: median {:.2} ms (min {:.2})",
            t[t.len() / 2],
            t[0]
        );
    }
    Ok(())
}
