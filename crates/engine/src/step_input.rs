//! Builds the runner's input for one step from the scheduler's plan and the step's
//! drafts: each sequence's known tokens, then its draft slots (real drafts, then
//! pads), positions, block tables, and the rows whose logits come back.

use wring_model::runner::{SeqInput, StepInput};

use crate::scheduler::{Scheduler, StepPlan};
use crate::spec_decode::StepDrafts;

/// One scheduled sequence's place in the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRow {
    pub id: u64,
    /// Known tokens fed this step.
    pub num_tokens: usize,
    /// Draft slots after them (0: prefill chunk or plain decode).
    pub slots: usize,
    /// Tokens with KV before the step.
    pub num_computed: usize,
    /// The step reaches the sequence's last known token, so it yields new tokens.
    pub completes: bool,
    /// Index of its first logit row in the step's output.
    pub first_logit: usize,
}

/// The step's input and, in the same order, where each sequence sits in it.
pub fn build(plan: &StepPlan, sched: &Scheduler, drafts: &StepDrafts) -> (StepInput, Vec<StepRow>) {
    let mut input = StepInput::default();
    let mut rows = Vec::with_capacity(plan.scheduled.len());
    for sc in &plan.scheduled {
        let seq = sched.get(sc.id).expect("scheduled seq exists");
        let nc = seq.num_computed;
        let query_start = input.tokens.len();
        input
            .tokens
            .extend_from_slice(&seq.tokens[nc..nc + sc.num_tokens]);
        if sc.num_slots > 0 {
            let b = drafts
                .row_of(sc.id)
                .expect("a sequence with slots has drafts");
            debug_assert_eq!(drafts.slots[b], sc.num_slots);
            input.tokens.extend_from_slice(drafts.slot_tokens(b));
        }
        let query_len = sc.num_tokens + sc.num_slots;
        input
            .positions
            .extend((nc..nc + query_len).map(|p| p as u32));
        let completes = nc + sc.num_tokens == seq.len();
        let first_logit = input.logit_rows.len();
        if completes {
            // The last known token, then every slot (all 1 + K rows when padded).
            let last = query_start + sc.num_tokens - 1;
            input.logit_rows.extend(last..last + 1 + sc.num_slots);
        }
        input.seqs.push(SeqInput {
            query_start,
            query_len,
            context_len: nc + query_len,
            block_table: seq.blocks.clone(),
            prompt_len: seq.prompt_len,
        });
        rows.push(StepRow {
            id: sc.id,
            num_tokens: sc.num_tokens,
            slots: sc.num_slots,
            num_computed: nc,
            completes,
            first_logit,
        });
    }
    (input, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_manager::BlockManager;
    use crate::scheduler::SchedulerLimits;
    use crate::sequence::Sequence;
    use crate::spec_decode::PAD_TOKEN;

    #[test]
    fn a_verify_row_carries_drafts_then_pads_and_a_prefill_chunk_its_last_logit() {
        let limits = SchedulerLimits {
            max_num_seqs: 4,
            max_num_batched_tokens: 64,
        };
        let mut s = Scheduler::new(limits, BlockManager::new(16, 4, false));
        s.add(Sequence::new(1, vec![10, 11, 12, 13, 14]));
        let _ = s.schedule(&|_| 0, crate::scheduler::TokenBudget::all(64));
        s.get_mut(1).unwrap().tokens.push(42);
        s.set_computed(1, 5);
        s.add(Sequence::new(2, vec![20, 21, 22]));
        // Sequence 1 verifies one real draft token in K = 3 padded slots.
        let drafts = StepDrafts::from_rows(
            3,
            vec![crate::spec_decode::drafts::DraftRow {
                id: 1,
                tokens: vec![7],
                slots: 3,
                scores: None,
                dynamic: false,
                forced: 0,
                from_drafter: true,
            }],
        );
        let plan = s.schedule(
            &|id| drafts.slots_for(id),
            crate::scheduler::TokenBudget::all(64),
        );
        let (input, rows) = build(&plan, &s, &drafts);
        assert_eq!(input.tokens, vec![42, 7, PAD_TOKEN, PAD_TOKEN, 20, 21, 22]);
        assert_eq!(input.positions, vec![5, 6, 7, 8, 0, 1, 2]);
        assert_eq!(input.logit_rows, vec![0, 1, 2, 3, 6]);
        let shape: Vec<_> = input
            .seqs
            .iter()
            .map(|q| (q.query_start, q.query_len, q.context_len))
            .collect();
        assert_eq!(shape, vec![(0, 4, 9), (4, 3, 3)]);
        let firsts: Vec<_> = rows
            .iter()
            .map(|r| (r.slots, r.completes, r.first_logit))
            .collect();
        assert_eq!(firsts, vec![(3, true, 0), (0, true, 4)]);
    }
}
