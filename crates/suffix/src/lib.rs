//! Suffix-tree drafter for model-free speculative decoding (issue 3).
//!
//! Each active request has a suffix tree over its own prompt and output; one global tree
//! indexes the outputs of past (and in-flight) requests. A draft follows the most frequent
//! continuation of the longest useful context match in either tree. See `SuffixDrafter`.
//!
//! Semantics follow ArcticInference 0.3.0's suffix decoding, so that its drafts can be
//! reproduced step by step (see `tests/arctic_reference.rs`).

mod config;
mod draft;
mod drafter;
mod error;
pub mod eval;
pub mod replay;
pub mod tree;

pub use config::{SuffixConfig, MAX_TREE_DEPTH_LIMIT};
pub use draft::Draft;
pub use drafter::{DraftMode, SuffixDrafter};
pub use error::DrafterError;
pub use tree::{SeqId, SpecParams, SuffixTree};
