//! Running a request's choices through the engine and shaping their events into
//! OpenAI responses: a whole JSON body, or an SSE stream whose chunks may each carry
//! several tokens (speculative decoding emits runs of accepted tokens at once).
//!
//! A request has one choice per (prompt, sample): `n` samples of each prompt of a
//! batch. Samples of one prompt share its KV blocks through the prefix cache: the
//! first is submitted alone and the others once it has produced a token (its prompt
//! blocks are then computed and cached), so the prompt is prefilled once.

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

use crate::choice::{total_usage, ChoiceOut, ChoiceSetup, ReasoningOutput, ToolOutput, Update};
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
    /// Chat with tools offered: how calls are found in the output.
    pub tools: Option<ToolOutput>,
    /// Chat with a reasoning parser: how the thinking is split off.
    pub reasoning: Option<ReasoningOutput>,
}

/// One choice to generate.
pub struct ChoiceRequest {
    pub index: u32,
    /// Which prompt it samples (choices of one prompt share its cached KV blocks).
    pub group: usize,
    pub req: GenerateRequest,
    /// Completions with `echo`: the prompt text.
    pub echo: Option<String>,
}

/// Submits the choices and answers with a JSON body or an SSE stream. The engine
/// requests live as long as the response: dropping it aborts them all.
pub async fn respond(
    state: Arc<AppState>,
    id: String,
    shape: ResponseShape,
    choices: Vec<ChoiceRequest>,
) -> Result<Response, ApiError> {
    let prompt_tokens = leaders(&choices).map(|c| c.req.prompt_ids.len()).sum();
    let log = RequestLog::new(id.clone(), &shape, prompt_tokens, choices.len());
    let mut outs = Vec::with_capacity(choices.len());
    let mut requests = Vec::with_capacity(choices.len());
    let mut seen_groups = std::collections::HashSet::new();
    for c in choices {
        let leader = seen_groups.insert(c.group);
        let setup = ChoiceSetup {
            index: c.index,
            group: c.group,
            leader,
            echo: c.echo,
        };
        let lp = LogprobFormatter::new(state.info.tokenizer.clone());
        outs.push(ChoiceOut::new(
            setup,
            lp,
            shape.logprobs,
            shape.tools.as_ref(),
            shape.reasoning,
            &id,
        ));
        requests.push(c.req);
    }
    let events = submit_all(&state, &outs, requests, shape.prompt_param).await?;
    let run = Run {
        id,
        created: unix_now(),
        model: state.model_name().to_string(),
        shape,
        log,
    };
    if run.shape.stream {
        Ok(run.stream(outs, events))
    } else {
        run.collect(outs, events).await
    }
}

fn leaders(choices: &[ChoiceRequest]) -> impl Iterator<Item = &ChoiceRequest> {
    let mut seen = std::collections::HashSet::new();
    choices.iter().filter(move |c| seen.insert(c.group))
}

/// A choice's engine events, with the first one possibly read ahead.
struct ChoiceEvents {
    handle: RequestHandle,
    ahead: Option<EngineEvent>,
}

impl ChoiceEvents {
    async fn recv(&mut self) -> Option<EngineEvent> {
        match self.ahead.take() {
            Some(e) => Some(e),
            None => self.handle.events.recv().await,
        }
    }
}

/// Submits every choice: each prompt's first choice at once, the others of that
/// prompt after its first event (prompt prefilled, blocks in the prefix cache).
async fn submit_all(
    state: &AppState,
    outs: &[ChoiceOut],
    requests: Vec<GenerateRequest>,
    prompt_param: &str,
) -> Result<Vec<ChoiceEvents>, ApiError> {
    let mut slots: Vec<Option<ChoiceEvents>> = Vec::with_capacity(requests.len());
    let mut later = Vec::new();
    for (out, req) in outs.iter().zip(requests) {
        if out.leader {
            let handle = submit(state, req, prompt_param)?;
            slots.push(Some(ChoiceEvents {
                handle,
                ahead: None,
            }));
        } else {
            slots.push(None);
            later.push((slots.len() - 1, req));
        }
    }
    if later.is_empty() {
        return Ok(slots.into_iter().flatten().collect());
    }
    // Read ahead the first event of every leader that has siblings.
    let groups_with_siblings: std::collections::HashSet<usize> =
        later.iter().map(|(i, _)| outs[*i].group).collect();
    let waits = slots.iter_mut().zip(outs).filter_map(|(slot, out)| {
        let ev = slot.as_mut()?;
        groups_with_siblings.contains(&out.group).then_some(ev)
    });
    futures::future::join_all(waits.map(|ev| async move {
        ev.ahead = ev.handle.events.recv().await;
    }))
    .await;
    for (i, req) in later {
        let handle = submit(state, req, prompt_param)?;
        slots[i] = Some(ChoiceEvents {
            handle,
            ahead: None,
        });
    }
    Ok(slots
        .into_iter()
        .map(|s| s.expect("every choice submitted"))
        .collect())
}

fn submit(
    state: &AppState,
    req: GenerateRequest,
    prompt_param: &str,
) -> Result<RequestHandle, ApiError> {
    state
        .engine
        .submit(req)
        .map_err(|e| submit_error(state, e, prompt_param))
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

/// The next thing that happened to a choice.
enum Step {
    Tokens {
        ids: Vec<u32>,
        text: String,
        logprobs: Option<Vec<TokenLogprob>>,
    },
    Finished(FinishReason, Usage),
    Failed(ApiError),
}

async fn next_step(events: &mut ChoiceEvents) -> Step {
    match events.recv().await {
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

/// One request in flight: what its response needs besides the choices.
struct Run {
    id: String,
    created: u64,
    model: String,
    shape: ResponseShape,
    log: RequestLog,
}

impl Run {
    /// Waits for every choice's whole output (non-streaming).
    async fn collect(
        mut self,
        mut outs: Vec<ChoiceOut>,
        events: Vec<ChoiceEvents>,
    ) -> Result<Response, ApiError> {
        // Each choice's first token time, for the request log's time to first token.
        let runs = outs.iter_mut().zip(events).map(|(out, mut ev)| async move {
            let mut first_token = None;
            loop {
                match next_step(&mut ev).await {
                    Step::Tokens {
                        ids,
                        text,
                        logprobs,
                    } => {
                        if !ids.is_empty() {
                            first_token.get_or_insert_with(Instant::now);
                        }
                        out.on_tokens(&text, logprobs);
                    }
                    Step::Finished(reason, usage) => {
                        out.on_finished(reason, usage);
                        return Ok(first_token);
                    }
                    Step::Failed(e) => return Err(e),
                }
            }
        });
        let mut first_token: Option<Instant> = None;
        for result in futures::future::join_all(runs).await {
            match result {
                Ok(t) => {
                    first_token = match (first_token, t) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                }
                Err(e) => {
                    self.log.failed(&e);
                    return Err(e);
                }
            }
        }
        self.log.first_token = first_token;
        let usage = total_usage(&outs);
        self.log.finished(&outs, &usage);
        let usage_info = UsageInfo::from(&usage);
        let with_lp = self.shape.logprobs.is_some();
        let response = match self.shape.endpoint {
            Endpoint::Chat => axum::Json(ChatCompletionResponse {
                id: self.id.clone(),
                object: "chat.completion",
                created: self.created,
                model: self.model.clone(),
                choices: outs
                    .into_iter()
                    .map(|o| {
                        let finish_reason = o.finish_reason();
                        let reasoning = o.reasoning();
                        // No answer is null after tool calls or thinking (vLLM's rule).
                        let content = (!o.text.is_empty() || (o.calls.is_empty() && !o.reasoned()))
                            .then_some(o.text);
                        ChatChoice {
                            index: o.index,
                            message: ChatMessageOut {
                                role: "assistant",
                                content,
                                reasoning_content: reasoning.clone(),
                                reasoning,
                                tool_calls: o.calls,
                            },
                            logprobs: with_lp.then_some(o.chat_lp),
                            finish_reason,
                        }
                    })
                    .collect(),
                usage: usage_info,
            })
            .into_response(),
            Endpoint::Completion => axum::Json(CompletionResponse {
                id: self.id.clone(),
                object: "text_completion",
                created: self.created,
                model: self.model.clone(),
                choices: outs
                    .into_iter()
                    .map(|o| CompletionChoice {
                        index: o.index,
                        finish_reason: o.finish_reason(),
                        text: o.text,
                        logprobs: with_lp.then_some(o.cmpl_lp),
                    })
                    .collect(),
                usage: Some(usage_info),
            })
            .into_response(),
        };
        Ok(response)
    }

    /// Server-sent events: (chat) a role chunk per choice, then chunks as each
    /// choice's events arrive (tagged with its index), a chunk with `finish_reason`
    /// per choice, the usage chunk if asked, `[DONE]`.
    fn stream(self, outs: Vec<ChoiceOut>, events: Vec<ChoiceEvents>) -> Response {
        let opening: Vec<String> = match self.shape.endpoint {
            Endpoint::Chat => outs
                .iter()
                .map(|o| {
                    self.chat_chunk(
                        o.index,
                        ChatDelta {
                            role: Some("assistant"),
                            content: Some(String::new()),
                            ..Default::default()
                        },
                        None,
                        None,
                    )
                })
                .collect(),
            Endpoint::Completion => vec![],
        };
        let merged = stream::select_all(events.into_iter().enumerate().map(|(i, ev)| {
            stream::unfold(Some(ev), move |ev| async move {
                let mut ev = ev?;
                let step = next_step(&mut ev).await;
                let more = matches!(step, Step::Tokens { .. });
                Some(((i, step), more.then_some(ev)))
            })
            .boxed()
        }));
        let remaining = outs.len();
        let state = StreamState {
            run: self,
            outs,
            remaining,
            merged,
        };
        let rest = stream::unfold(Some(state), |st| async move {
            let mut st = st?;
            let (payloads, done) = st.next_payloads().await;
            Some((stream::iter(payloads), (!done).then_some(st)))
        })
        .flatten();
        let body = stream::iter(opening).chain(rest).map(Ok::<_, Infallible>);
        sse(body)
    }

    fn chat_chunk(
        &self,
        index: u32,
        delta: ChatDelta,
        logprobs: Option<ChatLogprobs>,
        finish: Option<&'static str>,
    ) -> String {
        to_json(&ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChatChunkChoice {
                index,
                delta,
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
        })
    }

    fn completion_chunk(
        &self,
        index: u32,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
    ) -> String {
        to_json(&CompletionResponse {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices: vec![CompletionChoice {
                index,
                text,
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
        })
    }

    /// The chunks for one update of choice `index`; `finish` closes the choice.
    fn update_chunks(
        &self,
        index: u32,
        update: Update,
        finish: Option<&'static str>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        match self.shape.endpoint {
            Endpoint::Chat => {
                let mut lp = match update.logprobs {
                    Some(Formatted::Chat(c)) => Some(c),
                    _ => None,
                };
                // The thinking comes before the answer; the logprobs ride on the first chunk.
                if !update.reasoning.is_empty() {
                    let delta = ChatDelta {
                        reasoning_content: Some(update.reasoning.clone()),
                        reasoning: Some(update.reasoning),
                        ..Default::default()
                    };
                    out.push(self.chat_chunk(index, delta, lp.take(), None));
                }
                if !update.content.is_empty() || lp.is_some() {
                    let delta = ChatDelta {
                        content: Some(update.content),
                        ..Default::default()
                    };
                    out.push(self.chat_chunk(index, delta, lp, None));
                }
                for (k, call) in (update.first_call..).zip(update.calls) {
                    // Opening delta (id, type, name), then the arguments.
                    let head = ToolCallDelta {
                        index: k,
                        id: Some(call.id),
                        kind: Some("function"),
                        function: FunctionDelta {
                            name: Some(call.function.name),
                            arguments: String::new(),
                        },
                    };
                    let args = ToolCallDelta {
                        index: k,
                        id: None,
                        kind: None,
                        function: FunctionDelta {
                            name: None,
                            arguments: call.function.arguments,
                        },
                    };
                    for d in [head, args] {
                        let delta = ChatDelta {
                            tool_calls: Some(vec![d]),
                            ..Default::default()
                        };
                        out.push(self.chat_chunk(index, delta, None, None));
                    }
                }
                if finish.is_some() {
                    out.push(self.chat_chunk(index, ChatDelta::default(), None, finish));
                }
            }
            Endpoint::Completion => {
                let lp = match update.logprobs {
                    Some(Formatted::Completion(c)) => Some(c),
                    _ => None,
                };
                if !update.content.is_empty() || lp.is_some() || finish.is_some() {
                    out.push(self.completion_chunk(index, update.content, lp, finish));
                }
            }
        }
        out
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

type Merged = stream::SelectAll<stream::BoxStream<'static, (usize, Step)>>;

/// A streamed response in progress.
struct StreamState {
    run: Run,
    outs: Vec<ChoiceOut>,
    remaining: usize,
    merged: Merged,
}

impl StreamState {
    /// The SSE payloads for the next event of any choice; `true` when the stream is over.
    async fn next_payloads(&mut self) -> (Vec<String>, bool) {
        loop {
            let Some((i, step)) = self.merged.next().await else {
                let e = ApiError::internal("The engine stopped before the request finished.");
                self.run.log.failed(&e);
                return (vec![e.body_json(), "[DONE]".to_string()], true);
            };
            let out = &mut self.outs[i];
            match step {
                Step::Tokens {
                    ids,
                    text,
                    logprobs,
                } => {
                    self.run.log.on_tokens(ids.len());
                    let update = out.on_tokens(&text, logprobs);
                    // A character still incomplete, or text held back: nothing to send yet.
                    if update.is_empty() {
                        continue;
                    }
                    return (self.run.update_chunks(out.index, update, None), false);
                }
                Step::Finished(reason, usage) => {
                    let update = out.on_finished(reason, usage);
                    let finish = out.finish_reason();
                    let mut payloads = self.run.update_chunks(out.index, update, finish);
                    self.remaining -= 1;
                    if self.remaining > 0 {
                        return (payloads, false);
                    }
                    let usage = total_usage(&self.outs);
                    self.run.log.finished(&self.outs, &usage);
                    if self.run.shape.include_usage {
                        payloads.push(self.run.usage_chunk(&usage));
                    }
                    payloads.push("[DONE]".to_string());
                    return (payloads, true);
                }
                Step::Failed(e) => {
                    self.run.log.failed(&e);
                    return (vec![e.body_json(), "[DONE]".to_string()], true);
                }
            }
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
    choices: usize,
    started: Instant,
    first_token: Option<Instant>,
    completion_tokens: usize,
    done: bool,
}

impl RequestLog {
    fn new(
        request_id: String,
        shape: &ResponseShape,
        prompt_tokens: usize,
        choices: usize,
    ) -> Self {
        Self {
            request_id,
            endpoint: shape.endpoint,
            user: shape.user.clone(),
            prompt_tokens,
            choices,
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

    /// Milliseconds to the first token, `-` when no token came.
    fn ttft_ms(&self) -> String {
        self.first_token.map_or_else(
            || "-".to_string(),
            |t| format!("{:.1}", (t - self.started).as_secs_f64() * 1e3),
        )
    }

    fn finished(&mut self, outs: &[ChoiceOut], usage: &Usage) {
        self.done = true;
        let latency = self.started.elapsed().as_secs_f64();
        let finish: Vec<&str> = outs.iter().filter_map(ChoiceOut::finish_reason).collect();
        tracing::info!(
            target: "wring::request",
            id = %self.request_id,
            endpoint = self.endpoint.name(),
            user = self.user.as_deref().unwrap_or("-"),
            choices = self.choices,
            prompt_tokens = usage.prompt_tokens,
            cached_tokens = usage.cached_tokens,
            completion_tokens = usage.completion_tokens,
            draft_tokens = usage.draft_tokens,
            accepted_tokens = usage.accepted_tokens,
            finish = finish.join(","),
            ttft_ms = %self.ttft_ms(),
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
