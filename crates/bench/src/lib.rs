//! wring-bench: real-corpus trace replay against any OpenAI-compatible server, the best-K tuner
//! and the report. It talks HTTP only (chat completions, `/metrics`, the admin cache reset), so it
//! drives wring, vLLM and llama.cpp servers alike and never links engine internals.

pub mod bench;
pub mod configs;
pub mod corpus;
pub mod fetch;
pub mod json_stream;
pub mod machine;
pub mod prom;
pub mod recording;
pub mod replay;
pub mod replay_source;
pub mod report;
pub mod result;
pub mod server_probe;
pub mod sse;
pub mod stats;
pub mod tune;
