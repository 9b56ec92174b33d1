//! Property tests: the drafter against the naive reference in `common`, over random token
//! streams, parameters and interleavings of start/append/stop/abort/eviction.

mod common;

use common::{drafter_path_valid, tree_draft_valid, tree_outcome, Naive};
use proptest::prelude::*;
use wring_suffix::{SuffixConfig, SuffixDrafter, SuffixTree};

#[derive(Clone, Debug)]
enum Op {
    Start(u64, Vec<u32>),
    Append(u64, Vec<u32>),
    Stop(u64),
    Abort(u64),
    Speculate(u64, usize),
}

fn op(alphabet: u32) -> impl Strategy<Value = Op> {
    let id = 0u64..4;
    let toks = |max| prop::collection::vec(0..alphabet, 0..max);
    prop_oneof![
        2 => (id.clone(), prop::collection::vec(0..alphabet, 1..12)).prop_map(|(i, p)| Op::Start(i, p)),
        6 => (id.clone(), toks(5)).prop_map(|(i, t)| Op::Append(i, t)),
        1 => id.clone().prop_map(Op::Stop),
        1 => id.clone().prop_map(Op::Abort),
        5 => (id, 0usize..7).prop_map(|(i, k)| Op::Speculate(i, k)),
    ]
}

fn config() -> impl Strategy<Value = SuffixConfig> {
    (
        1usize..9,
        prop_oneof![Just(1.0f32), 0.0f32..3.0],
        prop_oneof![Just(0.0f32), -1.0f32..2.0],
        prop_oneof![Just(0.1f32), 0.0f32..0.6],
        prop::option::of(1usize..4),
        prop::option::of(4usize..40),
    )
        .prop_map(|(d, f, o, p, r, t)| SuffixConfig {
            max_tree_depth: d,
            max_spec_factor: f,
            max_spec_offset: o,
            min_token_prob: p,
            max_cached_requests: r,
            max_cached_tokens: t,
            vocab_size: None,
        })
}

/// What the drafter should hold, kept as plain vectors.
#[derive(Default)]
struct Model {
    active: std::collections::BTreeMap<u64, Vec<u32>>,
    /// Responses in the global tree, oldest first.
    cached: Vec<(u64, Vec<u32>)>,
}

impl Model {
    fn evict(&mut self, id: u64) {
        self.cached.retain(|(i, _)| *i != id);
    }

    fn apply(&mut self, cfg: &SuffixConfig, op: &Op) -> bool {
        let enabled = cfg.max_cached_requests != Some(0) && cfg.max_cached_tokens != Some(0);
        match op {
            Op::Start(id, prompt) => {
                if self.active.contains_key(id) || prompt.is_empty() {
                    return false;
                }
                self.active.insert(*id, prompt.clone());
                self.evict(*id);
                if enabled {
                    self.cached.push((*id, Vec::new()));
                    if let Some(limit) = cfg.max_cached_requests {
                        while self.cached.len() > limit {
                            let pos = self.cached.iter().position(|(i, _)| i != id).unwrap();
                            self.cached.remove(pos);
                        }
                    }
                }
                true
            }
            Op::Append(id, toks) => {
                let Some(seq) = self.active.get_mut(id) else {
                    return false;
                };
                seq.extend_from_slice(toks);
                if let Some(entry) = self.cached.iter_mut().find(|(i, _)| i == id) {
                    entry.1.extend_from_slice(toks);
                    if let Some(budget) = cfg.max_cached_tokens {
                        while self.cached.iter().map(|(_, r)| r.len()).sum::<usize>() > budget {
                            let pos = self.cached.iter().position(|(i, _)| i != id).unwrap_or(0);
                            self.cached.remove(pos);
                        }
                    }
                }
                true
            }
            Op::Stop(id) => self.active.remove(id).is_some(),
            Op::Abort(id) => {
                let ok = self.active.remove(id).is_some();
                if ok {
                    self.evict(*id);
                }
                ok
            }
            Op::Speculate(id, _) => self.active.contains_key(id),
        }
    }
}

fn run(cfg: SuffixConfig, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut drafter = SuffixDrafter::try_new(cfg.clone()).unwrap();
    let mut model = Model::default();
    for op in &ops {
        let want_ok = model.apply(&cfg, op);
        let got = match op {
            Op::Start(id, p) => drafter.start_request(*id, p),
            Op::Append(id, t) => drafter.append(*id, t),
            Op::Stop(id) => drafter.stop_request(*id),
            Op::Abort(id) => drafter.abort_request(*id),
            Op::Speculate(id, k) => check_speculation(&drafter, &model, &cfg, *id, *k),
        };
        prop_assert_eq!(got.is_ok(), want_ok, "{:?}: {:?}", op, got);
        if let Err(e) = drafter.check_integrity() {
            return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
        }
        // The global tree must equal one built from scratch over the cached responses:
        // additions and removals in any order leave no trace.
        let mut fresh = SuffixTree::new(cfg.max_tree_depth);
        for (_, r) in &model.cached {
            let s = fresh.add_sequence();
            fresh.extend(s, r);
        }
        prop_assert_eq!(
            drafter.global_tree().path_counts(),
            fresh.path_counts(),
            "after {:?}",
            op
        );
        prop_assert_eq!(drafter.global_cached_tokens(), fresh.num_tokens());
        prop_assert_eq!(drafter.num_active(), model.active.len());
    }
    Ok(())
}

fn check_speculation(
    drafter: &SuffixDrafter,
    model: &Model,
    cfg: &SuffixConfig,
    id: u64,
    k: usize,
) -> Result<(), wring_suffix::DrafterError> {
    let path = drafter.speculate(id, k)?;
    let tree = drafter.speculate_tree(id, k)?;
    let ctx = &model.active[&id];
    let own = Naive {
        seqs: vec![ctx.as_slice()],
        depth: cfg.max_tree_depth,
    };
    let global = Naive {
        seqs: model.cached.iter().map(|(_, r)| r.as_slice()).collect(),
        depth: cfg.max_tree_depth,
    };
    assert!(
        drafter_path_valid(&own, &global, cfg, ctx, k, &path),
        "path draft {path:?} is no valid outcome (ctx {ctx:?}, cached {:?})",
        model.cached
    );
    let own_t = tree_outcome(&own, cfg, ctx, k);
    let global_t = tree_outcome(&global, cfg, ctx, k);
    let (naive, want) = if own_t.2 >= global_t.2 {
        (&own, own_t)
    } else {
        (&global, global_t)
    };
    if let Err(e) = tree_draft_valid(naive, ctx, &want, &tree) {
        panic!(
            "tree draft {tree:?}: {e} (ctx {ctx:?}, cached {:?})",
            model.cached
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn drafter_matches_naive_reference(
        cfg in config(),
        alphabet in 2u32..10,
        ops in prop::collection::vec(op(12), 1..60),
    ) {
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|op| match op {
                Op::Start(i, p) => Op::Start(i, p.into_iter().map(|t| t % alphabet).collect()),
                Op::Append(i, t) => Op::Append(i, t.into_iter().map(|t| t % alphabet).collect()),
                other => other,
            })
            .collect();
        run(cfg, ops)?;
    }

    #[test]
    fn tree_add_remove_any_order(
        depth in 1usize..10,
        seqs in prop::collection::vec(prop::collection::vec(0u32..4, 0..30), 1..6),
        remove_order in prop::collection::vec(0usize..6, 0..6),
    ) {
        let mut tree = SuffixTree::new(depth);
        let ids: Vec<_> = seqs.iter().map(|s| {
            let id = tree.add_sequence();
            tree.extend(id, s);
            id
        }).collect();
        prop_assert_eq!(tree.check_integrity(), Ok(()));
        let mut kept: Vec<bool> = vec![true; seqs.len()];
        for i in remove_order {
            let i = i % seqs.len();
            prop_assert_eq!(tree.remove(ids[i]), kept[i]);
            kept[i] = false;
            prop_assert_eq!(tree.check_integrity(), Ok(()));
            let mut fresh = SuffixTree::new(depth);
            for (s, _) in seqs.iter().zip(&kept).filter(|(_, k)| **k) {
                let id = fresh.add_sequence();
                fresh.extend(id, s);
            }
            prop_assert_eq!(tree.path_counts(), fresh.path_counts());
        }
    }
}

proptest! {
    /// A sequence whose last `lag` tokens are not in the tree yet: following its window down
    /// by those tokens finds the same matches as walking each one from the root.
    #[test]
    fn lagged_window_drafts_equal_root_walks(
        others in prop::collection::vec(prop::collection::vec(0u32..4, 1..40), 0..4),
        tokens in prop::collection::vec(0u32..4, 2..80),
        lag in 0usize..10,
        depth in 1usize..24,
        max_k in 1usize..8,
        tree_mode in any::<bool>(),
    ) {
        let lag = lag.min(tokens.len() - 1);
        let mut t = SuffixTree::new(depth);
        for o in &others {
            let s = t.add_sequence();
            t.extend(s, o);
        }
        let seq = t.add_sequence();
        t.extend(seq, &tokens[..tokens.len() - lag]);
        let p = wring_suffix::SpecParams {
            max_k,
            max_spec_factor: 1.0,
            max_spec_offset: 0.0,
            min_token_prob: 0.1,
            tree: tree_mode,
        };
        prop_assert_eq!(
            t.speculate_after_lagged(&tokens, Some(seq), lag, &p),
            t.speculate(&tokens, &p)
        );
    }
}
