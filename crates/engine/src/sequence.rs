//! A sequence as the scheduler sees it: its tokens, how many have KV computed, and
//! the KV blocks that hold them.

use crate::block_manager::{BlockHash, BlockId};

#[derive(Debug, Clone)]
pub struct Sequence {
    pub id: u64,
    /// Prompt followed by every emitted token.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Tokens whose KV is in the cache and valid (a prefix of `tokens`).
    pub num_computed: usize,
    /// KV blocks covering at least `num_computed` tokens.
    pub blocks: Vec<BlockId>,
    /// Chained hashes of the full blocks of `tokens` computed so far.
    pub block_hashes: Vec<BlockHash>,
    /// Blocks already offered to the prefix cache.
    pub num_committed_blocks: usize,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_prompt_tokens: usize,
    pub num_preemptions: u32,
    pub admitted_once: bool,
}

impl Sequence {
    pub fn new(id: u64, prompt: Vec<u32>) -> Self {
        Self {
            id,
            prompt_len: prompt.len(),
            tokens: prompt,
            num_computed: 0,
            blocks: Vec::new(),
            block_hashes: Vec::new(),
            num_committed_blocks: 0,
            cached_prompt_tokens: 0,
            num_preemptions: 0,
            admitted_once: false,
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn num_output(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Every known token but the last has KV: the next step feeds the last token
    /// (plus any draft tokens) and samples.
    pub fn is_decoding(&self) -> bool {
        self.num_computed + 1 == self.tokens.len()
    }
}
