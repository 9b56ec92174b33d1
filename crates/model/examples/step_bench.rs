//! Forward-step timing of a model on the CPU: prefill and decode at several batch sizes.
//! `cargo run --release -p wring-model --example step_bench [-- f32|q8 [MODEL]]`

use std::time::Instant;
use wring_model::{load_model, ModelSpec, RunnerOptions, SeqInput, StepInput};

fn main() -> anyhow::Result<()> {
    let cpu_weights = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "f32".into())
        .parse()?;
    let model = std::env::args().nth(2);
    let m = load_model(&ModelSpec {
        model,
        ..Default::default()
    })?;
    let bs = 16;
    let r = &mut *m.into_runner(&RunnerOptions {
        kv_cache_bytes: 3 << 30,
        max_model_len: 2048,
        cpu_weights,
        ..Default::default()
    })?;
    let ctx = 256usize;
    for batch in [1usize, 8, 32] {
        // Prefill `batch` sequences of `ctx` tokens, one step each, then decode steps together.
        let blocks_per = (ctx + 64).div_ceil(bs);
        let tables: Vec<Vec<u32>> = (0..batch)
            .map(|b| ((b * blocks_per) as u32..((b + 1) * blocks_per) as u32).collect())
            .collect();
        let t0 = Instant::now();
        for t in &tables {
            let step = StepInput {
                tokens: (0..ctx as u32).map(|i| 100 + i % 1000).collect(),
                positions: (0..ctx as u32).collect(),
                seqs: vec![SeqInput {
                    query_start: 0,
                    query_len: ctx,
                    context_len: ctx,
                    block_table: t.clone(),
                    prompt_len: 0,
                }],
                logit_rows: vec![ctx - 1],
            };
            r.forward(&step)?;
        }
        let prefill = t0.elapsed().as_secs_f64();
        let steps = 8;
        let t1 = Instant::now();
        for s in 0..steps {
            let mut step = StepInput::default();
            for (b, t) in tables.iter().enumerate() {
                step.seqs.push(SeqInput {
                    query_start: b,
                    query_len: 1,
                    context_len: ctx + s + 1,
                    block_table: t.clone(),
                    prompt_len: 0,
                });
                step.tokens.push(500);
                step.positions.push((ctx + s) as u32);
                step.logit_rows.push(b);
            }
            r.forward(&step)?;
        }
        let per = t1.elapsed().as_secs_f64() / steps as f64;
        println!(
            "batch {batch:2}: prefill {:.0} tok/s, decode step {:.1} ms = {:.0} tok/s",
            (batch * ctx) as f64 / prefill,
            per * 1e3,
            batch as f64 / per
        );
    }
    Ok(())
}
