//! KV-cache events for prefix-cache-aware routers, and the block hash they carry.
//!
//! The prefix cache keys each full block by a hash chained over its parent's hash and its
//! own token ids. That hash is the one llm-d's KV-cache indexer (`llm-d-kv-cache`,
//! `kvblock.ChunkedTokenDatabase`) recomputes from a request's prompt tokens:
//!
//! ```text
//! root      = FNV-64a(CBOR([FNV-64a(seed), null, model_name]))
//! block[0]  = FNV-64a(CBOR([root, tokens[0..B], null]))
//! block[i]  = FNV-64a(CBOR([block[i-1], tokens[i*B..(i+1)*B], null]))
//! ```
//!
//! with CBOR in its canonical (shortest-form) encoding, `B` the block size (`--block-size`,
//! the router's `blockSize`), `seed` the router's `hashSeed` and `model_name` the served
//! model name (the model part of the event topic `kv@<pod>@<model>`). So a router that
//! indexes the events and one that hashes an incoming prompt arrive at the same keys.
//!
//! The block manager reports what enters and leaves its cache as [`KvEvent`]s through a
//! bounded channel ([`KvEventSink`]); whoever publishes them (the server's ZMQ publisher)
//! reads the other end on its own thread, so nothing is encoded or sent on the engine's
//! step path, and a full channel drops events (counted) rather than stall a step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// Chained hash of a full block.
pub type BlockHash = u64;

/// A change to the set of cached blocks, as routers consume it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Consecutive full blocks of one sequence entered the cache: `hashes[i]` covers
    /// `tokens[i*B..(i+1)*B]`; `parent` is the hash of the block before the first (None
    /// for a sequence's first block).
    Stored {
        hashes: Vec<BlockHash>,
        parent: Option<BlockHash>,
        tokens: Vec<u32>,
    },
    /// These blocks left the cache (their memory was taken for other tokens).
    Removed { hashes: Vec<BlockHash> },
    /// Everything this server had cached is gone (it sends this first, on start).
    AllCleared,
}

/// The engine's end of the event channel.
#[derive(Debug, Clone)]
pub struct KvEventSink {
    tx: mpsc::Sender<KvEvent>,
    dropped: Arc<AtomicU64>,
}

/// The publisher's end: events in the order the cache saw them.
#[derive(Debug)]
pub struct KvEventSource {
    pub rx: mpsc::Receiver<KvEvent>,
    /// Events dropped because the channel was full.
    pub dropped: Arc<AtomicU64>,
}

/// A channel holding up to `capacity` events in flight.
pub fn kv_event_channel(capacity: usize) -> (KvEventSink, KvEventSource) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let dropped = Arc::new(AtomicU64::new(0));
    (
        KvEventSink {
            tx,
            dropped: dropped.clone(),
        },
        KvEventSource { rx, dropped },
    )
}

impl KvEventSink {
    /// Never blocks: a full channel (a publisher far behind) drops the event and counts it.
    pub fn send(&self, e: KvEvent) {
        if self.tx.try_send(e).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::warn!("KV events: channel full or closed, {} dropped", n + 1);
            }
        }
    }
}

/// How block hashes are chained, and where events go.
#[derive(Debug, Clone, Default)]
pub struct KvEventsConfig {
    /// The router's `hashSeed` (vLLM's `PYTHONHASHSEED` plays this part for vLLM's hashes).
    pub hash_seed: String,
    /// The model name the router hashes a request's first block with.
    pub model_name: String,
    /// Where the block manager reports cache changes; None = nowhere.
    pub sink: Option<KvEventSink>,
}

impl KvEventsConfig {
    /// The parent hash of every sequence's first block.
    pub fn root(&self) -> BlockHash {
        root_hash(&self.hash_seed, &self.model_name)
    }
}

/// FNV-64a of the canonical CBOR encoding of `value`.
fn fnv_cbor<T: serde::Serialize>(value: &T) -> u64 {
    use std::hash::Hasher;
    let mut buf = Vec::with_capacity(96);
    ciborium::into_writer(value, &mut buf).expect("CBOR into a Vec cannot fail");
    let mut h = fnv::FnvHasher::default();
    h.write(&buf);
    h.finish()
}

/// `FNV-64a(CBOR([FNV-64a(seed), null, model_name]))`.
pub fn root_hash(seed: &str, model_name: &str) -> BlockHash {
    use std::hash::Hasher;
    let mut s = fnv::FnvHasher::default();
    s.write(seed.as_bytes());
    fnv_cbor(&(s.finish(), (), model_name))
}

/// `FNV-64a(CBOR([parent, tokens, null]))`.
pub fn hash_block(parent: BlockHash, tokens: &[u32]) -> BlockHash {
    fnv_cbor(&(parent, tokens, ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values from an independent implementation: Python's `cbor2.dumps(...,
    // canonical=True)` and a byte-wise FNV-1a 64 (what tests/openai/test_kv_events.py
    // recomputes from prompt tokens, and what llm-d-kv-cache computes in Go).
    #[test]
    fn hashes_match_the_router_scheme() {
        let root = root_hash("", "smol");
        assert_eq!(root, ROOT_EMPTY_SEED_SMOL);
        let tokens: Vec<u32> = (1..=16).chain([65535, 70000, 1 << 31]).collect();
        assert_eq!(hash_block(root, &tokens), BLOCK_OF_ROOT);
        assert_ne!(root_hash("42", "smol"), root, "the seed enters the root");
    }

    const ROOT_EMPTY_SEED_SMOL: u64 = 0x3984_e538_45d8_0429;
    const BLOCK_OF_ROOT: u64 = 0x00f5_d82b_74f6_7739;

    #[test]
    fn a_full_channel_drops_and_counts() {
        let (sink, mut src) = kv_event_channel(1);
        sink.send(KvEvent::AllCleared);
        sink.send(KvEvent::AllCleared);
        assert_eq!(src.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(src.rx.try_recv().unwrap(), KvEvent::AllCleared);
    }
}
