//! Continuous batching: each step takes the running sequences' decode or verify
//! rows first (never cut for a prefill), then the next chunks of unfinished
//! prefills and admissions of waiting sequences under the step's prefill budget
//! (`step_budget.rs` sizes it from a step-time target), while there is a free slot
//! and KV blocks.
//! When a running sequence needs a block and none is free, the most recently
//! admitted running sequence is preempted: its blocks are freed and it returns to
//! the front of the queue to be recomputed (its full blocks usually come back from
//! the prefix cache).

use std::collections::{HashMap, VecDeque};

use crate::block_manager::BlockManager;
use crate::sequence::Sequence;

#[derive(Debug, Clone, Copy)]
pub struct SchedulerLimits {
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
}

/// One sequence's share of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    pub id: u64,
    /// Known tokens fed this step: `tokens[num_computed .. num_computed + num_tokens]`.
    pub num_tokens: usize,
    /// Draft slots appended after them (verify steps only).
    pub num_slots: usize,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepPlan {
    pub scheduled: Vec<Scheduled>,
    pub preempted: Vec<u64>,
}

impl StepPlan {
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty()
    }
    pub fn num_tokens(&self) -> usize {
        self.scheduled
            .iter()
            .map(|s| s.num_tokens + s.num_slots)
            .sum()
    }
}

/// What one step may take: `total` tokens in all (decode/verify rows included; the
/// scheduler's own cap still applies) and `prefill` of them for prefill chunks and
/// admissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBudget {
    pub total: usize,
    pub prefill: usize,
}

impl TokenBudget {
    /// Everything up to `n` tokens, prefill included (the fixed budget).
    pub fn all(n: usize) -> Self {
        Self {
            total: n,
            prefill: n,
        }
    }
}

/// Prefill work that could join the next step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefillDemand {
    pub seqs: usize,
    /// Tokens without KV yet (a waiting sequence's prefix-cache hits are not known
    /// before admission, so they count too).
    pub tokens: usize,
}

#[derive(Debug)]
pub struct Scheduler {
    limits: SchedulerLimits,
    pub blocks: BlockManager,
    seqs: HashMap<u64, Sequence>,
    waiting: VecDeque<u64>,
    running: Vec<u64>,
    /// Blocks kept free when admitting, so a new arrival does not force an
    /// immediate preemption.
    watermark_blocks: usize,
    num_preemptions: u64,
}

impl Scheduler {
    pub fn new(limits: SchedulerLimits, blocks: BlockManager) -> Self {
        let watermark_blocks = blocks.num_blocks() / 100;
        Self {
            limits,
            blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            watermark_blocks,
            num_preemptions: 0,
        }
    }

    pub fn add(&mut self, seq: Sequence) {
        let id = seq.id;
        self.seqs.insert(id, seq);
        self.waiting.push_back(id);
    }

    pub fn get(&self, id: u64) -> Option<&Sequence> {
        self.seqs.get(&id)
    }
    pub fn get_mut(&mut self, id: u64) -> Option<&mut Sequence> {
        self.seqs.get_mut(&id)
    }
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }
    pub fn num_running(&self) -> usize {
        self.running.len()
    }
    pub fn has_work(&self) -> bool {
        !self.seqs.is_empty()
    }
    pub fn num_preemptions(&self) -> u64 {
        self.num_preemptions
    }
    pub fn ids(&self) -> Vec<u64> {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .copied()
            .collect()
    }
    /// Running sequences that will decode (or verify) if scheduled now.
    pub fn decoding_ids(&self) -> Vec<u64> {
        self.running
            .iter()
            .copied()
            .filter(|id| self.seqs[id].is_decoding())
            .collect()
    }

    /// Unfinished prefills of running sequences, and waiting sequences while a
    /// running slot is free for them: what the next step's budget may take besides
    /// decode and verify rows.
    pub fn prefill_demand(&self) -> PrefillDemand {
        let free_slots = self.limits.max_num_seqs.saturating_sub(self.running.len());
        let prefilling = self
            .running
            .iter()
            .filter(|id| !self.seqs[*id].is_decoding());
        let mut d = PrefillDemand::default();
        for id in prefilling.chain(self.waiting.iter().take(free_slots)) {
            let s = &self.seqs[id];
            d.seqs += 1;
            d.tokens += s.len() - s.num_computed;
        }
        d
    }

    /// Removes a sequence (finished or aborted) and frees all its blocks at once.
    pub fn remove(&mut self, id: u64) -> Option<Sequence> {
        let mut seq = self.seqs.remove(&id)?;
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&w| w != id);
        self.blocks.free_all(&mut seq.blocks);
        Some(seq)
    }

    /// Where the next prefill chunk starts: the first unfinished prefill's computed
    /// length, else 0 (a waiting sequence; its prefix-cache hits are not known yet).
    pub fn next_prefill_position(&self) -> usize {
        self.running
            .iter()
            .map(|id| &self.seqs[id])
            .find(|s| !s.is_decoding())
            .map_or(0, |s| s.num_computed)
    }

    /// Plans one step. `slots(id)` is the number of draft slots a decoding sequence
    /// carries this step (0 without speculation). Decode and verify rows go first,
    /// under the hard cap only; then unfinished prefills and admissions, in arrival
    /// order, under `budget.prefill` and what the cap leaves.
    pub fn schedule(&mut self, slots: &dyn Fn(u64) -> usize, budget: TokenBudget) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut total = budget.total.min(self.limits.max_num_batched_tokens);
        let (decoding, prefilling): (Vec<u64>, Vec<u64>) = self
            .running
            .iter()
            .partition(|id| self.seqs[*id].is_decoding());

        for id in decoding {
            if total == 0 {
                break;
            }
            if !self.running.contains(&id) {
                continue; // preempted for an earlier sequence's blocks
            }
            let s = slots(id);
            if 1 + s > total {
                // A verify row is all or nothing; it waits for the next step.
                continue;
            }
            if !self.allocate_or_preempt(id, 1 + s, &mut plan) {
                break;
            }
            plan.scheduled.push(Scheduled {
                id,
                num_tokens: 1,
                num_slots: s,
            });
            total -= 1 + s;
        }

        let mut prefill = budget.prefill.min(total);
        for id in prefilling {
            if prefill == 0 {
                break;
            }
            if !self.running.contains(&id) {
                continue;
            }
            let seq = &self.seqs[&id];
            let num_tokens = (seq.len() - seq.num_computed).min(prefill);
            if !self.allocate_or_preempt(id, num_tokens, &mut plan) {
                break;
            }
            plan.scheduled.push(Scheduled {
                id,
                num_tokens,
                num_slots: 0,
            });
            prefill -= num_tokens;
        }

        // No admissions in a step that had to preempt: memory is tight.
        if plan.preempted.is_empty() {
            while prefill > 0 && self.running.len() < self.limits.max_num_seqs {
                let Some(&id) = self.waiting.front() else {
                    break;
                };
                match self.try_admit(id, prefill) {
                    Some(num_tokens) => {
                        self.waiting.pop_front();
                        self.running.push(id);
                        plan.scheduled.push(Scheduled {
                            id,
                            num_tokens,
                            num_slots: 0,
                        });
                        prefill -= num_tokens;
                    }
                    None => break,
                }
            }
        }
        plan
    }

    /// Allocates blocks for `id`'s next `n` positions, preempting the most recently
    /// admitted running sequence not yet in the plan while none are free. False when
    /// `id` itself had to go.
    fn allocate_or_preempt(&mut self, id: u64, n: usize, plan: &mut StepPlan) -> bool {
        loop {
            let seq = self.seqs.get_mut(&id).expect("running seq");
            let target = seq.num_computed + n;
            if self.blocks.allocate(&mut seq.blocks, target) {
                return true;
            }
            let victim = *self
                .running
                .iter()
                .rev()
                .find(|v| !plan.scheduled.iter().any(|s| s.id == **v))
                .expect("id itself is running and not yet planned");
            self.preempt(victim);
            plan.preempted.push(victim);
            if victim == id {
                return false;
            }
        }
    }

    /// Takes prefix-cache hits and blocks for the first chunk of a waiting
    /// sequence; returns the chunk length, or None when blocks are short.
    fn try_admit(&mut self, id: u64, budget: usize) -> Option<usize> {
        let bs = self.blocks.block_size();
        let seq = self.seqs.get_mut(&id).expect("waiting seq");
        debug_assert_eq!(seq.num_computed, 0);
        self.blocks
            .extend_hashes(&seq.tokens, &mut seq.block_hashes);
        // At least one token must be computed to get logits for the next token.
        let max_hit_blocks = (seq.len() - 1) / bs;
        let hits = self
            .blocks
            .find_cached_prefix(&seq.tokens, &seq.block_hashes, max_hit_blocks);
        let hit_tokens = hits.len() * bs;
        let num_tokens = (seq.len() - hit_tokens).min(budget);
        let free_hits = hits
            .iter()
            .filter(|&&b| self.blocks.ref_count(b) == 0)
            .count();
        let new_blocks = self.blocks.blocks_for(hit_tokens + num_tokens) - hits.len();
        let reserve = if self.running.is_empty() {
            0
        } else {
            self.watermark_blocks
        };
        if self.blocks.num_free_blocks() < free_hits + new_blocks + reserve {
            return None;
        }
        let seq = self.seqs.get_mut(&id).expect("waiting seq");
        self.blocks.take_cached(&hits, &mut seq.blocks);
        let ok = self
            .blocks
            .allocate(&mut seq.blocks, hit_tokens + num_tokens);
        debug_assert!(ok, "checked above");
        seq.num_computed = hit_tokens;
        seq.num_committed_blocks = hits.len();
        if !seq.admitted_once {
            seq.admitted_once = true;
            seq.cached_prompt_tokens = hit_tokens;
            self.blocks.record_query(seq.prompt_len, hit_tokens);
        }
        Some(num_tokens)
    }

    fn preempt(&mut self, id: u64) {
        self.running.retain(|&r| r != id);
        let seq = self.seqs.get_mut(&id).expect("preempted seq");
        self.blocks.free_all(&mut seq.blocks);
        seq.num_computed = 0;
        seq.num_committed_blocks = 0;
        seq.num_preemptions += 1;
        self.num_preemptions += 1;
        self.waiting.push_front(id);
    }

    /// After a step: `id` now has KV for its first `num_computed` tokens (KV written
    /// past that, e.g. for rejected drafts, is dropped with its blocks), and its
    /// full blocks join the prefix cache.
    pub fn set_computed(&mut self, id: u64, num_computed: usize) {
        let seq = self.seqs.get_mut(&id).expect("scheduled seq");
        debug_assert!(num_computed <= seq.tokens.len());
        seq.num_computed = num_computed;
        self.blocks.truncate(&mut seq.blocks, num_computed);
        self.blocks
            .extend_hashes(&seq.tokens[..num_computed], &mut seq.block_hashes);
        seq.num_committed_blocks = self.blocks.commit_full_blocks(
            &seq.blocks,
            &seq.tokens,
            &seq.block_hashes,
            seq.num_committed_blocks,
            num_computed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: TokenBudget = TokenBudget {
        total: usize::MAX,
        prefill: usize::MAX,
    };

    fn sched(num_blocks: usize, bs: usize, max_seqs: usize, budget: usize) -> Scheduler {
        Scheduler::new(
            SchedulerLimits {
                max_num_seqs: max_seqs,
                max_num_batched_tokens: budget,
            },
            BlockManager::new(num_blocks, bs, true),
        )
    }

    fn prompt(n: usize, base: u32) -> Vec<u32> {
        (0..n as u32).map(|i| base + i).collect()
    }

    /// Pretends the model ran the plan: prefills advance, finished prefills and
    /// decodes emit `tok`, verify rows accept nothing.
    fn run_step(s: &mut Scheduler, plan: &StepPlan, tok: u32) {
        for sc in &plan.scheduled {
            let seq = s.get(sc.id).unwrap();
            let end = seq.num_computed + sc.num_tokens;
            if end == seq.len() {
                s.get_mut(sc.id).unwrap().tokens.push(tok);
            }
            s.set_computed(sc.id, end);
        }
    }

    #[test]
    fn chunked_prefill_respects_the_token_budget() {
        let mut s = sched(64, 4, 8, 10);
        s.add(Sequence::new(1, prompt(25, 0)));
        let mut chunks = vec![];
        loop {
            let plan = s.schedule(&|_| 0, ALL);
            chunks.push(plan.scheduled[0].num_tokens);
            run_step(&mut s, &plan, 9);
            if s.get(1).unwrap().num_output() == 1 {
                break;
            }
        }
        assert_eq!(chunks, vec![10, 10, 5]);
        assert!(s.get(1).unwrap().is_decoding());
    }

    #[test]
    fn prefill_demand_counts_unfinished_and_admittable_prompts() {
        let mut s = sched(64, 4, 2, 10);
        for (id, len) in [(1, 25), (2, 7), (3, 9)] {
            s.add(Sequence::new(id, prompt(len, id as u32 * 100)));
        }
        // Nothing runs: the two that fit the free slots wait.
        assert_eq!(
            s.prefill_demand(),
            PrefillDemand {
                seqs: 2,
                tokens: 32
            }
        );
        let plan = s.schedule(&|_| 0, ALL);
        run_step(&mut s, &plan, 9);
        // 1 has 15 tokens left; one slot is free for 2 (3 waits behind it).
        assert_eq!(
            s.prefill_demand(),
            PrefillDemand {
                seqs: 2,
                tokens: 22
            }
        );
        for _ in 0..2 {
            let plan = s.schedule(&|_| 0, ALL);
            run_step(&mut s, &plan, 9);
        }
        // 1 decodes now; 2 has its last 2 tokens; no slot is free for 3.
        assert!(s.get(1).unwrap().is_decoding());
        assert_eq!(s.prefill_demand(), PrefillDemand { seqs: 1, tokens: 2 });
    }

    #[test]
    fn decodes_go_first_and_max_num_seqs_caps_admission() {
        let mut s = sched(64, 4, 2, 100);
        for id in 1..=3 {
            s.add(Sequence::new(id, prompt(6, id as u32 * 100)));
        }
        let plan = s.schedule(&|_| 0, ALL);
        assert_eq!(
            plan.scheduled.iter().map(|x| x.id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        run_step(&mut s, &plan, 7);
        let plan = s.schedule(&|_| 3, ALL);
        assert_eq!(
            plan.scheduled,
            vec![
                Scheduled {
                    id: 1,
                    num_tokens: 1,
                    num_slots: 3
                },
                Scheduled {
                    id: 2,
                    num_tokens: 1,
                    num_slots: 3
                }
            ]
        );
        s.remove(1);
        let plan = s.schedule(&|_| 0, ALL);
        assert_eq!(plan.scheduled.last().unwrap().id, 3);
    }

    #[test]
    fn decode_rows_go_before_an_earlier_prefill_which_gets_the_prefill_budget() {
        let mut s = sched(64, 4, 4, 100);
        s.add(Sequence::new(2, prompt(3, 200)));
        let plan = s.schedule(&|_| 0, ALL);
        run_step(&mut s, &plan, 7); // 2 decodes now
        s.add(Sequence::new(1, prompt(40, 0)));
        let budget = TokenBudget {
            total: 12,
            prefill: 6,
        };
        let plan = s.schedule(&|_| 0, budget);
        assert_eq!(
            plan.scheduled,
            vec![
                Scheduled {
                    id: 2,
                    num_tokens: 1,
                    num_slots: 0
                },
                Scheduled {
                    id: 1,
                    num_tokens: 6,
                    num_slots: 0
                }
            ]
        );
        run_step(&mut s, &plan, 7);
        assert_eq!(s.next_prefill_position(), 6);
        // A verify row of 1 + 8 still fits; the prefill gets what the total leaves.
        let plan = s.schedule(&|id| if id == 2 { 8 } else { 0 }, budget);
        assert_eq!(plan.scheduled[0].num_slots, 8);
        assert_eq!(plan.scheduled[1].num_tokens, 3);
    }

    #[test]
    fn out_of_blocks_preempts_the_newest_and_it_resumes_later() {
        // 4 blocks of 4 tokens; two 8-token prompts take 2 blocks each.
        let mut s = sched(4, 4, 4, 100);
        s.add(Sequence::new(1, prompt(8, 0)));
        s.add(Sequence::new(2, prompt(8, 50)));
        let plan = s.schedule(&|_| 0, ALL);
        assert_eq!(plan.scheduled.len(), 2);
        run_step(&mut s, &plan, 1);
        // Both now hold 9 tokens; the next decode needs a third block each.
        let plan = s.schedule(&|_| 0, ALL);
        assert_eq!(plan.preempted, vec![2]);
        assert_eq!(
            plan.scheduled.iter().map(|x| x.id).collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(s.get(2).unwrap().num_computed, 0);
        assert_eq!(s.num_waiting(), 1);
        run_step(&mut s, &plan, 1);
        s.remove(1);
        assert_eq!(s.blocks.num_free_blocks(), 4);
        // Seq 2 comes back: its first full block is still cached (its second was
        // reused by seq 1), so 5 of its 9 tokens are recomputed.
        let plan = s.schedule(&|_| 0, ALL);
        assert_eq!(
            plan.scheduled,
            vec![Scheduled {
                id: 2,
                num_tokens: 5,
                num_slots: 0
            }]
        );
        assert_eq!(s.get(2).unwrap().num_computed, 4);
    }

    #[test]
    fn shared_prefix_is_served_from_cache_and_abort_frees_everything() {
        let mut s = sched(32, 4, 4, 100);
        let mut p2 = prompt(12, 0);
        p2.extend([77, 78]);
        s.add(Sequence::new(1, prompt(12, 0)));
        let plan = s.schedule(&|_| 0, ALL);
        run_step(&mut s, &plan, 5);
        s.add(Sequence::new(2, p2));
        let plan = s.schedule(&|_| 0, ALL);
        let b = plan.scheduled.iter().find(|x| x.id == 2).unwrap();
        assert_eq!(b.num_tokens, 2, "12 of 14 tokens come from the cache");
        assert_eq!(s.get(2).unwrap().cached_prompt_tokens, 12);
        // A prompt that is entirely cached still computes its last block's tail.
        s.add(Sequence::new(3, prompt(12, 0)));
        let plan = s.schedule(&|_| 0, ALL);
        let c = plan.scheduled.iter().find(|x| x.id == 3).unwrap();
        assert_eq!(c.num_tokens, 4);
        for id in [1, 2, 3] {
            s.remove(id);
        }
        assert_eq!(s.blocks.num_free_blocks(), 32);
        assert!(!s.has_work());
    }

    #[test]
    fn verify_rows_are_all_or_nothing_and_rejected_slots_free_their_blocks() {
        let mut s = sched(16, 4, 4, 100);
        s.add(Sequence::new(1, prompt(4, 0)));
        let plan = s.schedule(&|_| 0, ALL);
        run_step(&mut s, &plan, 3); // 5 tokens, 4 computed
        let plan = s.schedule(&|_| 8, ALL);
        assert_eq!(plan.scheduled[0].num_slots, 8);
        assert_eq!(
            s.get(1).unwrap().blocks.len(),
            4,
            "13 positions need 4 blocks"
        );
        // Accept 2 drafts + bonus: 3 new tokens, KV valid for 4 + 1 + 2.
        s.get_mut(1).unwrap().tokens.extend([1, 2, 3]);
        s.set_computed(1, 7);
        assert_eq!(s.get(1).unwrap().blocks.len(), 2);
        assert_eq!(s.blocks.num_free_blocks(), 14);
        // A budget too small for a whole verify row schedules nothing for it.
        let mut t = sched(16, 4, 4, 5);
        t.add(Sequence::new(1, prompt(4, 0)));
        let plan = t.schedule(&|_| 0, ALL);
        run_step(&mut t, &plan, 3);
        assert!(t.schedule(&|_| 8, ALL).is_empty());
    }
}
