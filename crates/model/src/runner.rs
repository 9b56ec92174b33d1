//! The interface between the engine and a loaded model: one forward step over a
//! batch of sequences whose KV lives in a paged block pool owned by the runner.

/// One sequence's slice of a step.
#[derive(Debug, Clone, Default)]
pub struct SeqInput {
    /// Index of this sequence's first query token in `StepInput::tokens`.
    pub query_start: usize,
    /// Number of new tokens this step (prefill chunk length, 1 for decode, 1+K for verify).
    pub query_len: usize,
    /// Tokens in the sequence after this step's tokens are written (cached + new).
    pub context_len: usize,
    /// KV block ids covering positions `0..context_len` (block `i` holds positions
    /// `i*block_size .. (i+1)*block_size`).
    pub block_table: Vec<u32>,
}

/// A whole step: the flattened new tokens of every sequence, their positions, and
/// which token rows need logits (e.g. the last prefill token, every verify token).
#[derive(Debug, Clone, Default)]
pub struct StepInput {
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
    pub seqs: Vec<SeqInput>,
    /// Indices into `tokens` whose logits are returned, in this order.
    pub logit_rows: Vec<usize>,
}

/// Row-major logits `[rows][vocab]` in f32.
#[derive(Debug, Clone, Default)]
pub struct Logits {
    pub rows: usize,
    pub vocab: usize,
    pub data: Vec<f32>,
}

impl Logits {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.data[i * self.vocab..(i + 1) * self.vocab]
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
}
