//! The drafter the engine talks to: request lifecycle, the global tree and its eviction.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

use rayon::prelude::*;

use crate::config::MAX_TREE_DEPTH_LIMIT;
use crate::tree::{EdgeHasher, SeqId, SpecParams, SuffixTree, MAX_TREE_TOKENS};

/// Request-id maps: ids are engine-chosen integers, no need for a DoS-resistant hash.
type IdMap<V> = HashMap<u64, V, BuildHasherDefault<EdgeHasher>>;
use crate::{Draft, DrafterError, SuffixConfig};

/// Shape of a draft.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DraftMode {
    /// One chain: the most frequent continuation.
    Path,
    /// A token tree grown best-first by estimated probability (for tree verification).
    Tree,
}

/// Output length a request's own tree is sized for up front (it grows beyond if needed).
const EXPECTED_OUTPUT_TOKENS: usize = 512;

/// One in-flight request: a private tree over its prompt and everything emitted so far.
#[derive(Debug)]
struct ActiveRequest {
    tree: SuffixTree,
    seq: SeqId,
}

/// Suffix-tree drafter. Not internally locked: `speculate*` take `&self` and may run in
/// parallel (the batch call does); mutations take `&mut self`.
///
/// A request's output enters the global tree as it is appended (as in ArcticInference), so
/// concurrent requests can already draft from it; `stop_request` keeps it there and
/// `abort_request` takes it out again.
#[derive(Debug)]
pub struct SuffixDrafter {
    cfg: SuffixConfig,
    active: IdMap<ActiveRequest>,
    global: SuffixTree,
    /// Responses in the global tree, oldest first (key: admission order).
    cached: BTreeMap<u64, (u64, SeqId)>,
    /// Request id -> (admission order, sequence in the global tree).
    cached_by_id: IdMap<(u64, SeqId)>,
    next_admission: u64,
}

impl SuffixDrafter {
    /// Creates a drafter. Out-of-range parameters are clamped to the nearest usable value
    /// (non-finite ones fall back to the defaults); use `try_new` to have them rejected.
    pub fn new(cfg: SuffixConfig) -> Self {
        Self::build(sanitize(cfg))
    }

    /// Creates a drafter, rejecting unusable parameters.
    pub fn try_new(cfg: SuffixConfig) -> Result<Self, DrafterError> {
        cfg.validate()?;
        Ok(Self::build(cfg))
    }

    fn build(cfg: SuffixConfig) -> Self {
        Self {
            global: SuffixTree::new(cfg.max_tree_depth),
            cfg,
            active: IdMap::default(),
            cached: BTreeMap::new(),
            cached_by_id: IdMap::default(),
            next_admission: 0,
        }
    }

    pub fn config(&self) -> &SuffixConfig {
        &self.cfg
    }

    fn global_enabled(&self) -> bool {
        self.cfg.max_cached_requests != Some(0) && self.cfg.max_cached_tokens != Some(0)
    }

    fn check_vocab(&self, id: u64, tokens: &[u32]) -> Result<(), DrafterError> {
        if let Some(vocab_size) = self.cfg.vocab_size {
            if let Some(position) = tokens.iter().position(|&t| t >= vocab_size) {
                return Err(DrafterError::OutOfVocabulary {
                    id,
                    token: tokens[position],
                    position,
                    vocab_size,
                });
            }
        }
        Ok(())
    }

    /// Registers a request and indexes its prompt. A previous cached response under the same
    /// id is evicted first.
    pub fn start_request(&mut self, id: u64, prompt: &[u32]) -> Result<(), DrafterError> {
        if self.active.contains_key(&id) {
            return Err(DrafterError::AlreadyActive(id));
        }
        if prompt.is_empty() {
            return Err(DrafterError::EmptyPrompt(id));
        }
        self.check_vocab(id, prompt)?;
        let mut tree = SuffixTree::new(self.cfg.max_tree_depth);
        tree.reserve(prompt.len() + EXPECTED_OUTPUT_TOKENS);
        let seq = tree.add_sequence();
        if !tree.extend(seq, prompt) {
            return Err(DrafterError::TooLong(MAX_TREE_TOKENS as u64));
        }
        self.active.insert(id, ActiveRequest { tree, seq });
        self.evict_id(id);
        if self.global_enabled() {
            self.admit(id);
            self.evict_over_request_limit(id);
        }
        Ok(())
    }

    fn admit(&mut self, id: u64) {
        let seq = self.global.add_sequence();
        let order = self.next_admission;
        self.next_admission += 1;
        self.cached.insert(order, (id, seq));
        self.cached_by_id.insert(id, (order, seq));
    }

    /// Takes a response out of the global tree; false when it is not there.
    fn evict_id(&mut self, id: u64) -> bool {
        match self.cached_by_id.remove(&id) {
            Some((order, seq)) => {
                self.cached.remove(&order);
                self.global.remove(seq);
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
        if let Some(limit) = self.cfg.max_cached_requests {
            while self.cached.len() > limit && self.evict_oldest_except(Some(newest)) {}
        }
    }

    /// Oldest first; the request being appended to goes last, and goes too if it alone is
    /// over the budget.
    fn evict_over_token_budget(&mut self, current: u64) {
        if let Some(budget) = self.cfg.max_cached_tokens {
            while self.global.num_tokens() > budget {
                if !self.evict_oldest_except(Some(current)) && !self.evict_id(current) {
                    break;
                }
            }
        }
    }

    /// Records tokens the request actually emitted (never rejected draft tokens).
    pub fn append(&mut self, id: u64, tokens: &[u32]) -> Result<(), DrafterError> {
        self.check_vocab(id, tokens)?;
        let req = self
            .active
            .get_mut(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        if !req.tree.extend(req.seq, tokens) {
            return Err(DrafterError::TooLong(MAX_TREE_TOKENS as u64));
        }
        if let Some(&(_, seq)) = self.cached_by_id.get(&id) {
            if !self.global.extend(seq, tokens) {
                // The global tree is full to its counters' limit: drop this response from it.
                self.evict_id(id);
            }
            self.evict_over_token_budget(id);
        }
        Ok(())
    }

    /// Ends a request; its response stays in the global tree (until evicted).
    pub fn stop_request(&mut self, id: u64) -> Result<(), DrafterError> {
        self.active
            .remove(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        if let Some(&(_, seq)) = self.cached_by_id.get(&id) {
            self.global.seal(seq);
        }
        Ok(())
    }

    /// Ends a request and takes its response out of the global tree.
    pub fn abort_request(&mut self, id: u64) -> Result<(), DrafterError> {
        self.active
            .remove(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        self.evict_id(id);
        Ok(())
    }

    /// Path-mode draft of up to `max_k` tokens for an active request.
    pub fn speculate(&self, id: u64, max_k: usize) -> Result<Draft, DrafterError> {
        self.speculate_mode(id, max_k, DraftMode::Path)
    }

    /// Tree-mode draft of up to `max_k` tokens (tokens plus parent indices).
    pub fn speculate_tree(&self, id: u64, max_k: usize) -> Result<Draft, DrafterError> {
        self.speculate_mode(id, max_k, DraftMode::Tree)
    }

    /// Drafts from the request's own tree and from the global tree over the last
    /// `max_tree_depth` tokens of its sequence; the higher score wins, ties go to its own tree.
    pub fn speculate_mode(
        &self,
        id: u64,
        max_k: usize,
        mode: DraftMode,
    ) -> Result<Draft, DrafterError> {
        let req = self
            .active
            .get(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        let params = SpecParams {
            max_k,
            max_spec_factor: self.cfg.max_spec_factor,
            max_spec_offset: self.cfg.max_spec_offset,
            min_token_prob: self.cfg.min_token_prob,
            tree: mode == DraftMode::Tree,
        };
        let context = req.tree.tokens(req.seq).unwrap_or_default();
        let own = req.tree.speculate_after(context, Some(req.seq), &params);
        if self.global.num_tokens() == 0 {
            return Ok(own);
        }
        let response = self.cached_by_id.get(&id).map(|&(_, seq)| seq);
        let global = self.global.speculate_after(context, response, &params);
        Ok(if own.score >= global.score {
            own
        } else {
            global
        })
    }

    /// Path-mode drafts for a whole batch of `(request id, max_k)`, in parallel.
    pub fn speculate_batch(&self, reqs: &[(u64, usize)]) -> Vec<Result<Draft, DrafterError>> {
        self.speculate_batch_mode(reqs, DraftMode::Path)
    }

    pub fn speculate_batch_mode(
        &self,
        reqs: &[(u64, usize)],
        mode: DraftMode,
    ) -> Vec<Result<Draft, DrafterError>> {
        // Waking the pool costs tens of µs, more than a few µs-long drafts: 8 requests took
        // 42 µs through rayon vs ~25 µs in a loop (BENCHMARKS.md, drafter section), so small batches
        // stay on the calling thread and large ones split into tasks of several requests.
        const PARALLEL_FROM: usize = 16;
        const MIN_PER_TASK: usize = 8;
        if reqs.len() < PARALLEL_FROM {
            return reqs
                .iter()
                .map(|&(id, k)| self.speculate_mode(id, k, mode))
                .collect();
        }
        reqs.par_iter()
            .with_min_len(MIN_PER_TASK)
            .map(|&(id, k)| self.speculate_mode(id, k, mode))
            .collect()
    }

    /// Empties the global tree. Active requests keep going; their next tokens are cached anew.
    pub fn reset_global(&mut self) {
        self.global.clear();
        self.cached.clear();
        self.cached_by_id.clear();
        if self.global_enabled() {
            let mut ids: Vec<u64> = self.active.keys().copied().collect();
            ids.sort_unstable();
            for id in ids {
                self.admit(id);
            }
        }
    }

    /// Bytes held by the global tree.
    pub fn global_memory_bytes(&self) -> usize {
        self.global.memory_bytes()
    }

    /// Bytes held by the active requests' own trees.
    pub fn active_memory_bytes(&self) -> usize {
        self.active.values().map(|r| r.tree.memory_bytes()).sum()
    }

    /// Response tokens indexed by the global tree.
    pub fn global_cached_tokens(&self) -> usize {
        self.global.num_tokens()
    }

    /// Responses indexed by the global tree (active ones included).
    pub fn global_cached_requests(&self) -> usize {
        self.cached.len()
    }

    pub fn num_active(&self) -> usize {
        self.active.len()
    }

    pub fn is_active(&self, id: u64) -> bool {
        self.active.contains_key(&id)
    }

    /// Tokens of an active request (prompt and emitted output).
    pub fn request_tokens(&self, id: u64) -> Option<&[u32]> {
        self.active.get(&id).and_then(|r| r.tree.tokens(r.seq))
    }

    /// The global tree (read-only; for tests and diagnostics).
    pub fn global_tree(&self) -> &SuffixTree {
        &self.global
    }

    /// Checks every tree's invariants and the cache bookkeeping.
    pub fn check_integrity(&self) -> Result<(), String> {
        self.global
            .check_integrity()
            .map_err(|e| format!("global tree: {e}"))?;
        for (id, req) in &self.active {
            req.tree
                .check_integrity()
                .map_err(|e| format!("request {id}: {e}"))?;
        }
        if self.cached.len() != self.cached_by_id.len()
            || self.cached.len() != self.global.num_seqs()
        {
            return Err("cache bookkeeping out of step with the global tree".into());
        }
        if let Some(limit) = self.cfg.max_cached_requests {
            if self.cached.len() > limit.max(1) {
                return Err(format!(
                    "{} cached responses over the limit {limit}",
                    self.cached.len()
                ));
            }
        }
        if let Some(budget) = self.cfg.max_cached_tokens {
            if self.global.num_tokens() > budget {
                return Err(format!(
                    "{} cached tokens over the budget {budget}",
                    self.global.num_tokens()
                ));
            }
        }
        Ok(())
    }
}

fn sanitize(mut cfg: SuffixConfig) -> SuffixConfig {
    let d = SuffixConfig::default();
    cfg.max_tree_depth = cfg.max_tree_depth.clamp(1, MAX_TREE_DEPTH_LIMIT);
    if !cfg.max_spec_factor.is_finite() {
        cfg.max_spec_factor = d.max_spec_factor;
    }
    cfg.max_spec_factor = cfg.max_spec_factor.max(0.0);
    if !cfg.max_spec_offset.is_finite() {
        cfg.max_spec_offset = d.max_spec_offset;
    }
    if !cfg.min_token_prob.is_finite() {
        cfg.min_token_prob = d.min_token_prob;
    }
    if cfg.vocab_size == Some(0) {
        cfg.vocab_size = None;
    }
    cfg
}
