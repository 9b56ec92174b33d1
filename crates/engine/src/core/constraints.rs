//! The engine loop's side of structured output: a step takes the grammar state of every
//! constrained sequence it samples, computes the masks along the drafts beside the forward
//! pass (`prepare_masks` on a scoped thread), and puts the states back. A greedy step hands
//! the masks to the runner's argmax (`row_masks`); any other masks the logits on the host.
//! Before that, when speculation is on, the planner asks for the tokens each grammar forces
//! next (`forced_tokens`), which it drafts first.

use std::sync::Weak;

use rayon::prelude::*;
use wring_grammar::TokenMask;
use wring_model::runner::RowMasks;

use super::EngineCore;
use crate::channel::Shared;
use crate::constraint::Constraint;
use crate::spec_decode::{StepDrafts, StepOutput, MAX_K};
use crate::step_input::StepRow;

impl EngineCore {
    /// The tokens each constrained sequence's grammar forces next, at most its cap and
    /// [`MAX_K`] (`limits`: id, room, cap); empty for the others. The matchers stay where
    /// they were (llguidance keeps the result for the step's first mask). A matcher that
    /// fails here gives none and fails its sequence when the step's masks are computed.
    pub(super) fn forced_tokens(&mut self, limits: &[(u64, usize, usize)]) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); limits.len()];
        let mut jobs: Vec<(usize, usize, Constraint)> = Vec::new();
        for (i, &(id, _, cap)) in limits.iter().enumerate() {
            let max = cap.min(MAX_K);
            if max == 0 {
                continue;
            }
            if let Some(c) = self.requests.get_mut(&id).and_then(|s| s.constraint.take()) {
                jobs.push((i, max, c));
            }
        }
        let forced = |(_, max, c): &mut (usize, usize, Constraint)| {
            c.forced(*max).unwrap_or_else(|e| {
                tracing::debug!("forced tokens: {e:#}");
                Vec::new()
            })
        };
        // A forced run costs about what a mask does: sequences in parallel, as there.
        let runs: Vec<Vec<u32>> = if jobs.len() > 1 {
            jobs.par_iter_mut().map(forced).collect()
        } else {
            jobs.iter_mut().map(forced).collect()
        };
        for ((i, _, c), run) in jobs.into_iter().zip(runs) {
            out[i] = run;
            if let Some(state) = self.requests.get_mut(&limits[i].0) {
                state.constraint = Some(c);
            }
        }
        out
    }

    /// Takes the grammar state of every constrained sequence that samples this
    /// step, with the draft its masks follow.
    pub(super) fn take_constraints(
        &mut self,
        rows: &[StepRow],
        drafts: &StepDrafts,
    ) -> Vec<MaskJob> {
        let mut jobs = Vec::new();
        for r in rows.iter().filter(|r| r.completes) {
            let Some(state) = self.requests.get_mut(&r.id) else {
                continue;
            };
            let Some(constraint) = state.constraint.take() else {
                continue;
            };
            let draft = match drafts.row_of(r.id).filter(|_| r.slots > 0) {
                Some(b) => drafts.draft(b).to_vec(),
                None => Vec::new(),
            };
            jobs.push(MaskJob {
                id: r.id,
                constraint,
                draft,
                result: Ok(()),
            });
        }
        jobs
    }

    /// Puts the grammar states back; a sequence whose masks could not be computed
    /// fails alone (as does every constrained one if the mask thread died).
    pub(super) fn return_constraints(
        &mut self,
        rows: &[StepRow],
        jobs: Vec<MaskJob>,
        shared: &Weak<Shared>,
    ) {
        for job in jobs {
            match job.result {
                Ok(()) => {
                    if let Some(state) = self.requests.get_mut(&job.id) {
                        state.constraint = Some(job.constraint);
                    }
                }
                Err(msg) => self.fail(job.id, format!("structured output: {msg}"), shared),
            }
        }
        for r in rows.iter().filter(|r| r.completes) {
            let lost = self
                .requests
                .get(&r.id)
                .is_some_and(|s| s.constrained && s.constraint.is_none());
            if lost {
                self.fail(
                    r.id,
                    "structured output: the grammar state was lost".into(),
                    shared,
                );
            }
        }
    }

    /// Computes every job's masks along its draft (on the mask thread).
    /// Sequences in parallel: a JSON-schema mask costs tens to hundreds of
    /// microseconds, so 32 constrained sequences one after another outlast the step.
    pub(super) fn prepare_masks(mut jobs: Vec<MaskJob>) -> Vec<MaskJob> {
        let prepare = |job: &mut MaskJob| {
            job.result = job
                .constraint
                .prepare(&job.draft)
                .map_err(|e| format!("{e:#}"));
        };
        if jobs.len() > 1 {
            jobs.par_iter_mut().for_each(prepare);
        } else {
            jobs.iter_mut().for_each(prepare);
        }
        jobs
    }

    /// Sets the forbidden logits of every constrained row of the step's output to
    /// -inf in place (rows of different sequences in parallel), so the verifier,
    /// the sampler and the logprobs read masked rows without a copy of them.
    pub(super) fn mask_logits(&self, rows: &[StepRow], out: &mut StepOutput) {
        let StepOutput::Logits(logits) = out else {
            return;
        };
        let mut row_masks: Vec<Option<&TokenMask>> = vec![None; logits.rows];
        for r in rows.iter().filter(|r| r.completes) {
            let Some(c) = self.requests.get(&r.id).and_then(|s| s.constraint.as_ref()) else {
                continue;
            };
            for (j, mask) in c.masks().iter().take(1 + r.slots).enumerate() {
                if let Some(slot) = row_masks.get_mut(r.first_logit + j) {
                    *slot = mask.as_ref();
                }
            }
        }
        if row_masks.iter().all(Option::is_none) {
            return;
        }
        let vocab = logits.vocab;
        logits
            .data
            .par_chunks_mut(vocab)
            .zip(row_masks.par_iter())
            .for_each(|(row, mask)| {
                if let Some(m) = mask {
                    m.apply(row);
                }
            });
    }
}

/// The step's masks for a masked argmax: each constrained row's masks at its query
/// positions (those `mask_logits` would apply); a sequence whose masks failed is left
/// unmasked (it fails before anything of it is emitted).
pub(super) fn row_masks(
    rows: &[StepRow],
    jobs: &[MaskJob],
    logit_rows: usize,
    vocab: usize,
) -> RowMasks {
    let mut m = RowMasks::new(logit_rows, vocab);
    for job in jobs.iter().filter(|j| j.result.is_ok()) {
        let Some(r) = rows.iter().find(|r| r.id == job.id && r.completes) else {
            continue;
        };
        for (j, mask) in job.constraint.masks().iter().take(1 + r.slots).enumerate() {
            // A position before the grammar binds (a reasoning model's thinking) stays
            // unmasked.
            if let (Some(mask), true) = (mask, r.first_logit + j < logit_rows) {
                m.set(r.first_logit + j, mask.words(), mask.vocab_size());
            }
        }
    }
    m
}

/// One constrained sequence's mask work for a step.
pub(super) struct MaskJob {
    id: u64,
    constraint: Constraint,
    draft: Vec<u32>,
    result: Result<(), String>,
}
