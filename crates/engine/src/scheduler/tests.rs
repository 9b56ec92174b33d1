//! The scheduler's unit tests (budgets, admission, preemption, prefix cache, verify rows).

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
