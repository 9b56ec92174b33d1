//! Start-up measurement of verify-step cost on the actual runner, for the
//! adaptive K policy's step-cost model.

use std::time::Instant;

use wring_model::runner::ModelRunner;

use super::cost_model::StepShape;
use crate::block_manager::BlockManager;
use crate::synthetic_step::{self, SyntheticSeq};

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

/// Context length of the long-context probes: real decode rows attend to hundreds of
/// tokens, and a drafted row's attention is part of its price.
const LONG_CONTEXT: usize = 512;
/// Query tokens of the prefill-shaped probe (one logit row): separates a row's cost
/// from its LM head's.
const PREFILL_PROBE: usize = 128;

/// One timed step shape: `seqs` sequences of `q` query rows after `context` cached
/// tokens, logits for every row (`all_logits`) or for the last row of each sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Probe {
    seqs: usize,
    q: usize,
    context: usize,
    all_logits: bool,
}

impl Probe {
    fn shape(&self) -> StepShape {
        let one = StepShape::verify(self.context, self.q);
        let one = if self.all_logits {
            one
        } else {
            StepShape {
                logit_rows: 1.0,
                ..one
            }
        };
        let mut s = StepShape::default();
        for _ in 0..self.seqs {
            s = s.plus(one);
        }
        s
    }
}

/// The shapes timed: verify steps (every row with logits) at each batch size and K
/// from a fresh context; the same at [`LONG_CONTEXT`] for K = 0 and the largest K;
/// and one prefill chunk of [`PREFILL_PROBE`] tokens with one logit row.
fn probes(max_num_seqs: usize, ks: &[usize]) -> Vec<Probe> {
    let mut v = Vec::new();
    let kmax = ks.iter().copied().max().unwrap_or(0);
    for &b in &batch_sizes(max_num_seqs) {
        for &k in ks {
            v.push(Probe {
                seqs: b,
                q: 1 + k,
                context: 0,
                all_logits: true,
            });
        }
        for k in [0, kmax] {
            let p = Probe {
                seqs: b,
                q: 1 + k,
                context: LONG_CONTEXT,
                all_logits: true,
            };
            if !v.contains(&p) {
                v.push(p);
            }
        }
    }
    v.push(Probe {
        seqs: 1,
        q: PREFILL_PROBE,
        context: 0,
        all_logits: false,
    });
    v
}

/// Times each probe shape (best of two runs) on the runner; returns (shape, seconds).
/// A probe the KV pool cannot hold is skipped (the short verify probes must fit).
pub fn measure_step_costs(
    runner: &mut dyn ModelRunner,
    blocks: &mut BlockManager,
    max_num_seqs: usize,
    ks: &[usize],
) -> anyhow::Result<Vec<(StepShape, f64)>> {
    let vocab = runner.vocab_size() as u32;
    let mut points = Vec::new();
    let mut first = true;
    let on_gpu = runner.device_name() != "cpu";
    for probe in probes(max_num_seqs, ks) {
        let Probe {
            seqs: b,
            q,
            context,
            all_logits,
        } = probe;
        let seqs = vec![
            SyntheticSeq {
                query_len: q,
                all_logits
            };
            b
        ];
        let Some(tables) = synthetic_step::allocate(blocks, &seqs, context) else {
            if context == 0 && all_logits {
                anyhow::bail!("KV pool too small to calibrate {b} sequences of {q} tokens");
            }
            continue;
        };
        let step = synthetic_step::step(&seqs, context, &tables, vocab);
        // Warm-up: the first step pays one-time costs; on a GPU (graph capture)
        // a shape runs eagerly once, is captured the second time, replays after.
        let warmups = usize::from(first) + if on_gpu { 2 } else { 0 };
        first = false;
        for _ in 0..warmups {
            synthetic_step::run(runner, &step)?;
        }
        let mut best = f64::INFINITY;
        for _ in 0..2 {
            let t0 = Instant::now();
            synthetic_step::run(runner, &step)?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        points.push((probe.shape(), best));
        synthetic_step::free(blocks, tables);
    }
    Ok(points)
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
    fn probes_cover_every_term_of_the_cost_model() {
        let p = probes(32, &[0, 4, 12]);
        // 4 batch sizes x 3 K fresh, x 2 K at a long context, one prefill chunk.
        assert_eq!(p.len(), 4 * 3 + 4 * 2 + 1);
        assert!(p
            .iter()
            .any(|p| p.context == LONG_CONTEXT && p.q == 13 && p.seqs == 32));
        let prefill = p.iter().find(|p| !p.all_logits).unwrap();
        let s = prefill.shape();
        assert_eq!((s.rows, s.logit_rows), (PREFILL_PROBE as f64, 1.0));
        // A verify probe's attention: row j of q attends context + j + 1 keys.
        let v = Probe {
            seqs: 2,
            q: 3,
            context: 10,
            all_logits: true,
        }
        .shape();
        assert_eq!(v.attended, 2.0 * (11.0 + 12.0 + 13.0));
        assert_eq!(v.logit_rows, 6.0);
    }

    #[test]
    fn calibration_ks_are_candidates_spanning_the_range() {
        assert_eq!(calibration_ks(&[0, 1, 4, 6, 8, 12]), vec![0, 4, 12]);
        assert_eq!(calibration_ks(&[0, 1, 4, 8]), vec![0, 4, 8]);
        assert_eq!(calibration_ks(&[0, 1]), vec![0, 1]);
        assert_eq!(calibration_ks(&[0]), vec![0]);
    }
}
