//! The HTTP surface: routes, API-key check, and the handlers that turn a body
//! into an engine request.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use wring_model::ChatMessage;

use crate::body::{parse_json_object, read_limited};
use crate::error::ApiError;
use crate::generate::{respond, Endpoint, ResponseShape};
use crate::params::{chat_plan, completion_plan, Limits, Plan, PromptInput};
use crate::protocol::{ChatCompletionRequest, CompletionRequest, ModelCard, ModelList};
use crate::state::AppState;

/// Header that tags a request with a workload for `profile:` K tables.
pub const WORKLOAD_HEADER: &str = "x-wring-workload";

pub fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(get_model))
        .route("/admin/suffix-cache/reset", post(reset_suffix_cache))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    Router::new()
        .merge(protected)
        .route("/health", get(health))
        .route("/metrics", get(crate::metrics::handler))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn require_api_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
            return ApiError::bad_api_key().into_response();
        }
    }
    next.run(req).await
}

/// Compares without an early exit, so timing does not reveal a key prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_limited(&headers, body, state.config.max_body_bytes).await?;
    let req: ChatCompletionRequest = parse_json_object(&bytes, ChatCompletionRequest::FIELDS)?;
    check_model(&state, req.model.as_deref())?;
    let (plan, messages) = chat_plan(&req, workload_header(&headers), limits(&state))?;
    let template = state.info.chat_template.as_ref().ok_or_else(|| {
        ApiError::invalid("This model has no chat template; use /v1/completions instead.")
    })?;
    let messages: Vec<ChatMessage> = messages
        .into_iter()
        .map(|(role, content)| ChatMessage { role, content })
        .collect();
    let text = template.render(&messages, true).map_err(|e| {
        ApiError::invalid_param(
            "messages",
            format!("The chat template rejected the messages: {e:#}"),
        )
    })?;
    let ids = encode(&state, &text)?;
    submit(state, Endpoint::Chat, plan, ids, "messages").await
}

async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_limited(&headers, body, state.config.max_body_bytes).await?;
    let req: CompletionRequest = parse_json_object(&bytes, CompletionRequest::FIELDS)?;
    check_model(&state, req.model.as_deref())?;
    let (plan, prompt) = completion_plan(&req, workload_header(&headers), limits(&state))?;
    let ids = match prompt {
        PromptInput::Text(text) => encode(&state, &text)?,
        PromptInput::Ids(ids) => ids,
    };
    submit(state, Endpoint::Completion, plan, ids, "prompt").await
}

async fn submit(
    state: Arc<AppState>,
    endpoint: Endpoint,
    plan: Plan,
    prompt_ids: Vec<u32>,
    prompt_param: &'static str,
) -> Result<Response, ApiError> {
    let shape = ResponseShape {
        endpoint,
        stream: plan.stream,
        include_usage: plan.include_usage,
        logprobs: plan.logprobs,
        user: plan.user.clone(),
        prompt_param,
    };
    let request_id = state.new_request_id(endpoint.id_prefix());
    let req = plan.into_request(
        request_id,
        prompt_ids,
        state.info.max_model_len,
        prompt_param,
    )?;
    respond(state, shape, req).await
}

/// Token ids of a prompt, with BOS in front when the model wants one (chat
/// templates usually write it themselves; then it is not doubled).
fn encode(state: &AppState, text: &str) -> Result<Vec<u32>, ApiError> {
    let tok = &state.info.tokenizer;
    let mut ids = tok
        .encode(text)
        .map_err(|e| ApiError::invalid(format!("The prompt could not be tokenized: {e:#}")))?;
    if let (true, Some(bos)) = (tok.add_bos(), tok.bos_token_id()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    Ok(ids)
}

fn check_model(state: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(name) if !state.knows_model(name) => Err(ApiError::model_not_found(name)),
        _ => Ok(()),
    }
}

fn limits(state: &AppState) -> Limits {
    Limits {
        vocab_size: state.info.tokenizer.vocab_size(),
    }
}

fn workload_header(headers: &HeaderMap) -> Option<String> {
    headers
        .get(WORKLOAD_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn model_card(state: &AppState, name: &str) -> ModelCard {
    ModelCard {
        id: name.to_string(),
        object: "model",
        created: state.started_unix,
        owned_by: "wring",
        max_model_len: state.info.max_model_len,
    }
}

async fn list_models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    let data = state
        .config
        .served_model_names
        .iter()
        .map(|n| model_card(&state, n))
        .collect();
    Json(ModelList {
        object: "list",
        data,
    })
}

async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    check_model(&state, Some(&model))?;
    Ok(Json(model_card(&state, &model)))
}

async fn reset_suffix_cache(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let engine = state.engine.clone();
    // The engine may take its lock for a moment; keep it off the async workers.
    let _ = tokio::task::spawn_blocking(move || engine.reset_suffix_cache()).await;
    tracing::info!("global suffix cache reset");
    Json(serde_json::json!({"status": "ok"}))
}

async fn health() -> impl IntoResponse {
    (StatusCode::OK, Json(serde_json::json!({"status": "ok"})))
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "No route for {} {}.",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::method_not_allowed(format!(
        "Method {} is not allowed on {}.",
        req.method(),
        req.uri().path()
    ))
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn key_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
