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

/// Allowed-token bitmasks of a step's logit rows, for a greedy step under structured
/// output: one table of `words_per_row` u32 words per constrained row (bit `t % 32` of word
/// `t / 32` set when token `t` is allowed), and for each logit row the index of its table,
/// or [`RowMasks::UNMASKED`] for a row without a grammar (it pays nothing). Packed in one
/// buffer so a device backend uploads it in one copy: the row index comes first, then the
/// tables.
#[derive(Debug, Clone, Default)]
pub struct RowMasks {
    pub words_per_row: usize,
    /// Per logit row: its table's index, or `UNMASKED`.
    pub row_table: Vec<u32>,
    /// `row_table`'s tables, `words_per_row` words each.
    pub words: Vec<u32>,
}

impl RowMasks {
    pub const UNMASKED: u32 = u32::MAX;

    /// Masks for `rows` logit rows over a vocabulary of `vocab` ids, none masked yet.
    pub fn new(rows: usize, vocab: usize) -> Self {
        Self {
            words_per_row: vocab.div_ceil(32),
            row_table: vec![Self::UNMASKED; rows],
            words: Vec::new(),
        }
    }

    /// Masks logit row `row` with `words` (missing words forbid their ids; ids at or past
    /// `allowed_below` are forbidden too).
    pub fn set(&mut self, row: usize, words: &[u32], allowed_below: usize) {
        let start = self.words.len();
        self.row_table[row] = (start / self.words_per_row.max(1)) as u32;
        let n = self.words_per_row;
        self.words
            .extend((0..n).map(|w| words.get(w).copied().unwrap_or(0)));
        let table = &mut self.words[start..start + n];
        for (w, word) in table.iter_mut().enumerate() {
            let first = w * 32;
            if first + 32 <= allowed_below {
                continue;
            }
            let keep = allowed_below.saturating_sub(first).min(32);
            *word &= if keep == 0 {
                0
            } else {
                u32::MAX >> (32 - keep)
            };
        }
    }

    /// Whether any row is masked.
    pub fn any(&self) -> bool {
        !self.words.is_empty()
    }

    /// Row `row`'s table, if it is masked.
    pub fn table(&self, row: usize) -> Option<&[u32]> {
        let t = *self.row_table.get(row)?;
        (t != Self::UNMASKED).then(|| {
            let n = self.words_per_row;
            &self.words[t as usize * n..(t as usize + 1) * n]
        })
    }

    /// The greedy id of `row` under its mask: the first index of the largest allowed value
    /// (NaN never wins; 0 when nothing allowed is above -inf), the rule of the device kernel
    /// and of the engine's host path (forbidden logits set to -inf, then argmax).
    pub fn argmax(&self, row: usize, logits: &[f32]) -> u32 {
        let table = self.table(row);
        let (mut best, mut best_v) = (0usize, f32::NEG_INFINITY);
        for (i, &x) in logits.iter().enumerate() {
            let allowed =
                table.is_none_or(|t| t.get(i / 32).is_some_and(|w| w >> (i % 32) & 1 == 1));
            if allowed && x > best_v {
                (best, best_v) = (i, x);
            }
        }
        best as u32
    }
}

#[cfg(test)]
mod row_mask_tests {
    use super::RowMasks;

    #[test]
    fn masked_rows_take_the_best_allowed_id_and_unmasked_rows_the_best() {
        let mut m = RowMasks::new(3, 40);
        assert_eq!(m.words_per_row, 2);
        // Row 0: ids 1 and 35 allowed; row 2: everything, but only ids below 34 exist.
        m.set(0, &[1 << 1, 1 << 3], 40);
        m.set(2, &[u32::MAX, u32::MAX], 34);
        let mut logits = vec![0.0f32; 40];
        logits[7] = 5.0;
        logits[35] = 2.0;
        logits[1] = 1.0;
        logits[36] = 9.0;
        assert_eq!(m.argmax(0, &logits), 35);
        assert_eq!(m.argmax(1, &logits), 36);
        assert_eq!(m.argmax(2, &logits), 7);
        assert_eq!(m.table(2).unwrap()[1], 0b11);
        assert!(m.table(1).is_none());
        // Nothing allowed above -inf: id 0, as the host path's argmax of an all -inf row.
        let mut none = RowMasks::new(1, 40);
        none.set(0, &[], 40);
        assert_eq!(none.argmax(0, &logits), 0);
    }
}
