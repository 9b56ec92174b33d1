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

use crate::body::{parse_json_object, read_limited, require_json};
use crate::choice::{ReasoningOutput, ToolOutput};
use crate::error::ApiError;
use crate::generate::{respond, ChoiceRequest, Endpoint, ResponseShape};
use crate::params::{chat_plan, completion_plan, Limits, Plan, PromptInput, ReplayOutput};
use crate::prompt::{check_model, encode, render_prompt, tool_format, TemplateArgs};
use crate::protocol::{
    ChatCompletionRequest, CompletionRequest, ModelCard, ModelList, SamplingDefaults,
};
use crate::state::AppState;
use crate::structured;
use crate::tools::forced_call_grammar;

/// Header that tags a request with a workload for `profile:` K tables.
pub const WORKLOAD_HEADER: &str = "x-wring-workload";

pub fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(get_model))
        .route("/tokenize", post(crate::tokenize::tokenize))
        .route("/detokenize", post(crate::tokenize::detokenize))
        .route("/admin/suffix-cache/reset", post(reset_suffix_cache))
        .route("/admin/kv-cache/blocks", get(crate::ops::cached_blocks))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_api_key,
        ));
    let router = Router::new()
        .merge(protected)
        .route("/health", get(health))
        .route("/ready", get(crate::ops::ready))
        .route("/metrics", get(crate::metrics::handler))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    // Outermost, so a preflight is answered before routing and the key check.
    let router = match crate::cors::layer(&state.config.allowed_origins) {
        Some(cors) => router.layer(cors),
        None => router,
    };
    router.with_state(state)
}

async fn require_api_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        if !given.is_some_and(|g| keys_match(g, key)) {
            return ApiError::bad_api_key().into_response();
        }
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive
/// (RFC 9110 §11.1: `bearer`, `BEARER` are the same scheme).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Compares SHA-256 digests without an early exit: the time taken reveals neither
/// a matching prefix nor the key's length.
fn keys_match(given: &str, key: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(key.as_bytes()),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let bytes = read_limited(&headers, body, state.config.max_body_bytes).await?;
    let req: ChatCompletionRequest = parse_json_object(&bytes, ChatCompletionRequest::FIELDS)?;
    check_model(&state, req.model.as_deref())?;
    let (mut plan, input) = chat_plan(&req, workload_header(&headers), limits(&state))?;
    let args = TemplateArgs {
        kwargs: Some(&input.template_kwargs),
        reasoning_effort: input.reasoning_effort.as_deref(),
    };
    let prompt = render_prompt(&state, input.messages.clone(), &input.tools, args)?;
    let rendered = prompt.rendered;
    // A forced tool call is constrained by the grammar of the call (the combination
    // with another constraint was refused by `chat_plan`); its opening is in the
    // prompt, or (a reasoning model, which thinks first) in the grammar.
    let with_opening = rendered.forced_opening.is_some();
    if let Some(spec) = forced_call_grammar(&input.tools, tool_format(&state), with_opening) {
        plan.constraint = Some(structured::Constraint {
            spec,
            param: "tool_choice".into(),
        });
    }
    // With a reasoning parser the grammar binds the answer after the thinking.
    if let (Some(r), Some(c)) = (&state.reasoning, &plan.constraint) {
        plan.grammar_start = r.grammar_start(prompt.split, &c.param)?;
    }
    compile_constraint(&state, &mut plan).await?;
    tokenize_replay(&state, &mut plan)?;
    plan.trace_id = request_id_header(&headers);
    let ids = encode(&state, &rendered.text)?;
    if let Some(stop) = rendered.stop.clone() {
        plan.stop_strings.push(stop);
    }
    let tools = input.tools.parses_calls().then(|| ToolOutput {
        format: tool_format(&state),
        forced_prefix: rendered.forced_prefix,
        names: input.tools.tools.iter().map(|t| t.name.clone()).collect(),
    });
    let reasoning = prompt.split.map(|start| ReasoningOutput {
        start,
        include: input.include_reasoning,
    });
    submit(
        state,
        Endpoint::Chat,
        plan,
        vec![(ids, String::new())],
        "messages",
        tools,
        reasoning,
    )
    .await
}

async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let bytes = read_limited(&headers, body, state.config.max_body_bytes).await?;
    let req: CompletionRequest = parse_json_object(&bytes, CompletionRequest::FIELDS)?;
    check_model(&state, req.model.as_deref())?;
    let (mut plan, prompts) = completion_plan(&req, workload_header(&headers), limits(&state))?;
    compile_constraint(&state, &mut plan).await?;
    tokenize_replay(&state, &mut plan)?;
    plan.trace_id = request_id_header(&headers);
    let prompts = prompts
        .into_iter()
        .map(|p| match p {
            PromptInput::Text(text) => Ok((encode(&state, &text)?, text)),
            PromptInput::Ids(ids) => {
                let text = if plan.echo {
                    state.info.tokenizer.decode(&ids, true).map_err(|e| {
                        ApiError::invalid_param(
                            "prompt",
                            format!("The prompt could not be decoded: {e:#}"),
                        )
                    })?
                } else {
                    String::new()
                };
                Ok((ids, text))
            }
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    submit(
        state,
        Endpoint::Completion,
        plan,
        prompts,
        "prompt",
        None,
        None,
    )
    .await
}

/// One choice per (prompt, sample); samples of a seeded request get seeds
/// `seed, seed + 1, ...` so they differ yet repeat.
async fn submit(
    state: Arc<AppState>,
    endpoint: Endpoint,
    plan: Plan,
    prompts: Vec<(Vec<u32>, String)>,
    prompt_param: &'static str,
    tools: Option<ToolOutput>,
    reasoning: Option<ReasoningOutput>,
) -> Result<Response, ApiError> {
    let shape = ResponseShape {
        endpoint,
        stream: plan.stream,
        include_usage: plan.include_usage,
        logprobs: plan.logprobs,
        user: plan.user.clone(),
        prompt_param,
        tools,
        reasoning,
    };
    let id = state.new_request_id(endpoint.id_prefix());
    let n = plan.n;
    let mut choices = Vec::with_capacity(prompts.len() * n as usize);
    for (group, (ids, text)) in prompts.into_iter().enumerate() {
        for sample in 0..n {
            let index = group as u32 * n + sample;
            let base = plan.trace_id.as_ref().unwrap_or(&id);
            let request_id = if choices.is_empty() && n == 1 {
                base.clone()
            } else {
                format!("{base}/{index}")
            };
            let mut req = plan.clone().into_request(
                request_id,
                ids.clone(),
                state.info.max_model_len,
                prompt_param,
            )?;
            if let Some(seed) = req.sampling.seed.as_mut() {
                *seed = seed.wrapping_add(sample as u64);
            }
            choices.push(ChoiceRequest {
                index,
                group,
                req,
                echo: plan.echo.then(|| text.clone()),
            });
        }
    }
    respond(state, id, shape, choices).await
}

/// Compiles the request's structured-output constraint against the tokenizer into
/// the matcher the engine enforces (`plan.grammar`; every choice gets a clone). A
/// bad schema, regex or grammar is a 400 naming its field. Compiling takes
/// milliseconds, off the async workers.
async fn compile_constraint(state: &Arc<AppState>, plan: &mut Plan) -> Result<(), ApiError> {
    let Some(c) = plan.constraint.clone() else {
        return Ok(());
    };
    let st = state.clone();
    let matcher = tokio::task::spawn_blocking(move || {
        let compiler = st
            .grammars
            .compiler(&st.info.tokenizer, &st.info.eos_token_ids)?;
        structured::compile(compiler, &c)
    })
    .await
    .map_err(|e| ApiError::internal(format!("grammar compilation failed: {e}")))??;
    plan.grammar = Some(matcher);
    Ok(())
}

fn limits(state: &AppState) -> Limits {
    Limits {
        vocab_size: state.info.tokenizer.vocab_size(),
        max_tokens_default: state.config.max_tokens_default,
        generation: state.config.generation_defaults,
        replay_outputs: state.config.replay_outputs,
        dry_multiplier_default: state.config.dry_multiplier_default,
    }
}

/// `replay_output` text becomes the ids the engine emits (the tokenizer's own split of it).
fn tokenize_replay(state: &AppState, plan: &mut Plan) -> Result<(), ApiError> {
    if let Some(ReplayOutput::Text(text)) = &plan.replay_output {
        let ids = state
            .info
            .tokenizer
            .encode(text)
            .map_err(|e| ApiError::invalid_param("replay_output", format!("{e:#}")))?;
        if ids.is_empty() {
            return Err(ApiError::invalid_param(
                "replay_output",
                "`replay_output` tokenizes to nothing.",
            ));
        }
        plan.replay_output = Some(ReplayOutput::Ids(ids));
    }
    Ok(())
}

/// A client's `X-Request-Id` (at most 128 visible ASCII characters): the request's name
/// in logs and in `--trace-out` (a benchmark matches recorded outputs to prompts by it).
fn request_id_header(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 128 && s.chars().all(|c| c.is_ascii_graphic()))
        .map(String::from)
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
        sampling_defaults: sampling_defaults(&state.config),
        default_system_message: state.config.default_system.clone(),
        reasoning_parser: state.reasoning.as_ref().map(|r| r.kind.name()),
    }
}

/// What a request that leaves sampling fields out gets, where it differs from OpenAI's
/// defaults: the model's own settings and the server's loop penalty.
fn sampling_defaults(config: &crate::state::ServerConfig) -> SamplingDefaults {
    let g = config.generation_defaults;
    let dry = config.dry_multiplier_default > 0.0;
    let engine = wring_engine::api::SamplingParams::default();
    SamplingDefaults {
        temperature: g.temperature,
        top_p: g.top_p,
        top_k: g.top_k,
        min_p: g.min_p,
        max_tokens: config.max_tokens_default,
        dry_multiplier: config.dry_multiplier_default,
        dry_base: dry.then_some(engine.dry_base),
        dry_allowed_length: dry.then_some(engine.dry_allowed_length),
        dry_penalty_last_n: dry.then_some(engine.dry_penalty_last_n),
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
    use super::{bearer_token, keys_match};

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer k"), Some("k"));
        assert_eq!(bearer_token("bearer k"), Some("k"));
        assert_eq!(bearer_token("BEARER  k "), Some("k"));
        assert_eq!(bearer_token("Basic k"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerk"), None);
    }

    #[test]
    fn key_comparison() {
        assert!(keys_match("abc", "abc"));
        assert!(!keys_match("abc", "abd"));
        assert!(!keys_match("abc", "abcd"));
        assert!(!keys_match("", "abc"));
    }
}
