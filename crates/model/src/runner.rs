//! The interface between the engine and a loaded model: one forward step over a
//! batch of sequences whose KV lives in a paged block pool owned by the runner.

pub use wring_backend::{Logits, RowMasks, SeqInput, StepInput, WarmUpStep};

/// How large a runner's KV pool is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvPoolSize {
    /// Exactly this many blocks.
    Blocks(usize),
    /// What the device holds under `utilization` of its memory after the weights and a
    /// step's needs (`wring_backend::Backend::kv_blocks_for_memory`); at least `min_blocks`.
    DeviceShare { utilization: f32, min_blocks: usize },
}

impl From<usize> for KvPoolSize {
    fn from(blocks: usize) -> Self {
        KvPoolSize::Blocks(blocks)
    }
}

/// A model instance bound to a backend and a KV block pool.
pub trait ModelRunner: Send {
    /// Runs one forward step; KV for every new token is written into the blocks named
    /// by the sequences' block tables before attention reads it.
    fn forward(&mut self, step: &StepInput) -> anyhow::Result<Logits>;
    /// Tokens per KV block.
    fn block_size(&self) -> usize;
    /// Blocks in the pool (fixed at construction from the memory budget).
    fn num_blocks(&self) -> usize;
    /// Vocabulary size of the logits.
    fn vocab_size(&self) -> usize;
    /// Human-readable device name ("cpu", "cuda:0").
    fn device_name(&self) -> String;
    /// Greedy next-token ids of the step's logit rows without copying the logits back
    /// (the argmax runs on the device where the backend can). None: not supported, use
    /// `forward`.
    fn forward_greedy(&mut self, _step: &StepInput) -> anyhow::Result<Option<Vec<u32>>> {
        Ok(None)
    }
    /// [`ModelRunner::forward_greedy`] under structured output: `masks` is called once
    /// the step is under way (the grammar masks are computed beside it) and each masked
    /// row's id is its largest allowed logit. None: not supported (`masks` was not
    /// called), use `forward`.
    fn forward_greedy_masked(
        &mut self,
        _step: &StepInput,
        _masks: &mut dyn FnMut() -> anyhow::Result<RowMasks>,
    ) -> anyhow::Result<Option<Vec<u32>>> {
        Ok(None)
    }
    /// Query lengths per sequence for which the backend replays captured step graphs
    /// (`Backend::captured_query_lens`); None: no graphs.
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        None
    }
    /// How the last step ran where the backend captures step graphs; None: no graphs.
    fn last_step_graph(&self) -> Option<StepGraph> {
        None
    }
    /// New KV pool memory after start-up probes (`Backend::renew_kv`); no block may be
    /// held.
    fn renew_kv(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// The step shapes worth running before serving (`Backend::warm_up_steps`).
    fn warm_up_steps(
        &self,
        _query_lens: &[usize],
        _max_seqs: usize,
        _max_tokens: usize,
    ) -> Vec<WarmUpStep> {
        Vec::new()
    }
}

/// How a step ran on a backend with step graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepGraph {
    /// Its ops ran one by one (no graph for its shape, or not yet captured).
    Eager,
    /// It was captured into a graph (and that graph launched): the costly first use.
    Captured,
    /// A captured graph was replayed.
    Replayed,
}

impl StepGraph {
    pub fn as_str(self) -> &'static str {
        match self {
            StepGraph::Eager => "eager",
            StepGraph::Captured => "capture",
            StepGraph::Replayed => "replay",
        }
    }
}

/// One rank of a tensor-parallel model ([`crate::shard`]): runs every step on its shard,
/// with the collectives inside its backend, and returns only its part of the result.
/// A tensor-parallel runner drives all ranks with the same steps and combines them.
pub trait ShardRunner: Send {
    /// What this rank holds.
    fn shard(&self) -> &crate::shard::RankShard;
    /// Per logit row: the largest logit of this rank's vocabulary slice and its global
    /// token id (the first on ties, NaN never wins).
    fn forward_local_max(&mut self, step: &StepInput) -> anyhow::Result<Vec<(f32, u32)>>;
    /// This rank's vocabulary slice of every logit row, `[rows][slice]`.
    fn forward_local_logits(&mut self, step: &StepInput) -> anyhow::Result<Vec<f32>>;
    fn block_size(&self) -> usize;
    fn num_blocks(&self) -> usize;
    fn device_name(&self) -> String;
    /// As [`ModelRunner::captured_query_lens`] (every rank captures the same shapes).
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        None
    }
}

/// Greedy continuation of one sequence: the prompt as one prefill step, then one
/// decode step per token, KV in blocks `0..` of the pool. Stops after `max_new`
/// tokens or after emitting a token in `stop`. For tests, tools and examples that
/// need a model's own answer without the engine.
pub fn greedy_continuation(
    runner: &mut dyn ModelRunner,
    prompt: &[u32],
    max_new: usize,
    stop: &[u32],
) -> anyhow::Result<Vec<u32>> {
    anyhow::ensure!(
        !prompt.is_empty(),
        "greedy_continuation needs a non-empty prompt"
    );
    let total = prompt.len() + max_new;
    let blocks = total.div_ceil(runner.block_size());
    anyhow::ensure!(
        blocks <= runner.num_blocks(),
        "{total} tokens need {blocks} KV blocks; the pool has {}",
        runner.num_blocks()
    );
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut ids = prompt.to_vec();
    let mut start = 0;
    while ids.len() < total {
        let len = ids.len();
        let step = StepInput {
            tokens: ids[start..].to_vec(),
            positions: (start as u32..len as u32).collect(),
            seqs: vec![SeqInput {
                query_start: 0,
                query_len: len - start,
                context_len: len,
                block_table: table.clone(),
                prompt_len: prompt.len(),
            }],
            logit_rows: vec![len - start - 1],
        };
        let next = match runner.forward_greedy(&step)? {
            Some(ids) => ids[0],
            None => {
                let logits = runner.forward(&step)?;
                let row = logits.row(0);
                // First maximum wins, as in the samplers.
                (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as u32
            }
        };
        ids.push(next);
        start = len;
        if stop.contains(&next) {
            break;
        }
    }
    Ok(ids.split_off(prompt.len()))
}
