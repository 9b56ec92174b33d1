//! Suffix-tree drafter for model-free speculative decoding.
//!
//! Each active request has a suffix tree over its own prompt and output; one global tree
//! indexes the outputs of past (and in-flight) requests. A draft follows the most frequent
//! continuation of the best-scoring context match in either tree. See `SuffixDrafter`.
//!
//! - Semantics follow ArcticInference 0.3.0's suffix decoding, tie order included, so its drafts
//!   are reproduced step by step (`tests/arctic_reference.rs`); `tests/equivalence.rs` checks
//!   drafts, scores and match lengths against a brute-force reference under random streams,
//!   parameters and interleavings, and that removal leaves the global tree as if never added.
//! - `tree`: the data structure (path-compressed, depth-capped, counts, O(1) best child,
//!   open leaves, reference-counted token storage) and its integrity checker.
//! - `eval` / `replay`: offline trace replay behind `wring drafter-eval`.
//!
//! Module map: `config` (parameters), `draft` (output), `drafter` (lifecycle, batch, deferred mode), `global` (the
//! global tree's bookkeeping and eviction),
//! `tree/{mod,order,speculate,integrity,hash}`.

mod config;
mod draft;
mod drafter;
mod error;
pub mod eval;
mod global;
pub mod replay;
pub mod tree;

pub use config::{SuffixConfig, MAX_TREE_DEPTH_LIMIT};
pub use draft::Draft;
pub use drafter::{DraftMode, GlobalTreeRef, GlobalWork, SuffixDrafter};
pub use error::DrafterError;
pub use tree::{SeqId, SpecParams, SuffixTree, MAX_TREE_TOKENS};
