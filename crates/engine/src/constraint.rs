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
//!
//! A reasoning model's grammar may wait for the end of its thinking
//! ([`GrammarStart`]): until the closing token is emitted a position has no mask (None)
//! and nothing is forced; a draft that contains the closing token gets masks from the
//! position after it, so speculation across the end of the thinking stays lossless.

use anyhow::Context;
use wring_grammar::{GrammarMatcher, TokenMask};

use crate::api::GrammarStart;

/// Where the grammar is: binding, or waiting for the thinking to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Active,
    /// Nothing binds until `close` is emitted; the grammar starts after it.
    Waiting {
        close: u32,
    },
    /// The next token is the grammar's first, or `open` (then `Waiting { close }`).
    FirstOr {
        open: u32,
        close: u32,
    },
}

pub(crate) struct Constraint {
    matcher: GrammarMatcher,
    phase: Phase,
    /// `masks[j]`: the tokens allowed at the step's query position j (None: any).
    masks: Vec<Option<TokenMask>>,
}

impl Constraint {
    pub fn new(matcher: GrammarMatcher, start: GrammarStart) -> Self {
        let phase = match start {
            GrammarStart::First => Phase::Active,
            GrammarStart::After { close } => Phase::Waiting { close },
            GrammarStart::FirstOr { open, close } => Phase::FirstOr { open, close },
        };
        Self {
            matcher,
            phase,
            masks: Vec::new(),
        }
    }

    /// Computes this step's masks for a sequence whose real draft is `draft`:
    /// positions 0..=a, where `draft[..a]` is the longest prefix the grammar
    /// allows (positions before the grammar binds allow anything). Leaves the matcher
    /// where it was.
    pub fn prepare(&mut self, draft: &[u32]) -> anyhow::Result<()> {
        self.masks.clear();
        match self.phase {
            Phase::Active => self.walk(draft),
            Phase::Waiting { close } => self.wait_then_walk(draft, close),
            Phase::FirstOr { open, close } => {
                if draft.first() == Some(&open) {
                    let mut first = self.allowed()?;
                    first.allow(open);
                    self.masks.push(Some(first));
                    // Positions from 1 follow `open`: thinking until `close`.
                    self.wait_then_walk(&draft[1..], close)
                } else {
                    self.walk(draft)?;
                    if let Some(Some(first)) = self.masks.first_mut() {
                        first.allow(open);
                    }
                    Ok(())
                }
            }
        }
    }

    /// Positions up to the first `close` of the draft are free; the grammar's masks
    /// follow the rest of the draft (appended after the masks already there).
    fn wait_then_walk(&mut self, draft: &[u32], close: u32) -> anyhow::Result<()> {
        let base = self.masks.len();
        match draft.iter().position(|&t| t == close) {
            None => {
                self.masks.resize(base + draft.len() + 1, None);
                Ok(())
            }
            Some(at) => {
                self.masks.resize(base + at + 1, None);
                self.walk(&draft[at + 1..])
            }
        }
    }

    /// The grammar's masks along `draft` from the matcher's position, appended.
    fn walk(&mut self, draft: &[u32]) -> anyhow::Result<()> {
        let allowed = self
            .matcher
            .allowed_prefix_len(draft)
            .context("checking the draft against the grammar")?;
        let mut advanced = 0;
        loop {
            let mask = self.allowed()?;
            self.masks.push(Some(mask));
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

    fn allowed(&mut self) -> anyhow::Result<TokenMask> {
        self.matcher
            .allowed_tokens()
            .context("computing the allowed tokens")
    }

    /// The tokens the grammar forces from here, at most `max` (the start of the
    /// sequence's draft when it speculates); the matcher stays where it was. None
    /// while the grammar waits for the thinking to end (or may).
    pub fn forced(&mut self, max: usize) -> anyhow::Result<Vec<u32>> {
        match self.phase {
            Phase::Active => self.matcher.forced_tokens(max),
            Phase::Waiting { .. } | Phase::FirstOr { .. } => Ok(Vec::new()),
        }
    }

    /// This step's masks: `masks()[j]` for the sequence's query position j (None: no
    /// mask). Rows past them are left as they are: verification stops before them (the
    /// draft token at the last masked position is forbidden, or that position is the
    /// bonus).
    pub fn masks(&self) -> &[Option<TokenMask>] {
        &self.masks
    }

    /// Advances the matcher over emitted tokens. Some(n) when the grammar ended
    /// (complete with nothing that may follow, or a stop token consumed) with the
    /// n-th token: the tokens after it are not part of the output.
    pub fn advance(&mut self, tokens: &[u32]) -> anyhow::Result<Option<usize>> {
        let skip = match self.phase {
            Phase::Active => 0,
            Phase::Waiting { close } => match tokens.iter().position(|&t| t == close) {
                None => return Ok(None),
                Some(at) => {
                    self.phase = Phase::Active;
                    at + 1
                }
            },
            Phase::FirstOr { open, close } => match tokens.first() {
                None => return Ok(None),
                Some(&t) if t == open => {
                    self.phase = Phase::Waiting { close };
                    return Ok(self.advance(&tokens[1..])?.map(|n| n + 1));
                }
                Some(_) => {
                    self.phase = Phase::Active;
                    0
                }
            },
        };
        for (i, &t) in tokens.iter().enumerate().skip(skip) {
            self.matcher.advance(&[t])?;
            if self.matcher.is_finished() {
                return Ok(Some(i + 1));
            }
        }
        Ok(None)
    }
}
