//! Paged KV block manager: a fixed pool of blocks handed out to sequences, with
//! automatic prefix caching of full blocks.
//!
//! A full block whose tokens are all committed gets a hash chained over the hash of
//! the previous block and its own token ids (`kv_events.rs`: the scheme prefix-cache-aware
//! routers recompute from prompt tokens; a sequence's first block chains from the root
//! hash). Blocks are refcounted; a block whose refcount drops to zero goes to the tail of
//! an LRU free queue but keeps its hash, so a later request with the same prefix can take
//! it back. Allocation takes from the head of the queue and evicts the block's hash at that
//! moment. With a [`KvEventSink`] attached, every block that enters or leaves the cache is
//! reported (`BlockStored` / `BlockRemoved`), so a router can mirror the cache.

use std::collections::HashMap;

pub use crate::kv_events::BlockHash;
use crate::kv_events::{hash_block, KvEvent, KvEventSink, KvEventsConfig};

pub type BlockId = u32;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Block {
    ref_count: u32,
    /// Set while the block is registered in the prefix cache.
    hash: Option<BlockHash>,
    /// Parent hash and token ids of a cached block, checked on lookup so that a
    /// hash collision can never hand out wrong KV.
    key: Option<(BlockHash, Vec<u32>)>,
    prev: u32,
    next: u32,
    in_free_queue: bool,
}

/// Counters for the prefix cache (tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queried_tokens: u64,
    pub hit_tokens: u64,
}

#[derive(Debug)]
pub struct BlockManager {
    block_size: usize,
    blocks: Vec<Block>,
    free_head: u32,
    free_tail: u32,
    num_free: usize,
    cached: HashMap<BlockHash, BlockId>,
    enable_caching: bool,
    stats: PrefixCacheStats,
    /// Parent hash of every sequence's first block.
    root: BlockHash,
    /// Where cache changes are reported (None: nowhere).
    events: Option<KvEventSink>,
}

impl BlockManager {
    pub fn new(num_blocks: usize, block_size: usize, enable_caching: bool) -> Self {
        assert!(block_size > 0, "block_size must be positive");
        let mut m = Self {
            block_size,
            blocks: vec![
                Block {
                    ref_count: 0,
                    hash: None,
                    key: None,
                    prev: NIL,
                    next: NIL,
                    in_free_queue: false,
                };
                num_blocks
            ],
            free_head: NIL,
            free_tail: NIL,
            num_free: 0,
            cached: HashMap::new(),
            enable_caching,
            stats: PrefixCacheStats::default(),
            root: KvEventsConfig::default().root(),
            events: None,
        };
        for id in 0..num_blocks as u32 {
            m.push_free_tail(id);
        }
        m
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }
    /// Blocks with no owner (cached-but-free blocks count as free: they can be evicted).
    pub fn num_free_blocks(&self) -> usize {
        self.num_free
    }
    pub fn num_used_blocks(&self) -> usize {
        self.blocks.len() - self.num_free
    }
    pub fn num_cached_blocks(&self) -> usize {
        self.cached.len()
    }
    pub fn caching_enabled(&self) -> bool {
        self.enable_caching
    }
    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.blocks[id as usize].ref_count
    }

    /// Chains hashes from `cfg`'s root and reports cache changes to its sink from now on,
    /// starting with `AllBlocksCleared` (a router may hold this server's blocks from an
    /// earlier run). Every cached hash is dropped first: they were chained from the old root.
    pub fn attach_kv_events(&mut self, cfg: &KvEventsConfig) {
        let ids: Vec<BlockId> = self.cached.values().copied().collect();
        for id in ids {
            let b = &mut self.blocks[id as usize];
            b.hash = None;
            b.key = None;
        }
        self.cached.clear();
        self.root = cfg.root();
        self.events = cfg.sink.clone();
        self.emit(KvEvent::AllCleared);
    }

    /// The parent hash of a sequence's first block.
    pub fn root_hash(&self) -> BlockHash {
        self.root
    }

    /// Every hash in the prefix cache (unordered): what a router mirroring the events holds.
    pub fn cached_hashes(&self) -> Vec<BlockHash> {
        self.cached.keys().copied().collect()
    }

    fn emit(&self, e: KvEvent) {
        if let Some(sink) = &self.events {
            sink.send(e);
        }
    }

    fn parent_of(&self, hashes: &[BlockHash], i: usize) -> BlockHash {
        if i == 0 {
            self.root
        } else {
            hashes[i - 1]
        }
    }

    /// Blocks needed to hold `num_tokens` tokens.
    pub fn blocks_for(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    /// Hashes of the full blocks of `tokens`, extending `hashes` (which holds the
    /// hashes of the first `hashes.len()` blocks already).
    pub fn extend_hashes(&self, tokens: &[u32], hashes: &mut Vec<BlockHash>) {
        let full = tokens.len() / self.block_size;
        while hashes.len() < full {
            let i = hashes.len();
            let parent = self.parent_of(hashes, i);
            let chunk = &tokens[i * self.block_size..(i + 1) * self.block_size];
            hashes.push(hash_block(parent, chunk));
        }
    }

    /// Longest run of cached blocks matching the start of `tokens` (given their
    /// chained `hashes`), at most `max_blocks`. Does not take them.
    pub fn find_cached_prefix(
        &self,
        tokens: &[u32],
        hashes: &[BlockHash],
        max_blocks: usize,
    ) -> Vec<BlockId> {
        let mut hits = Vec::new();
        if !self.enable_caching {
            return hits;
        }
        for (i, h) in hashes.iter().enumerate().take(max_blocks) {
            let Some(&id) = self.cached.get(h) else { break };
            let parent = self.parent_of(hashes, i);
            let chunk = &tokens[i * self.block_size..(i + 1) * self.block_size];
            match &self.blocks[id as usize].key {
                Some((p, t)) if *p == parent && t.as_slice() == chunk => hits.push(id),
                _ => break,
            }
        }
        hits
    }

    /// Records a prefix-cache query of `queried` prompt tokens with `hit` served from cache.
    pub fn record_query(&mut self, queried: usize, hit: usize) {
        self.stats.queried_tokens += queried as u64;
        self.stats.hit_tokens += hit as u64;
    }

    /// Takes a reference on blocks found by [`find_cached_prefix`](Self::find_cached_prefix).
    pub fn take_cached(&mut self, hits: &[BlockId], table: &mut Vec<BlockId>) {
        for &id in hits {
            if self.blocks[id as usize].ref_count == 0 {
                self.unlink_free(id);
            }
            self.blocks[id as usize].ref_count += 1;
            table.push(id);
        }
    }

    /// Number of new blocks a table needs to cover `num_tokens`.
    pub fn blocks_needed(&self, table: &[BlockId], num_tokens: usize) -> usize {
        self.blocks_for(num_tokens).saturating_sub(table.len())
    }

    /// Grows `table` to cover `num_tokens` tokens. Returns false (and changes
    /// nothing) when the pool does not have enough free blocks.
    pub fn allocate(&mut self, table: &mut Vec<BlockId>, num_tokens: usize) -> bool {
        let need = self.blocks_needed(table, num_tokens);
        if need > self.num_free {
            return false;
        }
        for _ in 0..need {
            let id = self.pop_free_head();
            self.evict_hash(id);
            self.blocks[id as usize].ref_count = 1;
            table.push(id);
        }
        true
    }

    /// Drops blocks beyond those needed for `num_tokens` tokens (e.g. KV written for
    /// rejected draft positions).
    pub fn truncate(&mut self, table: &mut Vec<BlockId>, num_tokens: usize) {
        let keep = self.blocks_for(num_tokens);
        while table.len() > keep {
            let id = table.pop().expect("len > keep");
            self.release(id);
        }
    }

    /// Releases every block of a table. Tail blocks go first so that, among free
    /// cached blocks, the deeper ones of a prefix are evicted before the shallow
    /// ones other requests are more likely to share.
    pub fn free_all(&mut self, table: &mut Vec<BlockId>) {
        while let Some(id) = table.pop() {
            self.release(id);
        }
    }

    /// Registers every full block of `table` lying inside the first `num_committed`
    /// tokens in the prefix cache (`hashes` must hold their chained hashes). Blocks
    /// `..already` were registered before. Returns the new `already`.
    pub fn commit_full_blocks(
        &mut self,
        table: &[BlockId],
        tokens: &[u32],
        hashes: &[BlockHash],
        already: usize,
        num_committed: usize,
    ) -> usize {
        let full = (num_committed / self.block_size)
            .min(table.len())
            .min(hashes.len());
        if !self.enable_caching {
            return full.max(already);
        }
        // Newly cached blocks, reported as runs of consecutive blocks (one event each).
        let mut run: Option<(usize, usize)> = None;
        for i in already..full {
            let id = table[i];
            let h = hashes[i];
            if self.blocks[id as usize].hash.is_some() || self.cached.contains_key(&h) {
                // Already cached (ours via a hit, or an identical block computed by
                // another request at the same time): keep ours unhashed.
                self.report_stored(run.take(), tokens, hashes);
                continue;
            }
            let parent = self.parent_of(hashes, i);
            let chunk = tokens[i * self.block_size..(i + 1) * self.block_size].to_vec();
            let b = &mut self.blocks[id as usize];
            b.hash = Some(h);
            b.key = Some((parent, chunk));
            self.cached.insert(h, id);
            run = Some(run.map_or((i, i + 1), |(start, _)| (start, i + 1)));
        }
        self.report_stored(run, tokens, hashes);
        full.max(already)
    }

    /// A `BlockStored` event for blocks `start..end` of a sequence.
    fn report_stored(&self, run: Option<(usize, usize)>, tokens: &[u32], hashes: &[BlockHash]) {
        let (Some(sink), Some((start, end))) = (&self.events, run) else {
            return;
        };
        sink.send(KvEvent::Stored {
            hashes: hashes[start..end].to_vec(),
            parent: (start > 0).then(|| hashes[start - 1]),
            tokens: tokens[start * self.block_size..end * self.block_size].to_vec(),
        });
    }

    /// Puts an idle pool back in its first state: every block free, none cached, the free
    /// queue in id order. Start-up probes allocate and free blocks sequence by sequence,
    /// which leaves the queue permuted; serving should start where a server without probes
    /// starts. Returns false (and changes nothing) while any block is owned.
    pub fn reset_when_idle(&mut self) -> bool {
        if self.num_free != self.blocks.len() {
            return false;
        }
        let had_cached = !self.cached.is_empty();
        let (root, events) = (self.root, self.events.take());
        *self = Self::new(self.blocks.len(), self.block_size, self.enable_caching);
        self.root = root;
        self.events = events;
        if had_cached {
            self.emit(KvEvent::AllCleared);
        }
        true
    }

    /// Drops every cached hash of a free block (admin reset); owned blocks keep theirs.
    pub fn reset_prefix_cache(&mut self) {
        let ids: Vec<BlockId> = self.cached.values().copied().collect();
        for id in ids {
            if self.blocks[id as usize].ref_count == 0 {
                self.evict_hash(id);
            }
        }
    }

    fn release(&mut self, id: BlockId) {
        let b = &mut self.blocks[id as usize];
        assert!(b.ref_count > 0, "double free of KV block {id}");
        b.ref_count -= 1;
        if b.ref_count == 0 {
            if b.hash.is_none() {
                // Uncached blocks are worthless once free: put them first in line.
                self.push_free_head(id);
            } else {
                self.push_free_tail(id);
            }
        }
    }

    fn evict_hash(&mut self, id: BlockId) {
        let b = &mut self.blocks[id as usize];
        if let Some(h) = b.hash.take() {
            b.key = None;
            if self.cached.get(&h) == Some(&id) {
                self.cached.remove(&h);
                if let Some(sink) = &self.events {
                    sink.send(KvEvent::Removed { hashes: vec![h] });
                }
            }
        }
    }

    fn push_free_tail(&mut self, id: BlockId) {
        let tail = self.free_tail;
        let b = &mut self.blocks[id as usize];
        debug_assert!(!b.in_free_queue);
        b.prev = tail;
        b.next = NIL;
        b.in_free_queue = true;
        if tail == NIL {
            self.free_head = id;
        } else {
            self.blocks[tail as usize].next = id;
        }
        self.free_tail = id;
        self.num_free += 1;
    }

    fn push_free_head(&mut self, id: BlockId) {
        let head = self.free_head;
        let b = &mut self.blocks[id as usize];
        debug_assert!(!b.in_free_queue);
        b.prev = NIL;
        b.next = head;
        b.in_free_queue = true;
        if head == NIL {
            self.free_tail = id;
        } else {
            self.blocks[head as usize].prev = id;
        }
        self.free_head = id;
        self.num_free += 1;
    }

    fn pop_free_head(&mut self) -> BlockId {
        let id = self.free_head;
        assert!(id != NIL, "free queue empty");
        self.unlink_free(id);
        id
    }

    fn unlink_free(&mut self, id: BlockId) {
        let (prev, next) = {
            let b = &mut self.blocks[id as usize];
            assert!(b.in_free_queue, "block {id} is not free");
            b.in_free_queue = false;
            (b.prev, b.next)
        };
        if prev == NIL {
            self.free_head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.free_tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        self.num_free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(n: usize, base: u32) -> Vec<u32> {
        (0..n as u32).map(|i| base + i).collect()
    }

    #[test]
    fn allocate_and_free_return_blocks_to_the_pool() {
        let mut m = BlockManager::new(8, 4, true);
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 9));
        assert_eq!(t.len(), 3);
        assert_eq!(m.num_free_blocks(), 5);
        assert!(!m.allocate(&mut t, 40), "over capacity must fail");
        assert_eq!(t.len(), 3, "a failed allocation changes nothing");
        m.free_all(&mut t);
        assert_eq!(m.num_free_blocks(), 8);
        assert!(t.is_empty());
    }

    #[test]
    fn an_idle_pool_resets_to_its_first_order() {
        let mut m = BlockManager::new(8, 4, true);
        let fresh: Vec<BlockId> = (0..8).collect();
        // Two sequences freed one after the other leave the queue permuted.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        assert!(m.allocate(&mut a, 8) && m.allocate(&mut b, 8));
        m.free_all(&mut a);
        assert!(!m.reset_when_idle(), "a block is still owned");
        m.free_all(&mut b);
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 32));
        assert_ne!(t, fresh, "the probes' frees permute the queue");
        m.free_all(&mut t);
        assert!(m.reset_when_idle());
        assert!(m.allocate(&mut t, 32));
        assert_eq!(t, fresh);
        assert_eq!(m.num_free_blocks(), 0);
    }

    #[test]
    fn truncate_frees_blocks_past_the_length() {
        let mut m = BlockManager::new(8, 4, false);
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 16));
        m.truncate(&mut t, 5);
        assert_eq!(t.len(), 2);
        assert_eq!(m.num_free_blocks(), 6);
    }

    #[test]
    fn prefix_hit_shares_blocks_with_refcounts() {
        let mut m = BlockManager::new(16, 4, true);
        let a = toks(10, 100);
        let mut ha = Vec::new();
        m.extend_hashes(&a, &mut ha);
        assert_eq!(ha.len(), 2);
        let mut ta = Vec::new();
        assert!(m.allocate(&mut ta, a.len()));
        let done = m.commit_full_blocks(&ta, &a, &ha, 0, a.len());
        assert_eq!(done, 2);
        assert_eq!(m.num_cached_blocks(), 2);

        // Same first 8 tokens, different tail.
        let mut b = a[..8].to_vec();
        b.extend([1, 2, 3]);
        let mut hb = Vec::new();
        m.extend_hashes(&b, &mut hb);
        let hits = m.find_cached_prefix(&b, &hb, 2);
        assert_eq!(hits, ta[..2].to_vec());
        let mut tb = Vec::new();
        m.take_cached(&hits, &mut tb);
        assert_eq!(m.ref_count(ta[0]), 2);

        // A different first block misses entirely.
        let c = toks(8, 5);
        let mut hc = Vec::new();
        m.extend_hashes(&c, &mut hc);
        assert!(m.find_cached_prefix(&c, &hc, 2).is_empty());

        m.free_all(&mut ta);
        assert_eq!(m.ref_count(tb[0]), 1, "b still holds the shared block");
        m.free_all(&mut tb);
        assert_eq!(m.num_free_blocks(), 16);
        assert_eq!(m.num_cached_blocks(), 2, "free blocks stay cached");
        // A later request takes them back.
        let hits = m.find_cached_prefix(&b, &hb, 2);
        assert_eq!(hits.len(), 2);
    }

    #[test]
    fn eviction_is_lru_and_prefers_uncached_blocks() {
        let mut m = BlockManager::new(4, 2, true);
        let a = toks(4, 0);
        let mut ha = Vec::new();
        m.extend_hashes(&a, &mut ha);
        let mut ta = Vec::new();
        assert!(m.allocate(&mut ta, 4));
        m.commit_full_blocks(&ta, &a, &ha, 0, 4);
        let mut scratch = Vec::new();
        assert!(m.allocate(&mut scratch, 4)); // two uncached blocks
        m.free_all(&mut ta); // cached, to the tail
        m.free_all(&mut scratch); // uncached, to the head
                                  // Allocating two blocks uses the uncached ones; the cache survives.
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 4));
        assert_eq!(m.find_cached_prefix(&a, &ha, 2).len(), 2);
        // One more block evicts the least recently freed cached block, which is the
        // deeper one (tail blocks are freed first), so the first still hits.
        assert!(m.allocate(&mut t, 6));
        assert_eq!(m.num_cached_blocks(), 1);
        assert_eq!(m.find_cached_prefix(&a, &ha, 2).len(), 1);
    }

    #[test]
    fn duplicate_blocks_are_not_double_registered() {
        let mut m = BlockManager::new(8, 2, true);
        let a = toks(4, 7);
        let mut h = Vec::new();
        m.extend_hashes(&a, &mut h);
        let (mut t1, mut t2) = (Vec::new(), Vec::new());
        assert!(m.allocate(&mut t1, 4));
        assert!(m.allocate(&mut t2, 4));
        m.commit_full_blocks(&t1, &a, &h, 0, 4);
        m.commit_full_blocks(&t2, &a, &h, 0, 4);
        assert_eq!(m.num_cached_blocks(), 2);
        assert_eq!(m.find_cached_prefix(&a, &h, 2), t1);
        m.free_all(&mut t1);
        m.free_all(&mut t2);
        assert_eq!(m.num_free_blocks(), 8);
    }

    #[test]
    fn commit_only_counts_committed_tokens() {
        let mut m = BlockManager::new(8, 4, true);
        let a = toks(12, 0);
        let mut h = Vec::new();
        m.extend_hashes(&a, &mut h);
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 12));
        assert_eq!(m.commit_full_blocks(&t, &a, &h, 0, 7), 1);
        assert_eq!(m.num_cached_blocks(), 1);
        assert_eq!(m.commit_full_blocks(&t, &a, &h, 1, 12), 3);
        assert_eq!(m.num_cached_blocks(), 3);
    }

    #[test]
    fn disabled_cache_never_hits() {
        let mut m = BlockManager::new(8, 2, false);
        let a = toks(4, 0);
        let mut h = Vec::new();
        m.extend_hashes(&a, &mut h);
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 4));
        m.commit_full_blocks(&t, &a, &h, 0, 4);
        assert!(m.find_cached_prefix(&a, &h, 2).is_empty());
    }

    /// Applies events to a set, as a router's index would.
    fn mirror(src: &mut crate::kv_events::KvEventSource, set: &mut std::collections::HashSet<u64>) {
        while let Ok(e) = src.rx.try_recv() {
            match e {
                KvEvent::Stored { hashes, .. } => set.extend(hashes),
                KvEvent::Removed { hashes } => {
                    for h in hashes {
                        assert!(set.remove(&h), "removed a hash that was never stored");
                    }
                }
                KvEvent::AllCleared => set.clear(),
            }
        }
    }

    #[test]
    fn events_mirror_the_cache_and_chain_from_the_root() {
        let (sink, mut src) = crate::kv_events::kv_event_channel(1024);
        let cfg = KvEventsConfig {
            hash_seed: "7".into(),
            model_name: "m".into(),
            sink: Some(sink),
        };
        let mut m = BlockManager::new(4, 2, true);
        m.attach_kv_events(&cfg);
        assert_eq!(src.rx.try_recv().unwrap(), KvEvent::AllCleared);
        let a = toks(5, 10);
        let mut ha = Vec::new();
        m.extend_hashes(&a, &mut ha);
        assert_eq!(ha[0], hash_block(cfg.root(), &a[..2]));
        assert_eq!(ha[1], hash_block(ha[0], &a[2..4]));
        let mut ta = Vec::new();
        assert!(m.allocate(&mut ta, 5));
        m.commit_full_blocks(&ta, &a, &ha, 0, 5);
        assert_eq!(
            src.rx.try_recv().unwrap(),
            KvEvent::Stored {
                hashes: ha.clone(),
                parent: None,
                tokens: a[..4].to_vec()
            },
            "one event for the run of two blocks"
        );
        m.free_all(&mut ta);
        // Four new blocks evict both cached ones.
        let mut t = Vec::new();
        assert!(m.allocate(&mut t, 8));
        let mut set = std::collections::HashSet::new();
        set.extend(ha.iter().copied());
        mirror(&mut src, &mut set);
        assert!(set.is_empty());
        assert!(m.cached_hashes().is_empty());
        // A sequence whose first block is already cached reports the rest with a parent.
        m.free_all(&mut t);
        let b = toks(6, 10);
        let mut hb = Vec::new();
        m.extend_hashes(&b, &mut hb);
        let mut t1 = Vec::new();
        assert!(m.allocate(&mut t1, 2));
        m.commit_full_blocks(&t1, &b, &hb, 0, 2);
        let mut t2 = Vec::new();
        assert!(m.allocate(&mut t2, 6));
        m.commit_full_blocks(&t2, &b, &hb, 0, 6);
        let mut events = Vec::new();
        while let Ok(e) = src.rx.try_recv() {
            events.push(e);
        }
        assert_eq!(
            events.last().unwrap(),
            &KvEvent::Stored {
                hashes: hb[1..].to_vec(),
                parent: Some(hb[0]),
                tokens: b[2..6].to_vec()
            }
        );
        let mut mirrored: Vec<u64> = events
            .iter()
            .flat_map(|e| match e {
                KvEvent::Stored { hashes, .. } => hashes.clone(),
                _ => Vec::new(),
            })
            .collect();
        let mut cached = m.cached_hashes();
        mirrored.sort_unstable();
        cached.sort_unstable();
        assert_eq!(mirrored, cached);
    }
}
