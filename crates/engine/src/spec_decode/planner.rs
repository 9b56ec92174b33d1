//! The draft planner: one call per step drafts for every decoding sequence, picks
//! each sequence's K under its policy (the adaptive one priced against the whole
//! step, prefill included) and lays the drafts out as [`StepDrafts`].

use super::drafts::{DraftRow, StepDrafts};
use super::k_policy::StepLoad;
use super::SpecDecoder;
use crate::config::KPolicy;
use crate::scheduler::PrefillDemand;

/// One decoding sequence asking for drafts.
#[derive(Debug, Clone, Copy)]
pub struct DraftAsk<'a> {
    pub id: u64,
    pub policy: &'a KPolicy,
    pub workload: Option<&'a str>,
    /// Positions left before the context limit (the most query slots it can carry).
    pub room: usize,
    /// The most draft tokens it may have: emitting all of them plus one must stay
    /// within both the context and `max_tokens`.
    pub cap: usize,
}

/// The step the drafts will share.
#[derive(Debug, Clone, Copy)]
pub struct StepBudget {
    /// Token budget of the step (`max_num_batched_tokens`).
    pub max_tokens: usize,
    /// Prefill work waiting to run.
    pub prefill: PrefillDemand,
}

impl SpecDecoder {
    /// Drafts for `asks`, padded to one K when padding is on.
    pub fn plan(&mut self, asks: &[DraftAsk], budget: StepBudget) -> StepDrafts {
        let wants: Vec<usize> = asks
            .iter()
            .map(|a| self.policies.wanted_k(a.policy, a.workload))
            .collect();
        let requests: Vec<(u64, usize)> = asks
            .iter()
            .zip(&wants)
            .map(|(a, &want)| (a.id, want.min(a.cap)))
            .collect();
        let proposals = self.proposer.propose(&requests);
        let adaptive_k = self.adaptive_k(asks, &requests, &proposals, budget);

        let mut step_k = 0;
        let mut rows = Vec::with_capacity(asks.len());
        for ((a, &want), p) in asks.iter().zip(&wants).zip(proposals) {
            let k = match a.policy {
                KPolicy::Adaptive => adaptive_k,
                _ => want,
            }
            .min(a.cap);
            step_k = step_k.max(k);
            let mut tokens = p.tokens;
            tokens.truncate(k);
            let scores = p.probs.map(|mut pr| {
                pr.truncate(tokens.len());
                pr
            });
            rows.push(DraftRow {
                id: a.id,
                slots: tokens.len(),
                tokens,
                scores,
                dynamic: *a.policy == KPolicy::Dynamic,
            });
        }
        if self.pad {
            for (r, a) in rows.iter_mut().zip(asks) {
                r.slots = step_k.min(a.room);
            }
        }
        StepDrafts::from_rows(step_k, rows)
    }

    /// The one K of the step's adaptive sequences (0 when there are none or the
    /// policy has no cost model yet).
    fn adaptive_k(
        &self,
        asks: &[DraftAsk],
        requests: &[(u64, usize)],
        proposals: &[super::DraftProposal],
        budget: StepBudget,
    ) -> usize {
        let Some(cost) = &self.policies.cost else {
            return 0;
        };
        let mut scores = Vec::new();
        // Decode rows of the other sequences, at the K they asked for.
        let mut others = StepLoad::default();
        for ((a, p), &(_, k)) in asks.iter().zip(proposals).zip(requests) {
            if *a.policy != KPolicy::Adaptive {
                others.seqs += 1;
                others.rows += 1 + k;
                continue;
            }
            let n = p.tokens.len().min(a.cap);
            scores.push(match &p.probs {
                Some(pr) => self.stats.calibration.apply(&pr[..n.min(pr.len())]),
                None => self.stats.position.running_probs(n),
            });
        }
        if scores.is_empty() {
            return 0;
        }
        // The prefill that shares a plain decode step with these sequences is priced
        // as fixed work: rows a larger K takes from it still have to run later.
        let row_budget = budget.max_tokens.saturating_sub(others.rows);
        let prefill_rows = budget
            .prefill
            .tokens
            .min(row_budget.saturating_sub(scores.len()));
        if prefill_rows > 0 {
            others.seqs += budget.prefill.seqs;
            others.rows += prefill_rows;
        }
        let refs: Vec<&[f32]> = scores.iter().map(|s| s.as_slice()).collect();
        self.policies
            .adaptive
            .choose(&refs, others, self.pad, row_budget, cost)
    }
}
