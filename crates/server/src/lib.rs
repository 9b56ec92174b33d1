//! wring's OpenAI-compatible HTTP API over the engine (axum + tokio).
//!
//! - `routes`: endpoints and the API-key check; `cors`: browser preflights; `body` +
//!   `params` (+ `messages`, `prompts`, `structured`, `tools`): turning a request body
//!   into engine requests, with an OpenAI-shaped 4xx for every kind of bad input.
//! - `generate`: one request's life: submit its choices (`n` samples of each prompt,
//!   siblings after the first so they share its cached prompt blocks), then a JSON
//!   body or an SSE stream; `choice`: one choice's output (a reasoning model's
//!   thinking split off by `reasoning`, tool calls parsed out of the answer, logprobs,
//!   echo). The engine's `RequestHandle`s are owned by the response, so a
//!   client that goes away aborts its requests (and frees their KV blocks) when
//!   hyper drops the body.
//! - `tokenize`: vLLM's `/tokenize` and `/detokenize`.
//! - `metrics`: `/metrics` in Prometheus text with vLLM's names; `stats`: the
//!   periodic throughput log line.
//! - `ops`: `/ready` (not ready while loading or draining), the loading-phase server, the
//!   prefix cache's block listing; `kv_publisher`: KV-cache events over ZMQ for routers.
//! - `listen`: the sockets: backlog, accept loop, connection cap (429 beyond it),
//!   header-read and idle timeouts.
//! - `serve`: run until a shutdown signal, then drain the engine within a timeout (the
//!   port stays open meanwhile: `/ready` says `draining`, new requests get 503).

pub mod body;
pub mod choice;
pub mod cors;
pub mod error;
pub mod generate;
pub mod kv_publisher;
pub mod listen;
pub mod logprobs;
pub mod messages;
pub mod metrics;
pub mod ops;
pub mod params;
pub mod prom;
pub mod prompt;
pub mod prompts;
pub mod protocol;
pub mod readiness;
pub mod reasoning;
pub mod routes;
pub mod state;
pub mod stats;
pub mod structured;
pub mod tokenize;
pub mod tools;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use error::ApiError;
pub use routes::router;
pub use state::{AppState, ServerConfig};

/// Extra time after the engine has drained for responses to reach their clients.
const FLUSH_GRACE: Duration = Duration::from_secs(5);

/// Serves `state` on `listener` until `shutdown` resolves; then says `draining` on
/// `/ready`, refuses new requests (503), lets running ones finish for up to the drain
/// timeout, aborts the rest, stops the engine and closes the listener.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let watch = async move {
        shutdown.await;
        let _ = signalled_tx.send(());
    };
    let watch = tokio::spawn(watch);
    // The listener stays open through the drain, so probes and routers see `draining`.
    let mut server = tokio::spawn(listen::run(
        listener,
        router(state.clone()),
        state.config.listen,
        state.config.retry_after_s,
        async move {
            let _ = drained_rx.await;
        },
    ));
    let stats = stats::spawn(state.clone());

    // The signal, or the server ending on its own (it failed).
    let ended = tokio::select! {
        _ = signalled_rx => None,
        r = &mut server => Some(r),
    };
    watch.abort();
    if let Some(r) = ended {
        let engine = state.engine.clone();
        tokio::task::spawn_blocking(move || engine.shutdown(Duration::ZERO)).await?;
        stats.abort();
        r??;
        anyhow::bail!("the HTTP server stopped on its own");
    }
    state.readiness.set(readiness::Phase::Draining);
    let drain = state.config.drain_timeout;
    tracing::info!("shutting down: running requests get up to {drain:?} to finish");
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || engine.shutdown(drain)).await?;
    stats.abort();
    let _ = drained_tx.send(());
    match tokio::time::timeout(FLUSH_GRACE, server).await {
        Ok(joined) => joined??,
        Err(_) => {
            tracing::warn!("connections still open {FLUSH_GRACE:?} after the drain; closing them")
        }
    }
    tracing::info!("server stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = super::listen::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(tokio::net::TcpStream::connect(addr));
        let (accepted, _) = listener.accept().await.unwrap();
        super::listen::prepare(&accepted, super::listen::nodelay_enabled());
        assert!(
            accepted.nodelay().unwrap(),
            "the server's side of a connection must not wait on delayed ACKs"
        );
        client.await.unwrap().unwrap();
    }
}
