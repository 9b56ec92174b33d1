//! The interface between the engine and a loaded model: one forward step over a
//! batch of sequences whose KV lives in a paged block pool owned by the runner.

pub use wring_backend::{Logits, SeqInput, StepInput};

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
}
