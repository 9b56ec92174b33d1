//! Per-step inputs shared by the engine, the model and the backends.

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
    /// Positions below this are prompt tokens: their attention may run at the backend's
    /// prefill precision (the CPU's `--cpu-prefill-attention`). 0: none is (every row at
    /// the precision decode uses).
    pub prompt_len: usize,
}

/// A whole step: the flattened new tokens of every sequence, their positions, and
/// which token rows need logits (e.g. the last prefill token, every verify token).
/// A sequence's new tokens sit at positions `context_len - query_len .. context_len`.
#[derive(Debug, Clone, Default)]
pub struct StepInput {
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
    pub seqs: Vec<SeqInput>,
    /// Indices into `tokens` whose logits are returned, in this order.
    pub logit_rows: Vec<usize>,
}

impl StepInput {
    /// Checks the step is self-consistent for a pool of `num_blocks` blocks of `block_size`.
    pub fn validate(&self, num_blocks: usize, block_size: usize) -> anyhow::Result<()> {
        use anyhow::ensure;
        ensure!(
            self.tokens.len() == self.positions.len(),
            "step has {} tokens but {} positions",
            self.tokens.len(),
            self.positions.len()
        );
        let mut next = 0;
        for (i, s) in self.seqs.iter().enumerate() {
            ensure!(
                s.query_start == next,
                "sequence {i} starts at token {} but {next} was expected",
                s.query_start
            );
            ensure!(
                s.query_len > 0 && s.query_len <= s.context_len,
                "sequence {i}: query_len {} vs context_len {}",
                s.query_len,
                s.context_len
            );
            ensure!(
                s.block_table.len() * block_size >= s.context_len,
                "sequence {i}: {} blocks cannot hold {} tokens",
                s.block_table.len(),
                s.context_len
            );
            ensure!(
                s.block_table.iter().all(|&b| (b as usize) < num_blocks),
                "sequence {i}: block id out of range (pool has {num_blocks})"
            );
            for j in 0..s.query_len {
                let want = (s.context_len - s.query_len + j) as u32;
                ensure!(
                    self.positions[s.query_start + j] == want,
                    "sequence {i}: token {j} has position {} but {want} was expected",
                    self.positions[s.query_start + j]
                );
            }
            next += s.query_len;
        }
        ensure!(
            next == self.tokens.len(),
            "sequences cover {next} tokens but the step has {}",
            self.tokens.len()
        );
        ensure!(
            self.logit_rows.iter().all(|&r| r < self.tokens.len()),
            "logit row out of range"
        );
        Ok(())
    }
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
