//! `/tokenize` and `/detokenize`, shaped like vLLM's: a completion prompt or chat
//! messages (rendered exactly as `/v1/chat/completions` would) to token ids, and
//! token ids back to text.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::body::{parse_json_object, read_limited, require_json};
use crate::error::ApiError;
use crate::messages::chat_messages;
use crate::prompt::{check_model, encode, render_prompt, TemplateArgs};
use crate::protocol::ChatMessageIn;
use crate::state::AppState;
use crate::tools::tool_plan;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<ChatMessageIn>>,
    pub add_special_tokens: Option<bool>,
    pub add_generation_prompt: Option<bool>,
    pub return_token_strs: Option<bool>,
    pub tools: Option<Value>,
    pub chat_template_kwargs: Option<Value>,
}

impl TokenizeRequest {
    pub const FIELDS: &'static [&'static str] = &[
        "model",
        "prompt",
        "messages",
        "add_special_tokens",
        "add_generation_prompt",
        "return_token_strs",
        "tools",
        "chat_template_kwargs",
    ];
}

#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<i64>,
}

#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<TokenizeResponse>, ApiError> {
    require_json(&headers)?;
    let bytes = read_limited(&headers, body, state.config.max_body_bytes).await?;
    let req: TokenizeRequest = parse_json_object(&bytes, TokenizeRequest::FIELDS)?;
    check_model(&state, req.model.as_deref())?;
    let tokens = match (&req.prompt, &req.messages) {
        (Some(prompt), None) => {
            if req.add_special_tokens.unwrap_or(true) {
                encode(&state, prompt)?
            } else {
                state.info.tokenizer.encode(prompt).map_err(|e| {
                    ApiError::invalid(format!("The prompt could not be tokenized: {e:#}"))
                })?
            }
        }
        (None, Some(messages)) => {
            if req.add_generation_prompt == Some(false) {
                return Err(ApiError::invalid_param(
                    "add_generation_prompt",
                    "Only add_generation_prompt=true is supported (the prompt chat completions would send).",
                ));
            }
            let messages = chat_messages(messages)?;
            let tools = tool_plan(req.tools.as_ref(), None)?;
            let kwargs = crate::params::template_kwargs(req.chat_template_kwargs.as_ref())?;
            let args = TemplateArgs {
                kwargs: Some(&kwargs),
                reasoning_effort: None,
            };
            let prompt = render_prompt(&state, messages, &tools, args)?;
            encode(&state, &prompt.rendered.text)?
        }
        _ => {
            return Err(ApiError::invalid(
                "Send exactly one of `prompt` (a string) and `messages`.",
            ))
        }
    };
    let token_strs = (req.return_token_strs == Some(true)).then(|| {
        tokens
            .iter()
            .map(|&t| state.info.tokenizer.id_to_token(t).unwrap_or_default())
            .collect()
    });
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: state.info.max_model_len,
        tokens,
        token_strs,
    }))
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    require_json(&headers)?;
    let bytes = read_limited(&headers, body, state.config.max_body_bytes).await?;
    let req: DetokenizeRequest = parse_json_object(&bytes, &["model", "tokens"])?;
    check_model(&state, req.model.as_deref())?;
    let vocab = state.info.tokenizer.vocab_size();
    let ids = req
        .tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            u32::try_from(t)
                .ok()
                .filter(|&t| (t as usize) < vocab)
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "tokens",
                        format!(
                            "Token {t} at position {i} is outside the vocabulary (size {vocab})."
                        ),
                    )
                })
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let prompt = state.info.tokenizer.decode(&ids, false).map_err(|e| {
        ApiError::invalid_param("tokens", format!("Could not decode the tokens: {e:#}"))
    })?;
    Ok(Json(DetokenizeResponse { prompt }))
}
