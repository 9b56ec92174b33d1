//! The drafter the engine talks to: request lifecycle, batch drafts, deferred mode.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};

use rayon::prelude::*;

use crate::config::MAX_TREE_DEPTH_LIMIT;
use crate::global::{GlobalCache, GlobalOp, IdMap};
use crate::tree::{SeqId, SpecParams, SuffixTree, MAX_TREE_TOKENS};
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

/// Batches of at least this many requests draft on the rayon pool, in tasks of
/// `MIN_PER_TASK`. In serving the pool sleeps through each model step, and waking it costs
/// more than it saves: 32 drafts after a 2.5 ms idle gap took 150-220 µs through rayon vs
/// 70-90 µs in a loop, and 35-43 vs 21-23 µs without the gap (`serving_steps` example,
/// results/2026-12-01-drafter-deferred).
const PARALLEL_FROM: usize = 128;
const MIN_PER_TASK: usize = 16;

/// A request's private tree over its prompt and everything emitted so far.
#[derive(Debug)]
struct OwnTree {
    tree: SuffixTree,
    /// An append hit the tree's size limit (deferred appends report it at the next draft).
    too_long: bool,
}

/// One in-flight request. Its tree is shared with the deferred work that appends to it.
#[derive(Debug)]
struct ActiveRequest {
    own: Arc<Mutex<OwnTree>>,
    seq: SeqId,
    /// Deferred mode: tokens emitted since the work was last handed out. They are in
    /// neither tree yet; drafts follow both trees' windows down by them.
    recent: Vec<u32>,
    /// Its response in the global tree is the one its drafts may follow (false while
    /// its admission is queued: the id could still name an older response there).
    global_synced: bool,
}

fn lock_own(own: &Mutex<OwnTree>) -> MutexGuard<'_, OwnTree> {
    own.lock().unwrap_or_else(|e| e.into_inner())
}

/// Suffix-tree drafter. `speculate*` take `&self` and may run in parallel (the batch call
/// does); mutations take `&mut self`.
///
/// A request's output enters the global tree as it is appended (as in ArcticInference), so
/// concurrent requests can already draft from it; `stop_request` keeps it there and
/// `abort_request` takes it out again.
///
/// Deferred mode ([`Self::enable_deferred_global`], what the engine uses): appends to the
/// requests' own trees and every change to the global tree are queued until
/// [`Self::take_global_work`] hands them to the caller, who runs them on another thread
/// while the model computes. Drafts read trees one step behind and follow each tree's
/// window of the request's suffixes down by the tokens not yet added (read-only), which
/// finds the matches a walk from the root would: the drafts are those of trees without the
/// last step's tokens of other requests, deterministic (the work is always applied, in
/// order, before the next draft reads the trees), and verification keeps the output
/// lossless whatever the drafts are.
#[derive(Debug)]
pub struct SuffixDrafter {
    cfg: SuffixConfig,
    active: IdMap<ActiveRequest>,
    global: Arc<Mutex<GlobalCache>>,
    /// Deferred mode: global changes not yet handed out (None: applied at once).
    queued: Option<Vec<GlobalOp>>,
}

/// Queued changes to a drafter's global tree, to be applied (`run`) before its next draft;
/// the drafter's readers wait on the tree's lock while it runs.
#[must_use = "queued tree changes are lost unless run"]
pub struct GlobalWork {
    global: Arc<Mutex<GlobalCache>>,
    ops: Vec<GlobalOp>,
    /// Appends to the requests' own trees (each touches only its own tree).
    own: Vec<(Arc<Mutex<OwnTree>>, SeqId, Vec<u32>)>,
}

impl GlobalWork {
    /// Tokens the work adds to the trees (a measure of its cost: a few µs per token once
    /// the global tree is large).
    pub fn tokens(&self) -> usize {
        let global: usize = self
            .ops
            .iter()
            .map(|op| match op {
                GlobalOp::Append(_, t) => t.len(),
                _ => 1,
            })
            .sum();
        global + self.own.iter().map(|(_, _, t)| t.len()).sum::<usize>()
    }

    /// Applies the work: the global tree's changes in order, then the requests' own
    /// appends. One thread: it runs beside the model's step, whose host thread and the
    /// drafting pool should keep their cores.
    pub fn run(self) {
        {
            let mut g = lock(&self.global);
            for op in self.ops {
                g.apply(op);
            }
        }
        for (own, seq, tokens) in &self.own {
            let mut own = lock_own(own);
            if !own.tree.extend(*seq, tokens) {
                own.too_long = true;
            }
        }
    }
}

/// Read access to the global tree (holds its lock).
pub struct GlobalTreeRef<'a>(MutexGuard<'a, GlobalCache>);

impl Deref for GlobalTreeRef<'_> {
    type Target = SuffixTree;
    fn deref(&self) -> &SuffixTree {
        &self.0.tree
    }
}

/// A panic while applying global work leaves a tree that is still well formed (every op
/// completes or never starts its mutation), so a poisoned lock is taken over.
fn lock(global: &Mutex<GlobalCache>) -> MutexGuard<'_, GlobalCache> {
    global.lock().unwrap_or_else(|e| e.into_inner())
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
        let global = GlobalCache::new(&cfg);
        Self {
            global: Arc::new(Mutex::new(global)),
            cfg,
            active: IdMap::default(),
            queued: None,
        }
    }

    pub fn config(&self) -> &SuffixConfig {
        &self.cfg
    }

    /// Switches to deferred mode (see the type's docs); changes made so far stay applied.
    pub fn enable_deferred_global(&mut self) {
        self.queued.get_or_insert_with(Vec::new);
    }

    /// The global-tree changes queued since the last call (deferred mode), if any.
    pub fn take_global_work(&mut self) -> Option<GlobalWork> {
        let ops = std::mem::take(self.queued.as_mut()?);
        // The work runs before the next draft reads the trees (the caller's contract).
        let mut own = Vec::new();
        for r in self.active.values_mut() {
            r.global_synced = true;
            if !r.recent.is_empty() {
                own.push((Arc::clone(&r.own), r.seq, std::mem::take(&mut r.recent)));
            }
        }
        (!ops.is_empty() || !own.is_empty()).then(|| GlobalWork {
            global: Arc::clone(&self.global),
            ops,
            own,
        })
    }

    /// Applies every queued global change and deferred append now.
    pub fn catch_up(&mut self) {
        if let Some(work) = self.take_global_work() {
            work.run();
        }
    }

    fn global_op(&mut self, op: GlobalOp) {
        match self.queued.as_mut() {
            Some(q) => q.push(op),
            None => lock(&self.global).apply(op),
        }
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
        let deferred = self.queued.is_some();
        // Deferred mode: the prompt is indexed by the next work, like emitted tokens.
        if !deferred && !tree.extend(seq, prompt) {
            return Err(DrafterError::TooLong(MAX_TREE_TOKENS as u64));
        }
        let req = ActiveRequest {
            own: Arc::new(Mutex::new(OwnTree {
                tree,
                too_long: false,
            })),
            seq,
            recent: if deferred {
                prompt.to_vec()
            } else {
                Vec::new()
            },
            global_synced: !deferred,
        };
        self.active.insert(id, req);
        self.global_op(GlobalOp::Start(id));
        Ok(())
    }

    /// Records tokens the request actually emitted (never rejected draft tokens).
    pub fn append(&mut self, id: u64, tokens: &[u32]) -> Result<(), DrafterError> {
        self.check_vocab(id, tokens)?;
        let deferred = self.queued.is_some();
        let req = self
            .active
            .get_mut(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        if deferred {
            req.recent.extend_from_slice(tokens);
        } else if !lock_own(&req.own).tree.extend(req.seq, tokens) {
            return Err(DrafterError::TooLong(MAX_TREE_TOKENS as u64));
        }
        if self.cfg.global_enabled() {
            self.global_op(GlobalOp::Append(id, tokens.to_vec()));
        }
        Ok(())
    }

    /// Ends a request; its response stays in the global tree (until evicted).
    pub fn stop_request(&mut self, id: u64) -> Result<(), DrafterError> {
        self.active
            .remove(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        self.global_op(GlobalOp::Stop(id));
        Ok(())
    }

    /// Ends a request and takes its response out of the global tree.
    pub fn abort_request(&mut self, id: u64) -> Result<(), DrafterError> {
        self.active
            .remove(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        self.global_op(GlobalOp::Abort(id));
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
    /// In deferred mode tokens appended since the last batch draft are not seen here.
    pub fn speculate_mode(
        &self,
        id: u64,
        max_k: usize,
        mode: DraftMode,
    ) -> Result<Draft, DrafterError> {
        self.speculate_with(&lock(&self.global), id, max_k, mode)
    }

    fn speculate_with(
        &self,
        global: &GlobalCache,
        id: u64,
        max_k: usize,
        mode: DraftMode,
    ) -> Result<Draft, DrafterError> {
        let req = self
            .active
            .get(&id)
            .ok_or(DrafterError::UnknownRequest(id))?;
        let own_tree = lock_own(&req.own);
        if own_tree.too_long {
            return Err(DrafterError::TooLong(MAX_TREE_TOKENS as u64));
        }
        let params = SpecParams {
            max_k,
            max_spec_factor: self.cfg.max_spec_factor,
            max_spec_offset: self.cfg.max_spec_offset,
            min_token_prob: self.cfg.min_token_prob,
            tree: mode == DraftMode::Tree,
        };
        let stored = own_tree.tree.tokens(req.seq).unwrap_or_default();
        // Deferred mode: the context ends with tokens neither tree has yet.
        let lag = req.recent.len();
        let joined;
        let context = if lag == 0 {
            stored
        } else {
            let keep = self.cfg.max_tree_depth.saturating_sub(lag);
            joined = [
                &stored[stored.len().saturating_sub(keep)..],
                &req.recent[..],
            ]
            .concat();
            &joined[..]
        };
        let own = own_tree
            .tree
            .speculate_after_lagged(context, Some(req.seq), lag, &params);
        if global.tree.num_tokens() == 0 {
            return Ok(own);
        }
        let response = global.response(id).filter(|_| req.global_synced);
        let other = global
            .tree
            .speculate_after_lagged(context, response, lag, &params);
        Ok(if own.score >= other.score { own } else { other })
    }

    /// Path-mode drafts for a whole batch of `(request id, max_k)`, in parallel.
    pub fn speculate_batch(&self, reqs: &[(u64, usize)]) -> Vec<Result<Draft, DrafterError>> {
        self.speculate_batch_mode(reqs, DraftMode::Path)
    }

    /// Drafts for a batch: small batches on the calling thread, large ones in tasks of
    /// several requests.
    pub fn speculate_batch_mode(
        &self,
        reqs: &[(u64, usize)],
        mode: DraftMode,
    ) -> Vec<Result<Draft, DrafterError>> {
        let global = lock(&self.global);
        let this = self;
        if reqs.len() < PARALLEL_FROM {
            return reqs
                .iter()
                .map(|&(id, k)| this.speculate_with(&global, id, k, mode))
                .collect();
        }
        let global = &*global;
        reqs.par_iter()
            .with_min_len(MIN_PER_TASK)
            .map(|&(id, k)| this.speculate_with(global, id, k, mode))
            .collect()
    }

    /// Empties the global tree. Active requests keep going; their next tokens are cached anew.
    pub fn reset_global(&mut self) {
        let mut ids: Vec<u64> = self.active.keys().copied().collect();
        ids.sort_unstable();
        self.global_op(GlobalOp::Reset(ids));
    }

    /// Bytes held by the global tree (changes applied so far).
    pub fn global_memory_bytes(&self) -> usize {
        lock(&self.global).tree.memory_bytes()
    }

    /// Bytes held by the active requests' own trees.
    pub fn active_memory_bytes(&self) -> usize {
        self.active
            .values()
            .map(|r| lock_own(&r.own).tree.memory_bytes())
            .sum()
    }

    /// Response tokens indexed by the global tree (changes applied so far).
    pub fn global_cached_tokens(&self) -> usize {
        lock(&self.global).tree.num_tokens()
    }

    /// Responses indexed by the global tree, active ones included (changes applied so far).
    pub fn global_cached_requests(&self) -> usize {
        lock(&self.global).num_cached()
    }

    pub fn num_active(&self) -> usize {
        self.active.len()
    }

    pub fn is_active(&self, id: u64) -> bool {
        self.active.contains_key(&id)
    }

    /// Tokens of an active request: prompt and emitted output (in deferred mode those not
    /// yet in its tree too).
    pub fn request_tokens(&self, id: u64) -> Option<Vec<u32>> {
        let r = self.active.get(&id)?;
        let own = lock_own(&r.own);
        Some([own.tree.tokens(r.seq)?, &r.recent[..]].concat())
    }

    /// The global tree (read-only, locked while held; for tests and diagnostics).
    pub fn global_tree(&self) -> GlobalTreeRef<'_> {
        GlobalTreeRef(lock(&self.global))
    }

    /// Checks every tree's invariants and the cache bookkeeping.
    pub fn check_integrity(&self) -> Result<(), String> {
        lock(&self.global).check_integrity()?;
        for (id, req) in &self.active {
            lock_own(&req.own)
                .tree
                .check_integrity()
                .map_err(|e| format!("request {id}: {e}"))?;
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
