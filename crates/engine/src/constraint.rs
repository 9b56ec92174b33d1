//! A request's structured-output constraint in the engine loop: its grammar
//! matcher, and the allowed-token masks of the positions a step samples.
//!
//! Per step, `prepare` computes the masks of the sequence's query positions along
//! its draft — position j is the state after the emitted tokens and `draft[..j]`,
//! stopping at the first draft token the grammar forbids (it will be rejected
//! there like any mismatch) — while the model runs (`core.rs` runs it on a scoped
//! thread beside the forward). `masked_rows` then sets the forbidden logits of
//! those rows to -inf before the verifier (or the plain sampler) and the logprobs
//! see them (`EngineCore::mask_logits` applies them in place), and `advance` moves the matcher over what was emitted.
//! When the sequence speculates, `forced` gives the tokens its grammar forces next,
//! which the planner drafts first (`spec_decode/planner.rs`). Requests without a
//! grammar never reach this file.

use anyhow::Context;
use wring_grammar::{GrammarMatcher, TokenMask};

pub(crate) struct Constraint {
    matcher: GrammarMatcher,
    /// `masks[j]`: the tokens allowed at the step's query position j.
    masks: Vec<TokenMask>,
}

impl Constraint {
    pub fn new(matcher: GrammarMatcher) -> Self {
        Self {
            matcher,
            masks: Vec::new(),
        }
    }

    /// Computes this step's masks for a sequence whose real draft is `draft`:
    /// positions 0..=a, where `draft[..a]` is the longest prefix the grammar
    /// allows. Leaves the matcher where it was.
    pub fn prepare(&mut self, draft: &[u32]) -> anyhow::Result<()> {
        self.masks.clear();
        let allowed = self
            .matcher
            .allowed_prefix_len(draft)
            .context("checking the draft against the grammar")?;
        let mut advanced = 0;
        loop {
            self.masks.push(
                self.matcher
                    .allowed_tokens()
                    .context("computing the allowed tokens")?,
            );
            // Past the end of the grammar only stop tokens are allowed (the mask
            // says so); nothing there is emitted, so the walk ends.
            if advanced == allowed || self.matcher.is_finished() {
                break;
            }
            self.matcher.advance(&draft[advanced..advanced + 1])?;
            advanced += 1;
        }
        self.matcher.rollback(advanced)?;
        Ok(())
    }

    /// The tokens the grammar forces from here, at most `max` (the start of the
    /// sequence's draft when it speculates); the matcher stays where it was.
    pub fn forced(&mut self, max: usize) -> anyhow::Result<Vec<u32>> {
        self.matcher.forced_tokens(max)
    }

    /// This step's masks: `masks()[j]` for the sequence's query position j. Rows
    /// past them are left as they are: verification stops before them (the draft
    /// token at the last masked position is forbidden, or that position is the
    /// bonus).
    pub fn masks(&self) -> &[TokenMask] {
        &self.masks
    }

    /// Advances the matcher over emitted tokens. Some(n) when the grammar ended
    /// (complete with nothing that may follow, or a stop token consumed) with the
    /// n-th token: the tokens after it are not part of the output.
    pub fn advance(&mut self, tokens: &[u32]) -> anyhow::Result<Option<usize>> {
        for (i, &t) in tokens.iter().enumerate() {
            self.matcher.advance(&[t])?;
            if self.matcher.is_finished() {
                return Ok(Some(i + 1));
            }
        }
        Ok(None)
    }
}
