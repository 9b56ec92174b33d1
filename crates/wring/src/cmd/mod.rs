//! Subcommands. Each file owns one subcommand's flags and its `run`, but two: `common.rs`
//! holds the flags `generate`, `chat` and `serve` share, and `launch.rs` the launch plan
//! those commands resolve from them.

pub mod bench;
pub mod chat;
pub mod common;
pub mod drafter_eval;
pub mod gate;
pub mod generate;
pub mod launch;
pub mod pull;
pub mod quantize;
pub mod serve;

/// Logs go to stderr; `RUST_LOG` overrides the default `info`.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
