//! wring's engine: requests, the paged KV block manager, the continuous-batching
//! scheduler, speculative decoding (`spec_decode`: proposers, uniform-K padding,
//! verification, K policies), sampling, stop handling and metrics.

pub mod api;
mod background;
pub mod block_manager;
mod channel;
pub mod config;
mod constraint;
mod core;
mod handle;
pub mod kv_events;
mod least_squares;
pub mod metrics;
mod outbox;
mod request;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
pub mod spec_decode;
pub mod step_budget;
mod step_input;
mod step_log;
pub mod stop;
mod synthetic_step;
mod trace;
mod warm_up;

pub use api::*;
pub use config::EngineConfig;
pub use handle::{Engine, EngineHandle, EngineInfo, RequestHandle, ServedModel};
pub use kv_events::{kv_event_channel, KvEvent, KvEventSink, KvEventSource, KvEventsConfig};
pub use metrics::{Histogram, MetricsSnapshot, HOST_PHASES};
pub use spec_decode::{KPolicy, KProfile, ProposerKind, SpecConfig, SuffixParams, TimingsCache};
