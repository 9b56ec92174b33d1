//! What travels between the handles and the engine thread: commands in, the shared
//! counters and metrics snapshot both sides read. Its own file so the engine loop
//! (`core.rs`) and the handles (`handle.rs`) both depend on it, not on each other.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use crate::api::{EngineEvent, GenerateRequest};
use crate::metrics::MetricsSnapshot;
use crate::sampling::{BreakerCache, DryBreakers};
use crate::spec_decode::KPolicy;

pub(crate) enum Command {
    Submit(Box<Submission>),
    Abort(u64),
    ResetSuffixCache,
    /// The prefix cache's block hashes (admin listing).
    CachedBlocks(tokio::sync::oneshot::Sender<Vec<u64>>),
    Shutdown(Duration),
}

pub(crate) struct Submission {
    pub id: u64,
    pub req: GenerateRequest,
    /// Per-request K policy override, parsed at submission.
    pub k_policy: Option<KPolicy>,
    pub events: UnboundedSender<EngineEvent>,
    /// DRY's sequence breakers, resolved at submission (None: DRY off).
    pub dry_breakers: Option<Arc<DryBreakers>>,
}

/// State shared between handles and the engine thread.
pub(crate) struct Shared {
    pub commands: Mutex<mpsc::Sender<Command>>,
    pub next_id: AtomicU64,
    /// Submitted but not yet admitted to a first step.
    pub pending: AtomicUsize,
    pub shutting_down: AtomicBool,
    pub metrics: Mutex<MetricsSnapshot>,
    pub thread: Mutex<Option<JoinHandle<()>>>,
    pub limits: Limits,
    pub dry_breakers: BreakerCache,
}

#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub max_model_len: usize,
    pub vocab_size: usize,
    pub max_waiting: usize,
    pub spec_enabled: bool,
    pub adaptive_ready: bool,
}

impl Shared {
    pub fn send(&self, c: Command) -> bool {
        self.commands
            .lock()
            .map(|tx| tx.send(c).is_ok())
            .unwrap_or(false)
    }
}
