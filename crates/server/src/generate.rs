//! Running one request through the engine and shaping its events into OpenAI
//! responses: a whole JSON body, or an SSE stream whose chunks may each carry
//! several tokens (speculative decoding emits runs of accepted tokens at once).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{stream, Stream, StreamExt};
use wring_engine::api::{
    EngineEvent, FinishReason, GenerateRequest, SubmitError, TokenLogprob, Usage,
};
use wring_engine::RequestHandle;

use crate::error::ApiError;
use crate::logprobs::{Formatted, LogprobFormatter};
use crate::params::{context_exceeded, LogprobsFormat};
use crate::protocol::*;
use crate::state::{unix_now, AppState};

/// Which endpoint's shapes to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

impl Endpoint {
    pub fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completion => "completion",
        }
    }
}

/// Response settings of one request, fixed before it is submitted.
#[derive(Debug, Clone)]
pub struct ResponseShape {
    pub endpoint: Endpoint,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: Option<LogprobsFormat>,
    pub user: Option<String>,
    /// Parameter named in prompt-related errors (`messages` or `prompt`).
    pub prompt_param: &'static str,
}

/// Submits `req` and answers with a JSON body or an SSE stream. The engine
/// request lives as long as the response: dropping either aborts it.
pub async fn respond(
    state: Arc<AppState>,
    shape: ResponseShape,
    req: GenerateRequest,
) -> Result<Response, ApiError> {
    let log = RequestLog::new(req.request_id.clone(), &shape, req.prompt_ids.len());
    let handle = state
        .engine
        .submit(req)
        .map_err(|e| submit_error(&state, e, shape.prompt_param))?;
    let run = Run {
        id: log.request_id.clone(),
        created: unix_now(),
        model: state.model_name().to_string(),
        lp: LogprobFormatter::new(state.info.tokenizer.clone()),
        shape,
        log,
    };
    if run.shape.stream {
        Ok(run.stream(handle))
    } else {
        run.collect(handle).await
    }
}

fn submit_error(state: &AppState, e: SubmitError, prompt_param: &str) -> ApiError {
    match e {
        SubmitError::QueueFull(_) => {
            ApiError::queue_full(e.to_string(), state.config.retry_after_s)
        }
        SubmitError::TooLong {
            prompt,
            max_tokens,
            max_len,
        } => context_exceeded(max_len, prompt, max_tokens, prompt_param),
        SubmitError::EmptyPrompt => ApiError::invalid_param(prompt_param, "The prompt is empty."),
        SubmitError::Invalid(msg) => ApiError::invalid(msg),
        SubmitError::ShuttingDown => ApiError::unavailable("The server is shutting down."),
    }
}

/// The next thing that happened to a request.
enum Step {
    Tokens {
        ids: Vec<u32>,
        text: String,
        logprobs: Option<Vec<TokenLogprob>>,
    },
    Finished(FinishReason, Usage),
    Failed(ApiError),
}

async fn next_step(handle: &mut RequestHandle) -> Step {
    match handle.events.recv().await {
        Some(EngineEvent::Tokens {
            ids,
            text,
            logprobs,
        }) => Step::Tokens {
            ids,
            text,
            logprobs,
        },
        Some(EngineEvent::Finished { reason, usage }) => match reason {
            FinishReason::Stop | FinishReason::Length => Step::Finished(reason, usage),
            FinishReason::Abort => Step::Failed(ApiError::unavailable(
                "The request was aborted because the server is shutting down.",
            )),
            FinishReason::Error => {
                Step::Failed(ApiError::internal("The request failed in the engine."))
            }
        },
        Some(EngineEvent::Error { message }) => Step::Failed(ApiError::internal(message)),
        None => Step::Failed(ApiError::internal(
            "The engine stopped before the request finished.",
        )),
    }
}

/// One request in flight: what its response needs besides the engine events.
struct Run {
    id: String,
    created: u64,
    model: String,
    shape: ResponseShape,
    lp: LogprobFormatter,
    log: RequestLog,
}

impl Run {
    /// Waits for the whole output (non-streaming).
    async fn collect(mut self, mut handle: RequestHandle) -> Result<Response, ApiError> {
        let mut text = String::new();
        let mut chat_lp = ChatLogprobs::default();
        let mut cmpl_lp = CompletionLogprobs::default();
        let (reason, usage) = loop {
            match next_step(&mut handle).await {
                Step::Tokens {
                    ids,
                    text: t,
                    logprobs,
                } => {
                    self.log.on_tokens(ids.len());
                    text.push_str(&t);
                    if let (Some(format), Some(lps)) = (self.shape.logprobs, logprobs) {
                        match self.lp.format(format, &lps) {
                            Formatted::Chat(c) => chat_lp.extend(c),
                            Formatted::Completion(c) => cmpl_lp.extend(c),
                        }
                    }
                }
                Step::Finished(reason, usage) => break (reason, usage),
                Step::Failed(e) => {
                    self.log.failed(&e);
                    return Err(e);
                }
            }
        };
        self.log.finished(reason, &usage);
        let finish_reason = Some(reason.as_str());
        let usage = UsageInfo::from(&usage);
        let with_lp = self.shape.logprobs.is_some();
        let response = match self.shape.endpoint {
            Endpoint::Chat => axum::Json(ChatCompletionResponse {
                id: self.id.clone(),
                object: "chat.completion",
                created: self.created,
                model: self.model.clone(),
                choices: vec![ChatChoice {
                    index: 0,
                    message: ChatMessageOut {
                        role: "assistant",
                        content: text,
                    },
                    logprobs: with_lp.then_some(chat_lp),
                    finish_reason,
                }],
                usage,
            })
            .into_response(),
            Endpoint::Completion => axum::Json(CompletionResponse {
                id: self.id.clone(),
                object: "text_completion",
                created: self.created,
                model: self.model.clone(),
                choices: vec![CompletionChoice {
                    index: 0,
                    text,
                    logprobs: with_lp.then_some(cmpl_lp),
                    finish_reason,
                }],
                usage: Some(usage),
            })
            .into_response(),
        };
        Ok(response)
    }

    /// Server-sent events: (chat) a role chunk, one chunk per engine event with
    /// text, a chunk with `finish_reason`, the usage chunk if asked, `[DONE]`.
    fn stream(self, handle: RequestHandle) -> Response {
        let opening = match self.shape.endpoint {
            Endpoint::Chat => vec![self.chat_chunk(Some(String::new()), true, None, None)],
            Endpoint::Completion => vec![],
        };
        let rest = stream::unfold(Some((self, handle)), |st| async move {
            let (mut run, mut handle) = st?;
            let (events, done) = run.next_events(&mut handle).await;
            Some((stream::iter(events), (!done).then_some((run, handle))))
        })
        .flatten();
        let body = stream::iter(opening).chain(rest).map(Ok::<_, Infallible>);
        sse(body)
    }

    /// The SSE payloads for the next engine event; `true` when the stream is over.
    async fn next_events(&mut self, handle: &mut RequestHandle) -> (Vec<String>, bool) {
        loop {
            match next_step(handle).await {
                Step::Tokens {
                    ids,
                    text,
                    logprobs,
                } => {
                    self.log.on_tokens(ids.len());
                    let logprobs = match (self.shape.logprobs, logprobs) {
                        (Some(format), Some(lps)) if !lps.is_empty() => {
                            Some(self.lp.format(format, &lps))
                        }
                        _ => None,
                    };
                    // A character still incomplete: nothing to send yet.
                    if text.is_empty() && logprobs.is_none() {
                        continue;
                    }
                    return (vec![self.content_chunk(text, logprobs, None)], false);
                }
                Step::Finished(reason, usage) => {
                    self.log.finished(reason, &usage);
                    let mut out =
                        vec![self.content_chunk(String::new(), None, Some(reason.as_str()))];
                    if self.shape.include_usage {
                        out.push(self.usage_chunk(&usage));
                    }
                    out.push("[DONE]".to_string());
                    return (out, true);
                }
                Step::Failed(e) => {
                    self.log.failed(&e);
                    return (vec![e.body_json(), "[DONE]".to_string()], true);
                }
            }
        }
    }

    fn content_chunk(
        &self,
        text: String,
        logprobs: Option<Formatted>,
        finish: Option<&'static str>,
    ) -> String {
        match self.shape.endpoint {
            Endpoint::Chat => {
                let lp = match logprobs {
                    Some(Formatted::Chat(c)) => Some(c),
                    _ => None,
                };
                let content = (!text.is_empty() || finish.is_none()).then_some(text);
                self.chat_chunk(content, false, lp, finish)
            }
            Endpoint::Completion => {
                let lp = match logprobs {
                    Some(Formatted::Completion(c)) => Some(c),
                    _ => None,
                };
                to_json(&CompletionResponse {
                    id: self.id.clone(),
                    object: "text_completion",
                    created: self.created,
                    model: self.model.clone(),
                    choices: vec![CompletionChoice {
                        index: 0,
                        text,
                        logprobs: lp,
                        finish_reason: finish,
                    }],
                    usage: None,
                })
            }
        }
    }

    fn chat_chunk(
        &self,
        content: Option<String>,
        with_role: bool,
        logprobs: Option<ChatLogprobs>,
        finish: Option<&'static str>,
    ) -> String {
        to_json(&ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChatChunkChoice {
                index: 0,
                delta: ChatDelta {
                    role: with_role.then_some("assistant"),
                    content,
                },
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
        })
    }

    /// The final usage-only chunk (`stream_options.include_usage`): empty `choices`.
    fn usage_chunk(&self, usage: &Usage) -> String {
        let usage = Some(UsageInfo::from(usage));
        match self.shape.endpoint {
            Endpoint::Chat => to_json(&ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk",
                created: self.created,
                model: self.model.clone(),
                choices: vec![],
                usage,
            }),
            Endpoint::Completion => to_json(&CompletionResponse {
                id: self.id.clone(),
                object: "text_completion",
                created: self.created,
                model: self.model.clone(),
                choices: vec![],
                usage,
            }),
        }
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("response types serialise")
}

fn sse(payloads: impl Stream<Item = Result<String, Infallible>> + Send + 'static) -> Response {
    let events = payloads.map(|p| p.map(|data| Event::default().data(data)));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The per-request log line, written once when the request ends — also when the
/// client goes away mid-stream (then from `Drop`).
struct RequestLog {
    request_id: String,
    endpoint: Endpoint,
    user: Option<String>,
    prompt_tokens: usize,
    started: Instant,
    first_token: Option<Instant>,
    completion_tokens: usize,
    done: bool,
}

impl RequestLog {
    fn new(request_id: String, shape: &ResponseShape, prompt_tokens: usize) -> Self {
        Self {
            request_id,
            endpoint: shape.endpoint,
            user: shape.user.clone(),
            prompt_tokens,
            started: Instant::now(),
            first_token: None,
            completion_tokens: 0,
            done: false,
        }
    }

    fn on_tokens(&mut self, n: usize) {
        if n > 0 && self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        self.completion_tokens += n;
    }

    fn ttft_ms(&self) -> f64 {
        self.first_token
            .map(|t| (t - self.started).as_secs_f64() * 1e3)
            .unwrap_or(f64::NAN)
    }

    fn finished(&mut self, reason: FinishReason, usage: &Usage) {
        self.done = true;
        let latency = self.started.elapsed().as_secs_f64();
        tracing::info!(
            target: "wring::request",
            id = %self.request_id,
            endpoint = self.endpoint.name(),
            user = self.user.as_deref().unwrap_or("-"),
            prompt_tokens = usage.prompt_tokens,
            cached_tokens = usage.cached_tokens,
            completion_tokens = usage.completion_tokens,
            draft_tokens = usage.draft_tokens,
            accepted_tokens = usage.accepted_tokens,
            finish = reason.as_str(),
            ttft_ms = format_args!("{:.1}", self.ttft_ms()),
            latency_ms = format_args!("{:.1}", latency * 1e3),
            "request done"
        );
    }

    fn failed(&mut self, e: &ApiError) {
        self.done = true;
        tracing::warn!(
            target: "wring::request",
            id = %self.request_id,
            endpoint = self.endpoint.name(),
            prompt_tokens = self.prompt_tokens,
            completion_tokens = self.completion_tokens,
            latency_ms = format_args!("{:.1}", self.started.elapsed().as_secs_f64() * 1e3),
            error = %e,
            "request failed"
        );
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if !self.done {
            tracing::info!(
                target: "wring::request",
                id = %self.request_id,
                endpoint = self.endpoint.name(),
                prompt_tokens = self.prompt_tokens,
                completion_tokens = self.completion_tokens,
                latency_ms = format_args!("{:.1}", self.started.elapsed().as_secs_f64() * 1e3),
                "client disconnected; request aborted"
            );
        }
    }
}
