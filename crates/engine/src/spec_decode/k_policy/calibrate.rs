//! Start-up measurement of verify-step cost on the actual runner, for the
//! adaptive K policy's step-cost model.

use std::time::Instant;

use wring_model::runner::{ModelRunner, SeqInput, StepInput};

use crate::block_manager::BlockManager;

/// K values timed: none, the largest candidate and the one nearest a third of it
/// (0, 4, 12 for the CPU's candidates), so every timed shape is one the runner has
/// captured when it captures any.
pub fn calibration_ks(candidates: &[usize]) -> Vec<usize> {
    let max = candidates.iter().copied().max().unwrap_or(0);
    let third = candidates
        .iter()
        .copied()
        .min_by_key(|&k| (3 * k).abs_diff(max))
        .unwrap_or(0);
    let mut ks = vec![0, third, max];
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// Batch sizes timed: 1, a quarter, a half and all of `max_num_seqs`.
fn batch_sizes(max_num_seqs: usize) -> Vec<usize> {
    let mut v = vec![
        1,
        (max_num_seqs / 4).max(1),
        (max_num_seqs / 2).max(1),
        max_num_seqs,
    ];
    v.sort_unstable();
    v.dedup();
    v
}

/// Times one verify-shaped step (every sequence 1 + K query rows, logits for all
/// of them) per (batch size, K); returns (B, rows, seconds), best of two runs.
pub fn measure_step_costs(
    runner: &mut dyn ModelRunner,
    blocks: &mut BlockManager,
    max_num_seqs: usize,
    ks: &[usize],
) -> anyhow::Result<Vec<(usize, usize, f64)>> {
    let vocab = runner.vocab_size() as u32;
    let mut points = Vec::new();
    let sizes = batch_sizes(max_num_seqs);
    let mut first = true;
    let on_gpu = runner.device_name() != "cpu";
    for &b in &sizes {
        for &k in ks {
            let q = 1 + k;
            let mut tables = Vec::with_capacity(b);
            for _ in 0..b {
                let mut t = Vec::new();
                if !blocks.allocate(&mut t, q) {
                    anyhow::bail!("KV pool too small to calibrate {b} sequences of {q} tokens");
                }
                tables.push(t);
            }
            let mut step = StepInput::default();
            for (i, t) in tables.iter().enumerate() {
                let start = step.tokens.len();
                step.tokens
                    .extend((0..q as u32).map(|j| (1 + i as u32 * 31 + j * 7) % vocab));
                step.positions.extend(0..q as u32);
                step.logit_rows.extend(start..start + q);
                step.seqs.push(SeqInput {
                    query_start: start,
                    query_len: q,
                    context_len: q,
                    block_table: t.clone(),
                });
            }
            // Warm-up: the first step pays one-time costs; on a GPU (graph capture)
            // a shape runs eagerly once, is captured the second time, replays after.
            let warmups = usize::from(first) + if on_gpu { 2 } else { 0 };
            first = false;
            for _ in 0..warmups {
                run_step(runner, &step)?;
            }
            let mut best = f64::INFINITY;
            for _ in 0..2 {
                let t0 = Instant::now();
                run_step(runner, &step)?;
                best = best.min(t0.elapsed().as_secs_f64());
            }
            points.push((b, b * q, best));
            for mut t in tables {
                blocks.free_all(&mut t);
            }
        }
    }
    Ok(points)
}

/// One step the way greedy serving runs it: ids only where the runner can (the engine
/// uses `forward_greedy` for all-greedy steps), whole logit rows otherwise.
fn run_step(runner: &mut dyn ModelRunner, step: &StepInput) -> anyhow::Result<()> {
    if runner.forward_greedy(step)?.is_none() {
        runner.forward(step)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_cover_the_range_without_duplicates() {
        assert_eq!(batch_sizes(32), vec![1, 8, 16, 32]);
        assert_eq!(batch_sizes(1), vec![1]);
        assert_eq!(batch_sizes(3), vec![1, 3]);
    }

    #[test]
    fn calibration_ks_are_candidates_spanning_the_range() {
        assert_eq!(calibration_ks(&[0, 1, 4, 6, 8, 12]), vec![0, 4, 12]);
        assert_eq!(calibration_ks(&[0, 1, 4, 8]), vec![0, 4, 8]);
        assert_eq!(calibration_ks(&[0, 1]), vec![0, 1]);
        assert_eq!(calibration_ks(&[0]), vec![0]);
    }
}
