//! The global tree and its bookkeeping (which responses it holds, oldest first), changed
//! only through [`GlobalOp`]s so that the changes can be applied at once or later, in
//! order, on another thread (see `SuffixDrafter::enable_deferred_global`).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

use crate::tree::{EdgeHasher, SeqId, SuffixTree};
use crate::SuffixConfig;

/// Request-id maps: ids are engine-chosen integers, no need for a DoS-resistant hash.
pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<EdgeHasher>>;

/// One change to the global tree, in the order the drafter saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GlobalOp {
    /// A request started: a previous response under its id goes, a new one is admitted.
    Start(u64),
    /// Tokens the request emitted.
    Append(u64, Vec<u32>),
    /// The request completed: its response stays (sealed).
    Stop(u64),
    /// The request was aborted: its response goes.
    Abort(u64),
    /// Empty the tree and admit these (active) requests anew, in this order.
    Reset(Vec<u64>),
}

#[derive(Debug)]
pub(crate) struct GlobalCache {
    pub(crate) tree: SuffixTree,
    /// Responses in the tree, oldest first (key: admission order).
    cached: BTreeMap<u64, (u64, SeqId)>,
    /// Request id -> (admission order, sequence in the tree).
    cached_by_id: IdMap<(u64, SeqId)>,
    next_admission: u64,
    enabled: bool,
    max_cached_requests: Option<usize>,
    max_cached_tokens: Option<usize>,
}

impl GlobalCache {
    pub(crate) fn new(cfg: &SuffixConfig) -> Self {
        Self {
            tree: SuffixTree::new(cfg.max_tree_depth),
            cached: BTreeMap::new(),
            cached_by_id: IdMap::default(),
            next_admission: 0,
            enabled: cfg.global_enabled(),
            max_cached_requests: cfg.max_cached_requests,
            max_cached_tokens: cfg.max_cached_tokens,
        }
    }

    /// The sequence holding `id`'s response, if cached.
    pub(crate) fn response(&self, id: u64) -> Option<SeqId> {
        self.cached_by_id.get(&id).map(|&(_, seq)| seq)
    }

    pub(crate) fn num_cached(&self) -> usize {
        self.cached.len()
    }

    pub(crate) fn apply(&mut self, op: GlobalOp) {
        match op {
            GlobalOp::Start(id) => {
                self.evict_id(id);
                if self.enabled {
                    self.admit(id);
                    self.evict_over_request_limit(id);
                }
            }
            GlobalOp::Append(id, tokens) => {
                if let Some(seq) = self.response(id) {
                    if !self.tree.extend(seq, &tokens) {
                        // Full to its counters' limit: drop this response from the tree.
                        self.evict_id(id);
                    }
                    self.evict_over_token_budget(id);
                }
            }
            GlobalOp::Stop(id) => {
                if let Some(seq) = self.response(id) {
                    self.tree.seal(seq);
                }
            }
            GlobalOp::Abort(id) => {
                self.evict_id(id);
            }
            GlobalOp::Reset(active) => {
                self.tree.clear();
                self.cached.clear();
                self.cached_by_id.clear();
                if self.enabled {
                    for id in active {
                        self.admit(id);
                    }
                }
            }
        }
    }

    fn admit(&mut self, id: u64) {
        let seq = self.tree.add_sequence();
        let order = self.next_admission;
        self.next_admission += 1;
        self.cached.insert(order, (id, seq));
        self.cached_by_id.insert(id, (order, seq));
    }

    /// Takes a response out of the tree; false when it is not there.
    fn evict_id(&mut self, id: u64) -> bool {
        match self.cached_by_id.remove(&id) {
            Some((order, seq)) => {
                self.cached.remove(&order);
                self.tree.remove(seq);
                true
            }
            None => false,
        }
    }

    /// Evicts the oldest response other than `keep`'s; false when there is none.
    fn evict_oldest_except(&mut self, keep: Option<u64>) -> bool {
        let victim = self
            .cached
            .values()
            .map(|&(id, _)| id)
            .find(|&id| Some(id) != keep);
        victim.is_some_and(|id| self.evict_id(id))
    }

    fn evict_over_request_limit(&mut self, newest: u64) {
        if let Some(limit) = self.max_cached_requests {
            while self.cached.len() > limit && self.evict_oldest_except(Some(newest)) {}
        }
    }

    /// Oldest first; the request being appended to goes last, and goes too if it alone is
    /// over the budget.
    fn evict_over_token_budget(&mut self, current: u64) {
        if let Some(budget) = self.max_cached_tokens {
            while self.tree.num_tokens() > budget {
                if !self.evict_oldest_except(Some(current)) && !self.evict_id(current) {
                    break;
                }
            }
        }
    }

    /// The tree's invariants and the cache bookkeeping.
    pub(crate) fn check_integrity(&self) -> Result<(), String> {
        self.tree
            .check_integrity()
            .map_err(|e| format!("global tree: {e}"))?;
        if self.cached.len() != self.cached_by_id.len() || self.cached.len() != self.tree.num_seqs()
        {
            return Err("cache bookkeeping out of step with the global tree".into());
        }
        if let Some(limit) = self.max_cached_requests {
            if self.cached.len() > limit.max(1) {
                return Err(format!(
                    "{} cached responses over the limit {limit}",
                    self.cached.len()
                ));
            }
        }
        if let Some(budget) = self.max_cached_tokens {
            if self.tree.num_tokens() > budget {
                return Err(format!(
                    "{} cached tokens over the budget {budget}",
                    self.tree.num_tokens()
                ));
            }
        }
        Ok(())
    }
}
