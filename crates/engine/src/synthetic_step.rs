//! Steps the engine makes up itself, outside serving — start-up calibration
//! (`k_policy/calibrate.rs`) and `--warm-up` (`warm_up.rs`): their K/V blocks taken from
//! and given back to the pool, their token ids arbitrary, run as greedy serving runs them.

use wring_model::runner::{ModelRunner, SeqInput, StepInput};

use crate::block_manager::BlockManager;

/// A sequence of a synthetic step: `query_len` new tokens after the step's shared context,
/// every one a logit row (`all_logits`: decode or verify rows) or only the last (a chunk).
#[derive(Debug, Clone, Copy)]
pub struct SyntheticSeq {
    pub query_len: usize,
    pub all_logits: bool,
}

/// Block tables for `seqs` after `context` cached tokens each, or None (and nothing
/// kept) when the pool cannot hold them all at once.
pub fn allocate(
    blocks: &mut BlockManager,
    seqs: &[SyntheticSeq],
    context: usize,
) -> Option<Vec<Vec<u32>>> {
    let mut tables = Vec::with_capacity(seqs.len());
    for s in seqs {
        let mut t = Vec::new();
        if !blocks.allocate(&mut t, context + s.query_len) {
            free(blocks, tables);
            return None;
        }
        tables.push(t);
    }
    Some(tables)
}

pub fn free(blocks: &mut BlockManager, tables: Vec<Vec<u32>>) {
    for mut t in tables {
        blocks.free_all(&mut t);
    }
}

/// The step: sequence i's tokens `(1 + 31 i + 7 j) % vocab` at positions
/// `context..context + query_len`, in `tables[i]`.
pub fn step(seqs: &[SyntheticSeq], context: usize, tables: &[Vec<u32>], vocab: u32) -> StepInput {
    let mut step = StepInput::default();
    for (i, (s, t)) in seqs.iter().zip(tables).enumerate() {
        let (start, q) = (step.tokens.len(), s.query_len);
        step.tokens
            .extend((0..q as u32).map(|j| (1 + i as u32 * 31 + j * 7) % vocab));
        step.positions.extend(context as u32..(context + q) as u32);
        if s.all_logits {
            step.logit_rows.extend(start..start + q);
        } else {
            step.logit_rows.push(start + q - 1);
        }
        step.seqs.push(SeqInput {
            query_start: start,
            query_len: q,
            context_len: context + q,
            block_table: t.clone(),
            prompt_len: 0,
        });
    }
    step
}

/// One step the way greedy serving runs it: ids only where the runner can (the engine
/// uses `forward_greedy` for all-greedy steps), whole logit rows otherwise.
pub fn run(runner: &mut dyn ModelRunner, step: &StepInput) -> anyhow::Result<()> {
    if runner.forward_greedy(step)?.is_none() {
        runner.forward(step)?;
    }
    Ok(())
}
