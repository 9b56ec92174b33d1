//! `wring serve`: the OpenAI-compatible HTTP server over one engine.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use wring_server::{AppState, ServerConfig};

use super::common::{start_engine, CommonArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Name(s) clients use in `model` (the first is reported); default: the model's own name.
    #[arg(long, num_args = 1..)]
    pub served_model_name: Vec<String>,
    /// Require `Authorization: Bearer <key>` on /v1/* and /admin/*.
    #[arg(long, env = "WRING_API_KEY")]
    pub api_key: Option<String>,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Seconds running requests get to finish after SIGTERM/SIGINT.
    #[arg(long, default_value_t = 30.0)]
    pub drain_timeout: f64,
    /// Seconds between throughput log lines (0 = off).
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("--host {:?} --port {}", args.host, args.port))?;
    let config = ServerConfig {
        served_model_names: args.served_model_name.clone(),
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        max_body_bytes: args.max_body_bytes,
        drain_timeout: seconds("--drain-timeout", args.drain_timeout)?,
        stats_interval: seconds("--stats-interval", args.stats_interval)?,
        ..ServerConfig::default()
    };
    let (engine, info) = start_engine(&args.common)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wring-http")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                engine.shutdown(Duration::ZERO);
                return Err(e).with_context(|| format!("binding {addr}"));
            }
        };
        let state = AppState::new(engine, info, config);
        tracing::info!(
            "serving {:?} on http://{}{}",
            state.config.served_model_names,
            listener.local_addr()?,
            if state.config.api_key.is_some() {
                " (API key required)"
            } else {
                ""
            }
        );
        wring_server::serve(listener, state, shutdown_signal()).await
    })
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("{flag} {s}: expected seconds ≥ 0"))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received"),
        _ = term => tracing::info!("SIGTERM received"),
    }
}
