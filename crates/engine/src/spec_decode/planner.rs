//! The draft planner: one call per step drafts for every decoding sequence, picks
//! each sequence's K under its policy (the adaptive one priced by the step time the
//! drafted rows add, the drafter asked only where a draft could pay) and lays the
//! drafts out as [`StepDrafts`].
//!
//! A constrained sequence's draft starts with the tokens its grammar forces (a fixed
//! JSON key, a closing `"}`: `DraftAsk::forced`), up to its K. After them comes the
//! drafter's own draft only where that draft starts with the same tokens: the drafter
//! continues the sequence as emitted, so a draft that leaves the forced run is one
//! the masks reject there (at a forced position the mask allows that one token) and
//! would be cut at that point anyway. The rule needs no drafting past hypothetical
//! tokens. Every draft token is still verified against the masked target, so drafts
//! from the grammar are as lossless as any (greedy, or rejection sampling of a point
//! mass); under its mask a forced token has probability 1, so it is accepted unless
//! emitting the run's first token changed how llguidance tokenises the rest.

use std::time::Instant;

use super::drafts::{DraftRow, StepDrafts};
use super::k_policy::KPolicy;
use super::k_policy::{AdaptiveK, DraftSeq, StepLoad};
use super::{DraftProposal, SpecDecoder};
use crate::scheduler::PrefillDemand;

/// One decoding sequence asking for drafts.
#[derive(Debug, Clone, Copy)]
pub struct DraftAsk<'a> {
    pub id: u64,
    pub policy: &'a KPolicy,
    pub workload: Option<&'a str>,
    /// Positions left before the context limit (the most query slots it can carry).
    pub room: usize,
    /// Tokens in its KV cache (what each of its query rows attends to).
    pub context: usize,
    /// The most draft tokens it may have: emitting all of them plus one must stay
    /// within both the context and `max_tokens`.
    pub cap: usize,
    /// The tokens its grammar forces next (empty without a grammar), at most `cap`:
    /// drafted first, and counted as sure by the adaptive policy.
    pub forced: &'a [u32],
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
        let load = self.step_load(asks, budget);
        let gate = self.adaptive_gate(asks, &load);
        let wants: Vec<usize> = asks
            .iter()
            .zip(&gate)
            .map(|(a, &open)| {
                if open {
                    self.policies.wanted_k(a.policy, a.workload)
                } else {
                    0
                }
            })
            .collect();
        let requests: Vec<(u64, usize)> = asks
            .iter()
            .zip(&wants)
            .map(|(a, &want)| (a.id, want.min(a.cap)))
            .collect();
        let (proposals, own): (Vec<DraftProposal>, Vec<bool>) = self
            .propose(&requests)
            .into_iter()
            .zip(asks)
            .map(|(p, a)| with_forced(a.forced, p))
            .unzip();
        let adaptive_ks = self.adaptive_ks(asks, &proposals, &load);

        let mut step_k = 0;
        let mut rows = Vec::with_capacity(asks.len());
        for ((((a, &want), p), &adaptive_k), &own) in asks
            .iter()
            .zip(&wants)
            .zip(proposals)
            .zip(&adaptive_ks)
            .zip(&own)
        {
            let k = match a.policy {
                KPolicy::Adaptive => adaptive_k,
                _ => want,
            }
            .min(a.cap);
            step_k = step_k.max(k);
            let mut tokens = p.tokens;
            tokens.truncate(k);
            let forced = a.forced.len().min(tokens.len());
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
                forced,
                from_drafter: own || forced == 0,
            });
        }
        if self.pad {
            for (r, a) in rows.iter_mut().zip(asks) {
                r.slots = step_k.min(a.room);
            }
        }
        StepDrafts::from_rows(step_k, rows)
    }

    /// Asks the drafter for the requests that want drafts (none for the others), and
    /// keeps the drafter's time per sequence asked, which the adaptive gate charges.
    fn propose(&mut self, requests: &[(u64, usize)]) -> Vec<DraftProposal> {
        let asked: Vec<(u64, usize)> = requests.iter().copied().filter(|r| r.1 > 0).collect();
        let mut out = vec![DraftProposal::default(); requests.len()];
        if asked.is_empty() {
            // Unmeasured, the last timing fades, so one slow call cannot keep the drafter
            // shut for good.
            self.draft_secs_per_seq *= 0.9;
            return out;
        }
        let t0 = Instant::now();
        let mut got = self.proposer.propose(&asked).into_iter();
        let per_seq = t0.elapsed().as_secs_f64() / asked.len() as f64;
        // A slow average: one step's timing is noisy.
        self.draft_secs_per_seq = if self.draft_secs_per_seq > 0.0 {
            0.9 * self.draft_secs_per_seq + 0.1 * per_seq
        } else {
            per_seq
        };
        for (o, r) in out.iter_mut().zip(requests) {
            if r.1 > 0 {
                *o = got.next().unwrap_or_default();
            }
        }
        out
    }

    /// The step's work besides the adaptive sequences' rows, and the row budget they
    /// share (None when no adaptive sequence asks or the cost model is not ready).
    fn step_load(&self, asks: &[DraftAsk], budget: StepBudget) -> Option<(StepLoad, usize)> {
        self.policies.cost.as_ref()?;
        let mut others = StepLoad::default();
        let mut adaptive = 0;
        for a in asks {
            if *a.policy == KPolicy::Adaptive {
                adaptive += 1;
            } else {
                // Decode rows of the other sequences, at the K they ask for.
                others.seqs += 1;
                others.rows += 1 + self.policies.wanted_k(a.policy, a.workload).min(a.cap);
            }
        }
        if adaptive == 0 {
            return None;
        }
        // The prefill that shares the step: it runs whatever K is (rows a larger K takes
        // from it run in a later step), so it only shares the fixed cost.
        let row_budget = budget.max_tokens.saturating_sub(others.rows);
        let prefill_rows = budget
            .prefill
            .tokens
            .min(row_budget.saturating_sub(adaptive));
        if prefill_rows > 0 {
            others.seqs += budget.prefill.seqs;
            others.rows += prefill_rows;
        }
        Some((others, row_budget))
    }

    /// Per ask: whether the drafter is asked at all. An adaptive sequence is not when
    /// even a first draft at the best acceptance the drafter is expected to reach, with
    /// the drafter's own time, could not beat plain decode's rate.
    fn adaptive_gate(&self, asks: &[DraftAsk], load: &Option<(StepLoad, usize)>) -> Vec<bool> {
        let (Some((others, _)), Some(cost)) = (load, &self.policies.cost) else {
            return asks
                .iter()
                .map(|a| *a.policy != KPolicy::Adaptive || self.policies.cost.is_some())
                .collect();
        };
        let seqs: Vec<DraftSeq> = asks
            .iter()
            .filter(|a| *a.policy == KPolicy::Adaptive)
            .map(|a| DraftSeq {
                scores: &[],
                context: a.context,
            })
            .collect();
        let plain_rate = seqs.len() as f64 / AdaptiveK::plain_decode_secs(&seqs, *others, cost);
        let best_p = self.stats.best_first_rate();
        asks.iter()
            .map(|a| {
                *a.policy != KPolicy::Adaptive
                    || AdaptiveK::can_pay(
                        best_p,
                        a.context,
                        self.draft_secs_per_seq,
                        plain_rate,
                        cost,
                    )
            })
            .collect()
    }

    /// The K of each ask under the adaptive policy (0 for the others, and for all when
    /// the policy has no cost model yet): one K for the step when padded, each
    /// sequence its own when not.
    fn adaptive_ks(
        &self,
        asks: &[DraftAsk],
        proposals: &[DraftProposal],
        load: &Option<(StepLoad, usize)>,
    ) -> Vec<usize> {
        let mut ks = vec![0; asks.len()];
        let (Some((others, row_budget)), Some(cost)) = (load, &self.policies.cost) else {
            return ks;
        };
        let mut scores = Vec::new();
        let mut index = Vec::new();
        for (i, (a, p)) in asks.iter().zip(proposals).enumerate() {
            if *a.policy != KPolicy::Adaptive {
                continue;
            }
            let n = p.tokens.len().min(a.cap);
            let mut s = match &p.probs {
                Some(pr) => self.stats.calibration.apply(&pr[..n.min(pr.len())]),
                None => self.stats.position.running_probs(n),
            };
            // The grammar's forced tokens are sure; what follows them is the drafter's
            // (its running estimate, which counted them as uncertain: a lower bound).
            let forced = a.forced.len().min(n);
            s.resize(s.len().max(forced), 1.0);
            s[..forced].fill(1.0);
            scores.push(s);
            index.push(i);
        }
        let seqs: Vec<DraftSeq> = scores
            .iter()
            .zip(&index)
            .map(|(s, &i)| DraftSeq {
                scores: s,
                context: asks[i].context,
            })
            .collect();
        let a = &self.policies.adaptive;
        if self.pad {
            let k = a.choose(&seqs, *others, true, *row_budget, cost);
            for &i in &index {
                ks[i] = k;
            }
        } else {
            for (&i, k) in index
                .iter()
                .zip(a.choose_each(&seqs, *others, *row_budget, cost))
            {
                ks[i] = k;
            }
        }
        ks
    }
}

/// A constrained sequence's proposal: the drafter's draft where it starts with the
/// grammar's `forced` tokens, else those tokens alone; and whether it is the drafter's.
fn with_forced(forced: &[u32], p: DraftProposal) -> (DraftProposal, bool) {
    if forced.is_empty() || p.tokens.starts_with(forced) {
        return (p, true);
    }
    let alone = DraftProposal {
        tokens: forced.to_vec(),
        probs: None,
    };
    (alone, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_decode::SpecConfig;
    use crate::spec_decode::{Proposer, StepCostModel};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Drafts `k` tokens of a sure guess with score 1.0 and counts the sequences asked.
    struct Counting(Arc<AtomicUsize>);

    impl Proposer for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn propose(&mut self, reqs: &[(u64, usize)]) -> Vec<DraftProposal> {
            self.0.fetch_add(reqs.len(), Ordering::Relaxed);
            reqs.iter()
                .map(|&(_, k)| DraftProposal {
                    tokens: vec![7; k],
                    probs: Some(vec![1.0; k]),
                })
                .collect()
        }
    }

    fn decoder(cost: StepCostModel) -> (SpecDecoder, Arc<AtomicUsize>) {
        let cfg = SpecConfig {
            k_policy: KPolicy::Adaptive,
            pad: false,
            ..SpecConfig::default()
        };
        let mut d = SpecDecoder::new(&cfg, 100, None).unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        d.proposer = Box::new(Counting(asked.clone()));
        d.policies.cost = Some(cost);
        (d, asked)
    }

    fn asks(n: usize) -> Vec<DraftAsk<'static>> {
        (0..n as u64)
            .map(|id| DraftAsk {
                id,
                policy: &KPolicy::Adaptive,
                workload: None,
                room: 1000,
                context: 300,
                cap: 63,
                forced: &[],
            })
            .collect()
    }

    /// A step budget of 2,048 tokens with no prefill waiting.
    fn no_prefill() -> StepBudget {
        StepBudget {
            max_tokens: 2048,
            prefill: PrefillDemand::default(),
        }
    }

    /// Teaches the calibration that no first draft token is accepted, whatever its score.
    fn calibrate_all_rejected(d: &mut SpecDecoder) {
        for bin in 0..10 {
            for _ in 0..50 {
                d.stats.calibration.observe(&[bin as f32 / 10.0 + 0.05], 0);
            }
        }
    }

    #[test]
    fn where_no_draft_can_pay_the_drafter_is_not_asked() {
        // A compute-bound CPU step: 11 ms fixed, 2.5 ms a row. A first draft's calibrated
        // acceptance tops out near 60 %; at 32 sequences a row needs ~84 %.
        let cost = StepCostModel::from_coefficients(0.011, 0.0001, 0.0025);
        let (mut d, asked) = decoder(cost);
        for _ in 0..300 {
            d.stats.calibration.observe(&[1.0, 1.0], 1);
            d.stats.calibration.observe(&[1.0, 1.0], 0);
        }
        calibrate_all_rejected(&mut d);
        let budget = no_prefill();
        let many = asks(32);
        let drafts = d.plan(&many, budget);
        assert_eq!(asked.load(Ordering::Relaxed), 0);
        assert_eq!(drafts.k, 0);
        assert!(drafts.slots.iter().all(|&s| s == 0));
        // Alone, the same drafts pay: the drafter is asked and K > 0.
        let one = asks(1);
        let drafts = d.plan(&one, budget);
        assert_eq!(asked.load(Ordering::Relaxed), 1);
        assert!(drafts.k > 0, "{drafts:?}");
    }

    #[test]
    fn forced_tokens_lead_the_draft_and_the_drafter_continues_only_what_agrees() {
        let cfg = SpecConfig {
            k_policy: KPolicy::Fixed(4),
            pad: true,
            ..SpecConfig::default()
        };
        let mut d = SpecDecoder::new(&cfg, 100, None).unwrap();
        d.proposer = Box::new(Counting(Arc::new(AtomicUsize::new(0))));
        let policy = KPolicy::Fixed(4);
        let forced: [&[u32]; 5] = [&[3, 4], &[7], &[], &[1, 2, 3, 4, 5, 6], &[8, 9]];
        let asks: Vec<DraftAsk> = forced
            .iter()
            .enumerate()
            .map(|(i, f)| DraftAsk {
                id: i as u64,
                policy: &policy,
                workload: None,
                room: if i == 4 { 3 } else { 1000 },
                context: 300,
                cap: if i == 4 { 1 } else { 63 },
                forced: &f[..f.len().min(if i == 4 { 1 } else { 63 })],
            })
            .collect();
        let budget = no_prefill();
        let drafts = d.plan(&asks, budget);
        assert_eq!(drafts.k, 4);
        // The drafter's [7, 7, 7, 7] leaves the forced run of row 0: the run alone. It
        // starts with row 1's: kept whole. Row 3's run is cut at K, row 4's at its cap.
        assert_eq!(drafts.draft(0), &[3, 4]);
        assert_eq!(drafts.draft(1), &[7, 7, 7, 7]);
        assert_eq!(drafts.draft(2), &[7, 7, 7, 7]);
        assert_eq!(drafts.draft(3), &[1, 2, 3, 4]);
        assert_eq!(drafts.draft(4), &[8]);
        assert_eq!(drafts.forced, vec![2, 1, 0, 4, 1]);
        // Padded: every row keeps the step's shape (where its context has room).
        assert_eq!(drafts.slots, vec![4, 4, 4, 4, 3]);
        // Only the drafter's own drafts keep its scores and teach its statistics.
        assert_eq!(drafts.from_drafter, vec![false, true, true, false, false]);
        let scored: Vec<bool> = drafts.scores.iter().map(Option::is_some).collect();
        assert_eq!(scored, drafts.from_drafter);
    }

    #[test]
    fn forced_tokens_are_drafted_where_the_drafter_is_not_asked() {
        // The step of the first test, where no draft of the drafter's can pay: a
        // sequence whose grammar forces two tokens still drafts them (they are sure).
        let cost = StepCostModel::from_coefficients(0.011, 0.0001, 0.0025);
        let (mut d, asked) = decoder(cost);
        calibrate_all_rejected(&mut d);
        let budget = no_prefill();
        let mut many = asks(8);
        many[3].forced = &[5, 6];
        let drafts = d.plan(&many, budget);
        assert_eq!(asked.load(Ordering::Relaxed), 0);
        assert_eq!(drafts.draft(3), &[5, 6], "{drafts:?}");
        assert_eq!(drafts.forced[3], 2);
        for b in (0..8).filter(|&b| b != 3) {
            assert!(drafts.draft(b).is_empty(), "{drafts:?}");
        }
    }
}
