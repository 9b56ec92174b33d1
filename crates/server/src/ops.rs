//! Endpoints for orchestrators and routers: readiness, the server that answers while the
//! model loads, and the prefix cache's block listing.
//!
//! - `GET /health` (liveness, `routes.rs`): 200 from the moment the engine serves until the
//!   process exits, drain included; 503 while the model loads.
//! - `GET /ready` (readiness): 200 only while requests are taken: 503 `loading` until the
//!   model is loaded and warm-up is done, 503 `draining` once SIGTERM/SIGINT arrived.
//! - `GET /admin/kv-cache/blocks`: every block hash in the prefix cache (what a router that
//!   mirrors the KV events should hold), behind the API key.
//!
//! `wring serve` binds its port before loading the model and answers there with
//! [`loading_router`] (503 and `Retry-After` on every path) until the engine is up.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::error::ApiError;
use crate::readiness::Phase;
use crate::state::AppState;

fn phase_response(p: Phase) -> Response {
    let status = if p == Phase::Ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(json!({"status": p.as_str()}))).into_response()
}

/// `GET /ready`.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    phase_response(state.readiness.get())
}

/// `GET /admin/kv-cache/blocks`: `{block_size, hash_scheme, count, hashes}` (hashes sorted).
pub async fn cached_blocks(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let Some(mut hashes) = state.engine.cached_block_hashes().await else {
        return Err(ApiError::unavailable("The engine has stopped."));
    };
    hashes.sort_unstable();
    Ok(Json(json!({
        "block_size": state.info.block_size,
        "hash_scheme": "fnv64a-cbor",
        "count": hashes.len(),
        "hashes": hashes,
    }))
    .into_response())
}

/// What answers on the port while the model loads: `/health` and `/ready` say `loading`
/// (503), every other path is a 503 with `Retry-After`.
pub fn loading_router() -> Router {
    async fn loading() -> Response {
        phase_response(Phase::Loading)
    }
    async fn other(_req: Request) -> Response {
        let mut r = ApiError::unavailable("The model is still loading.").into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
        r
    }
    Router::new()
        .route("/health", get(loading))
        .route("/ready", get(loading))
        .fallback(other)
}

/// Answers on `listener` with [`loading_router`] until `loaded` fires, then lets its
/// connections finish (the caller serves the same socket from then on).
pub async fn serve_while_loading(
    listener: tokio::net::TcpListener,
    loaded: tokio::sync::oneshot::Receiver<()>,
) {
    let served = axum::serve(listener, loading_router())
        .with_graceful_shutdown(async move {
            let _ = loaded.await;
        })
        .await;
    if let Err(e) = served {
        tracing::warn!("the loading-phase listener failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::Readiness;

    #[test]
    fn phases_round_trip() {
        let r = Readiness::new(Phase::Loading);
        assert_eq!(r.get(), Phase::Loading);
        r.set(Phase::Ready);
        assert_eq!(r.get(), Phase::Ready);
        r.set(Phase::Draining);
        assert_eq!(r.get(), Phase::Draining);
        assert_eq!(phase_response(Phase::Ready).status(), StatusCode::OK);
        assert_eq!(
            phase_response(Phase::Draining).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
