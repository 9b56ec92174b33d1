//! wring's engine: requests, the paged KV block manager, the continuous-batching
//! scheduler, speculative decoding (proposers, uniform-K padding, verification, K
//! policies), sampling, stop handling and metrics.

pub mod api;
pub mod block_manager;
mod calibrate;
pub mod config;
mod core;
mod handle;
pub mod metrics;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
pub mod spec;
pub mod stop;
mod trace;

pub use api::*;
pub use config::{EngineConfig, KPolicy, KProfile, ProposerKind, SpecConfig, SuffixParams};
pub use handle::{Engine, EngineHandle, EngineInfo, RequestHandle};
pub use metrics::{Histogram, MetricsSnapshot};
