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
mod tests;
