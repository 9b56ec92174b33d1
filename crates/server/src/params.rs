//! Turning an OpenAI request body into an engine request: range checks with the
//! parameter named in the error, defaults, and the parts OpenAI has that we do not
//! (rejected clearly instead of silently ignored).

use serde_json::Value;
use wring_engine::api::{
    GenerateRequest, GrammarMatcher, GrammarStart, SamplingParams, SpecOverrides,
};

use crate::body::json_kind;
use crate::error::ApiError;
use crate::messages::chat_messages;
use crate::prompts::prompt_inputs;
pub use crate::prompts::PromptInput;
use crate::protocol::{ChatCompletionRequest, CompletionRequest, StreamOptions};
use crate::structured::{self, Constraint, StructuredFields};
use crate::tools::{tool_plan, ToolPlan};

/// Most stop strings one request may carry (OpenAI allows 4; we are more lenient).
pub const MAX_STOP_STRINGS: usize = 16;
/// Most choices (`n` times the number of prompts) one request may ask for.
pub const MAX_CHOICES: usize = 64;
/// Most top logprobs per token.
pub const MAX_TOP_LOGPROBS: i64 = 20;

/// How logprobs are shaped in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogprobsFormat {
    Chat,
    Completion,
}

/// Everything about a request except its prompt tokens, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub model: Option<String>,
    pub sampling: SamplingParams,
    /// None = the server's default (`Limits::max_tokens_default`), capped by the context.
    pub max_tokens: Option<u32>,
    /// Used when `max_tokens` is None; 0 = as many as fit in the context.
    pub default_max_tokens: u32,
    /// Independent samples per prompt (`n`).
    pub n: u32,
    /// Completions: the prompt text goes in front of each choice's text.
    pub echo: bool,
    /// Structured output as the request states it (a forced tool call's grammar
    /// too); compiled by the route into `grammar`.
    pub constraint: Option<Constraint>,
    /// The compiled constraint at the start of the output (cloned per choice).
    pub grammar: Option<GrammarMatcher>,
    /// Where the grammar starts to bind (after a reasoning model's thinking).
    pub grammar_start: GrammarStart,
    pub stop_strings: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: Option<LogprobsFormat>,
    pub spec: SpecOverrides,
    pub user: Option<String>,
    /// The recorded output to emit (`replay_output`, benchmark mode); the route turns
    /// text into ids before the plan becomes engine requests.
    pub replay_output: Option<ReplayOutput>,
    /// The client's `X-Request-Id`: the engine request's name (logs, `--trace-out`).
    pub trace_id: Option<String>,
}

/// `replay_output` as sent: the recorded output's text, or its token ids.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayOutput {
    Text(String),
    Ids(Vec<u32>),
}

impl Plan {
    /// The engine request for `prompt_ids`, after the context-length check.
    pub fn into_request(
        self,
        request_id: String,
        prompt_ids: Vec<u32>,
        max_model_len: usize,
        prompt_param: &str,
    ) -> Result<GenerateRequest, ApiError> {
        if prompt_ids.is_empty() {
            return Err(ApiError::invalid_param(
                prompt_param,
                "The prompt is empty.",
            ));
        }
        let room = max_model_len.saturating_sub(prompt_ids.len());
        let max_tokens = match self.max_tokens {
            Some(m) if m as usize > room => {
                return Err(context_exceeded(
                    max_model_len,
                    prompt_ids.len(),
                    m as usize,
                    prompt_param,
                ))
            }
            Some(m) => m,
            None if room == 0 => {
                return Err(context_exceeded(
                    max_model_len,
                    prompt_ids.len(),
                    1,
                    prompt_param,
                ))
            }
            None if self.default_max_tokens > 0 => {
                room.min(self.default_max_tokens as usize) as u32
            }
            None => room as u32,
        };
        Ok(GenerateRequest {
            request_id,
            prompt_ids,
            sampling: self.sampling,
            max_tokens,
            stop_token_ids: self.stop_token_ids,
            stop_strings: self.stop_strings,
            ignore_eos: self.ignore_eos,
            spec: self.spec,
            grammar: self.grammar,
            grammar_start: self.grammar_start,
            replay_output: match self.replay_output {
                Some(ReplayOutput::Ids(ids)) => Some(ids),
                Some(ReplayOutput::Text(_)) => {
                    return Err(ApiError::internal("replay_output text was not tokenized"))
                }
                None => None,
            },
        })
    }
}

pub fn context_exceeded(max_len: usize, prompt: usize, completion: usize, param: &str) -> ApiError {
    ApiError::invalid_param(
        param,
        format!(
            "This model's maximum context length is {max_len} tokens. However, you requested {} tokens \
             ({prompt} in the prompt, {completion} for the completion). Please reduce the prompt or max_tokens.",
            prompt + completion
        ),
    )
    .with_code("context_length_exceeded")
}

/// The fields chat and completions share, gathered before checking.
struct Common<'a> {
    model: Option<String>,
    max_tokens: Option<(i64, &'static str)>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    n: Option<i64>,
    stream: Option<bool>,
    stream_options: Option<&'a StreamOptions>,
    stop: Option<&'a Value>,
    seed: Option<i64>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    repetition_penalty: Option<f32>,
    dry: DryFields<'a>,
    logit_bias: Option<&'a Value>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    stop_token_ids: Option<&'a Vec<u32>>,
    skip_special_tokens: Option<bool>,
    structured: StructuredFields<'a>,
    workload: Option<String>,
    k_policy: Option<String>,
    user: Option<String>,
    replay_output: Option<&'a Value>,
}

/// llama.cpp's DRY fields as sent (all optional; no DRY unless `dry_multiplier` > 0).
struct DryFields<'a> {
    multiplier: Option<f32>,
    base: Option<f32>,
    allowed_length: Option<i64>,
    penalty_last_n: Option<i64>,
    sequence_breakers: Option<&'a Vec<String>>,
}

/// The DRY settings of a request; for fields left out, the server's multiplier
/// (`Limits::dry_multiplier_default`: 0 = off unless the model needs it) and the engine's
/// defaults for the rest (llama.cpp's, the same `wring chat` uses).
fn dry_params(d: DryFields<'_>, default_multiplier: f32) -> Result<SamplingParams, ApiError> {
    let def = SamplingParams::default();
    let multiplier = d.multiplier.unwrap_or(default_multiplier);
    if !(multiplier >= 0.0 && multiplier.is_finite()) {
        return Err(ApiError::invalid_param(
            "dry_multiplier",
            format!("`dry_multiplier` must be at least 0 (0 = off); got {multiplier}."),
        ));
    }
    let base = d.base.unwrap_or(def.dry_base);
    if !(base >= 1.0 && base.is_finite()) {
        return Err(ApiError::invalid_param(
            "dry_base",
            format!("`dry_base` must be at least 1; got {base}."),
        ));
    }
    let allowed = match d.allowed_length {
        None => def.dry_allowed_length,
        Some(n) if n >= 1 => u32::try_from(n).unwrap_or(u32::MAX),
        Some(n) => {
            return Err(ApiError::invalid_param(
                "dry_allowed_length",
                format!("`dry_allowed_length` must be at least 1; got {n}."),
            ))
        }
    };
    let last_n = match d.penalty_last_n {
        None => def.dry_penalty_last_n,
        Some(n) if n >= -1 => i32::try_from(n).unwrap_or(i32::MAX),
        Some(n) => {
            return Err(ApiError::invalid_param(
                "dry_penalty_last_n",
                format!(
                    "`dry_penalty_last_n` must be -1 (the whole context), 0 (off) or positive; got {n}."
                ),
            ))
        }
    };
    let p = SamplingParams {
        dry_multiplier: multiplier,
        dry_base: base,
        dry_allowed_length: allowed,
        dry_penalty_last_n: last_n,
        dry_sequence_breakers: d.sequence_breakers.cloned(),
        ..def
    };
    // The engine's own check covers the breaker list (count, empty or overlong strings).
    wring_engine::sampling::validate_sampling(&p)
        .map_err(|e| ApiError::invalid_param("dry_sequence_breakers", format!("{e}.")))?;
    Ok(p)
}

/// What the server knows that validation needs.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub vocab_size: usize,
    /// `max_tokens` when a chat request sends none (0 = the rest of the context).
    pub max_tokens_default: u32,
    /// The model's own sampling settings (generation config, else a known model's card): fill
    /// sampling fields a request leaves out (as vLLM does with the generation config); without
    /// them OpenAI's defaults apply (temperature 1, top_p 1).
    pub generation: wring_model::GenerationDefaults,
    /// Requests may carry `replay_output` (`wring serve --replay-outputs`).
    pub replay_outputs: bool,
    /// `dry_multiplier` of a chat request that sends none (0 = no loop penalty, OpenAI's
    /// semantics; `wring serve` sets it for models measured to loop without it). Legacy
    /// completions always default to 0.
    pub dry_multiplier_default: f32,
}

/// A validated chat request: the plan, the messages for the template and the tools.
#[derive(Debug, Clone)]
pub struct ChatInput {
    pub messages: Vec<Value>,
    pub tools: ToolPlan,
    /// The request's `chat_template_kwargs` (checked; the server's defaults go under them
    /// when the prompt is rendered).
    pub template_kwargs: serde_json::Map<String, Value>,
    /// vLLM's `reasoning_effort` (one of `reasoning::REASONING_EFFORTS`).
    pub reasoning_effort: Option<String>,
    /// vLLM's `include_reasoning`: false leaves the reasoning out of the response.
    pub include_reasoning: bool,
}

/// A request's `chat_template_kwargs` (chat completions, `/tokenize`), checked: an object of
/// template variables, none of those the server sets itself.
pub(crate) fn template_kwargs(
    v: Option<&Value>,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let kwargs = match v {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(other) => {
            return Err(ApiError::invalid_param(
                "chat_template_kwargs",
                format!(
                    "`chat_template_kwargs` must be an object of template variables; got {}.",
                    json_kind(other)
                ),
            ))
        }
    };
    crate::reasoning::check_template_kwargs(&kwargs, "chat_template_kwargs")
        .map_err(|(param, msg)| ApiError::invalid_param(param, msg))?;
    Ok(kwargs)
}

/// `chat_template_kwargs`, `reasoning_effort` and `include_reasoning`, checked.
fn template_fields(
    req: &ChatCompletionRequest,
) -> Result<(serde_json::Map<String, Value>, Option<String>), ApiError> {
    let kwargs = template_kwargs(req.chat_template_kwargs.as_ref())?;
    let efforts = crate::reasoning::REASONING_EFFORTS;
    let effort = match &req.reasoning_effort {
        None | Some(Value::Null) => None,
        Some(Value::String(e)) if efforts.contains(&e.as_str()) => Some(e.clone()),
        Some(other) => {
            return Err(ApiError::invalid_param(
                "reasoning_effort",
                format!(
                    "`reasoning_effort` must be one of {}; got {other}.",
                    efforts.join(", ")
                ),
            ))
        }
    };
    Ok((kwargs, effort))
}

pub fn chat_plan(
    req: &ChatCompletionRequest,
    workload_header: Option<String>,
    limits: Limits,
) -> Result<(Plan, ChatInput), ApiError> {
    let max_tokens = match (req.max_completion_tokens, req.max_tokens) {
        (Some(m), _) => Some((m, "max_completion_tokens")),
        (None, Some(m)) => Some((m, "max_tokens")),
        (None, None) => None,
    };
    reject_unless_neutral("functions", req.functions.as_ref(), |_| false)?;
    reject_unless_neutral("function_call", req.function_call.as_ref(), |_| false)?;
    if req.top_logprobs.is_some() && req.logprobs != Some(true) {
        return Err(ApiError::invalid_param(
            "top_logprobs",
            "`top_logprobs` requires `logprobs` to be true.",
        ));
    }
    let logprobs = match (req.logprobs, req.top_logprobs) {
        (Some(true), top) => Some(check_top_logprobs("top_logprobs", top.unwrap_or(0))?),
        _ => None,
    };
    let tools = tool_plan(req.tools.as_ref(), req.tool_choice.as_ref())?;
    let common = Common {
        model: req.model.clone(),
        max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        min_p: req.min_p,
        n: req.n,
        stream: req.stream,
        stream_options: req.stream_options.as_ref(),
        stop: req.stop.as_ref(),
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        repetition_penalty: req.repetition_penalty,
        dry: DryFields {
            multiplier: req.dry_multiplier,
            base: req.dry_base,
            allowed_length: req.dry_allowed_length,
            penalty_last_n: req.dry_penalty_last_n,
            sequence_breakers: req.dry_sequence_breakers.as_ref(),
        },
        logit_bias: req.logit_bias.as_ref(),
        min_tokens: req.min_tokens,
        ignore_eos: req.ignore_eos,
        stop_token_ids: req.stop_token_ids.as_ref(),
        skip_special_tokens: req.skip_special_tokens,
        structured: StructuredFields {
            response_format: req.response_format.as_ref(),
            guided_json: req.guided_json.as_ref(),
            guided_regex: req.guided_regex.as_ref(),
            guided_choice: req.guided_choice.as_ref(),
            guided_grammar: req.guided_grammar.as_ref(),
            structured_outputs: req.structured_outputs.as_ref(),
        },
        workload: req.workload.clone().or(workload_header),
        k_policy: req.k_policy.clone(),
        replay_output: req.replay_output.as_ref(),
        user: req.user.clone(),
    };
    let mut plan = common_plan(common, limits, 1)?;
    if let Some(top) = logprobs {
        plan.sampling.logprobs = Some(top);
        plan.logprobs = Some(LogprobsFormat::Chat);
    }
    let forced_call = tools.parses_calls() && tools.choice != crate::tools::ToolChoice::Auto;
    if plan.constraint.is_some() && forced_call {
        return Err(ApiError::invalid_param(
            "tool_choice",
            "A forced tool call (`required` or a named function) cannot be combined with `response_format` or guided decoding.",
        ));
    }
    // The server's loop penalty is for free text. A grammar already fixes a constrained
    // answer's shape (a schema, a forced tool call), DRY would penalise the repeats JSON is
    // made of, and it keeps greedy rows off the masked argmax (the rows' logits must come
    // back to the host for it).
    if (plan.constraint.is_some() || forced_call) && req.dry_multiplier.is_none() {
        plan.sampling.dry_multiplier = 0.0;
    }
    let messages = chat_messages(&req.messages)?;
    let (template_kwargs, reasoning_effort) = template_fields(req)?;
    Ok((
        plan,
        ChatInput {
            messages,
            tools,
            template_kwargs,
            reasoning_effort,
            include_reasoning: req.include_reasoning.unwrap_or(true),
        },
    ))
}

pub fn completion_plan(
    req: &CompletionRequest,
    workload_header: Option<String>,
    limits: Limits,
) -> Result<(Plan, Vec<PromptInput>), ApiError> {
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param(
            "suffix",
            "`suffix` is not supported by this server.",
        ));
    }
    if let Some(b) = req.best_of {
        if b != 1 && Some(b) != req.n {
            return Err(ApiError::invalid_param(
                "best_of",
                format!("Only best_of equal to n is supported (no ranking of extra samples); got best_of={b}."),
            ));
        }
    }
    let echo = req.echo == Some(true);
    if echo && req.logprobs.is_some() {
        return Err(ApiError::invalid_param(
            "echo",
            "`echo` with `logprobs` would need the prompt's logprobs, which this server does not compute; send one of them.",
        ));
    }
    let prompts = prompt_inputs(req.prompt.as_ref(), limits.vocab_size)?;
    let common = Common {
        model: req.model.clone(),
        // Legacy completions default to 16 tokens (OpenAI and vLLM agree).
        max_tokens: Some((req.max_tokens.unwrap_or(16), "max_tokens")),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        min_p: req.min_p,
        n: req.n,
        stream: req.stream,
        stream_options: req.stream_options.as_ref(),
        stop: req.stop.as_ref(),
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        repetition_penalty: req.repetition_penalty,
        dry: DryFields {
            multiplier: req.dry_multiplier,
            base: req.dry_base,
            allowed_length: req.dry_allowed_length,
            penalty_last_n: req.dry_penalty_last_n,
            sequence_breakers: req.dry_sequence_breakers.as_ref(),
        },
        logit_bias: req.logit_bias.as_ref(),
        min_tokens: req.min_tokens,
        ignore_eos: req.ignore_eos,
        stop_token_ids: req.stop_token_ids.as_ref(),
        skip_special_tokens: req.skip_special_tokens,
        structured: StructuredFields {
            response_format: req.response_format.as_ref(),
            guided_json: req.guided_json.as_ref(),
            guided_regex: req.guided_regex.as_ref(),
            guided_choice: req.guided_choice.as_ref(),
            guided_grammar: req.guided_grammar.as_ref(),
            structured_outputs: req.structured_outputs.as_ref(),
        },
        workload: req.workload.clone().or(workload_header),
        k_policy: req.k_policy.clone(),
        replay_output: req.replay_output.as_ref(),
        user: req.user.clone(),
    };
    // The loop penalty default is the chat command's, for chat: a legacy completion
    // continues text as plain `wring generate --raw` does.
    let limits = Limits {
        dry_multiplier_default: 0.0,
        ..limits
    };
    let mut plan = common_plan(common, limits, prompts.len())?;
    plan.echo = echo;
    if let Some(k) = req.logprobs {
        plan.sampling.logprobs = Some(check_top_logprobs("logprobs", k)?);
        plan.logprobs = Some(LogprobsFormat::Completion);
    }
    Ok((plan, prompts))
}

fn common_plan(c: Common<'_>, limits: Limits, num_prompts: usize) -> Result<Plan, ApiError> {
    let n = match c.n {
        None => 1,
        Some(n) if n < 1 => {
            return Err(ApiError::invalid_param(
                "n",
                format!("`n` must be at least 1; got {n}."),
            ))
        }
        Some(n) if n as usize * num_prompts > MAX_CHOICES => {
            return Err(ApiError::invalid_param(
                "n",
                format!(
                    "At most {MAX_CHOICES} choices per request (n times the number of prompts); got {}.",
                    n as usize * num_prompts
                ),
            ))
        }
        Some(n) => n as u32,
    };
    let max_tokens = match c.max_tokens {
        Some((m, param)) if m <= 0 => {
            return Err(ApiError::invalid_param(
                param,
                format!("`{param}` must be at least 1; got {m}."),
            ))
        }
        Some((m, param)) => Some(u32::try_from(m).map_err(|_| {
            ApiError::invalid_param(param, format!("`{param}` is too large: {m}."))
        })?),
        None => None,
    };
    let stream = c.stream.unwrap_or(false);
    if c.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true.",
        ));
    }
    let include_usage = c
        .stream_options
        .is_some_and(|o| o.include_usage == Some(true) || o.continuous_usage_stats == Some(true));
    let logit_bias = logit_bias(c.logit_bias, limits.vocab_size)?;
    let min_tokens = match c.min_tokens {
        None => 0,
        Some(m) if m < 0 => {
            return Err(ApiError::invalid_param(
                "min_tokens",
                format!("`min_tokens` must be at least 0; got {m}."),
            ))
        }
        Some(m) => u32::try_from(m).unwrap_or(u32::MAX),
    };
    if let Some(max) = max_tokens.filter(|&max| min_tokens > max) {
        return Err(ApiError::invalid_param(
            "min_tokens",
            format!("`min_tokens` ({min_tokens}) must not exceed `max_tokens` ({max})."),
        ));
    }

    let defaults = SamplingParams::default();
    let g = limits.generation;
    let temperature = check_range("temperature", c.temperature, 0.0, 2.0)?
        .or(g.temperature)
        .unwrap_or(1.0);
    let top_p = c.top_p.or(g.top_p).unwrap_or(defaults.top_p);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid_param(
            "top_p",
            format!("`top_p` must be in (0, 1]; got {top_p}."),
        ));
    }
    let top_k = match c.top_k {
        None => g.top_k.unwrap_or(0),
        Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => u32::try_from(k).unwrap_or(u32::MAX),
        Some(k) => {
            return Err(ApiError::invalid_param(
                "top_k",
                format!("`top_k` must be -1 (disabled) or at least 1; got {k}."),
            ))
        }
    };
    let min_p = check_range("min_p", c.min_p, 0.0, 1.0)?
        .or(g.min_p)
        .unwrap_or(defaults.min_p);
    let presence_penalty =
        check_range("presence_penalty", c.presence_penalty, -2.0, 2.0)?.unwrap_or(0.0);
    let frequency_penalty =
        check_range("frequency_penalty", c.frequency_penalty, -2.0, 2.0)?.unwrap_or(0.0);
    let repetition_penalty = c.repetition_penalty.unwrap_or(1.0);
    if !(repetition_penalty > 0.0 && repetition_penalty.is_finite()) {
        return Err(ApiError::invalid_param(
            "repetition_penalty",
            format!("`repetition_penalty` must be positive; got {repetition_penalty}."),
        ));
    }
    if c.skip_special_tokens == Some(false) {
        // The engine's detokeniser always drops special tokens from the text.
        return Err(ApiError::invalid_param(
            "skip_special_tokens",
            "`skip_special_tokens: false` is not supported by this server.",
        ));
    }
    let stop_token_ids = c.stop_token_ids.cloned().unwrap_or_default();
    if let Some(bad) = stop_token_ids
        .iter()
        .find(|&&t| t as usize >= limits.vocab_size)
    {
        return Err(ApiError::invalid_param(
            "stop_token_ids",
            format!(
                "Token id {bad} is outside the vocabulary (size {}).",
                limits.vocab_size
            ),
        ));
    }
    let dry = dry_params(c.dry, limits.dry_multiplier_default)?;
    let constraint = structured::parse(c.structured)?;
    let replay_output = replay_output(c.replay_output, &limits)?;
    if replay_output.is_some() && constraint.is_some() {
        return Err(ApiError::invalid_param(
            "replay_output",
            "`replay_output` cannot be combined with structured output.",
        ));
    }
    Ok(Plan {
        model: c.model,
        sampling: SamplingParams {
            temperature,
            top_p,
            top_k,
            min_p,
            seed: c.seed.map(|s| s as u64),
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
            logprobs: None,
            logit_bias,
            min_tokens,
            ..dry
        },
        max_tokens,
        default_max_tokens: limits.max_tokens_default,
        n,
        echo: false,
        constraint,
        grammar: None,
        grammar_start: GrammarStart::First,
        stop_strings: stop_strings(c.stop)?,
        stop_token_ids,
        ignore_eos: c.ignore_eos.unwrap_or(false),
        stream,
        include_usage,
        logprobs: None,
        spec: SpecOverrides {
            k_policy: c.k_policy,
            workload: c.workload,
        },
        user: c.user,
        replay_output,
        trace_id: None,
    })
}

/// `replay_output`: a non-empty string or array of token ids, on a server started with
/// `--replay-outputs` only (a benchmark mode: the output is scripted, not the model's).
fn replay_output(v: Option<&Value>, limits: &Limits) -> Result<Option<ReplayOutput>, ApiError> {
    let bad = |msg: String| ApiError::invalid_param("replay_output", msg);
    let v = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    if !limits.replay_outputs {
        return Err(bad(
            "`replay_output` is a benchmark mode this server was not started with (`wring serve --replay-outputs`).".into(),
        ));
    }
    let out = match v {
        Value::String(s) if !s.is_empty() => ReplayOutput::Text(s.clone()),
        Value::Array(items) if !items.is_empty() => ReplayOutput::Ids(
            items
                .iter()
                .map(|t| {
                    t.as_u64()
                        .filter(|&t| (t as usize) < limits.vocab_size)
                        .map(|t| t as u32)
                        .ok_or_else(|| {
                            bad(format!(
                                "`replay_output` token ids must be integers below the vocabulary size {}; got {t}.",
                                limits.vocab_size
                            ))
                        })
                })
                .collect::<Result<_, _>>()?,
        ),
        other => {
            return Err(bad(format!(
                "`replay_output` must be a non-empty string or array of token ids; got {}.",
                json_kind(other)
            )))
        }
    };
    Ok(Some(out))
}

/// `logit_bias`: `{"<token id>": bias}` with biases in [-100, 100].
fn logit_bias(v: Option<&Value>, vocab_size: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |msg: String| ApiError::invalid_param("logit_bias", msg);
    let map = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(bad(format!(
                "`logit_bias` must map token ids to biases; got {}.",
                json_kind(other)
            )))
        }
    };
    let mut out: Vec<(u32, f32)> = map
        .iter()
        .map(|(k, v)| {
            let id: u32 = k
                .trim()
                .parse()
                .map_err(|_| bad(format!("`logit_bias` keys must be token ids; got {k:?}.")))?;
            if id as usize >= vocab_size {
                return Err(bad(format!(
                    "Token id {id} in `logit_bias` is outside the vocabulary (size {vocab_size})."
                )));
            }
            let b = v
                .as_f64()
                .filter(|b| (-100.0..=100.0).contains(b))
                .ok_or_else(|| {
                    bad(format!(
                        "The bias for token {id} must be a number between -100 and 100; got {v}."
                    ))
                })?;
            Ok((id, b as f32))
        })
        .collect::<Result<_, _>>()?;
    out.sort_by_key(|(t, _)| *t);
    Ok(out)
}

fn check_range(param: &str, v: Option<f32>, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be between {lo} and {hi}; got {x}."),
        )),
        other => Ok(other),
    }
}

fn check_top_logprobs(param: &str, k: i64) -> Result<u32, ApiError> {
    if !(0..=MAX_TOP_LOGPROBS).contains(&k) {
        return Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be between 0 and {MAX_TOP_LOGPROBS}; got {k}."),
        ));
    }
    Ok(k as u32)
}

/// OpenAI features we do not implement are accepted only in their "off" form.
fn reject_unless_neutral(
    param: &str,
    v: Option<&Value>,
    neutral: impl Fn(&Value) -> bool,
) -> Result<(), ApiError> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(v) if neutral(v) => Ok(()),
        Some(_) => Err(ApiError::invalid_param(
            param,
            format!("`{param}` is not supported by this server."),
        )),
    }
}

fn stop_strings(stop: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let list = match stop {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(ApiError::invalid_param(
                    "stop",
                    format!(
                        "`stop` must be a string or an array of strings; found {} in the array.",
                        json_kind(other)
                    ),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "stop",
                format!(
                    "`stop` must be a string or an array of strings; got {}.",
                    json_kind(other)
                ),
            ))
        }
    };
    if list.len() > MAX_STOP_STRINGS {
        return Err(ApiError::invalid_param(
            "stop",
            format!(
                "At most {MAX_STOP_STRINGS} stop strings are allowed; got {}.",
                list.len()
            ),
        ));
    }
    if list.iter().any(String::is_empty) {
        return Err(ApiError::invalid_param(
            "stop",
            "Stop strings must not be empty.",
        ));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::parse_json_object;

    const LIMITS: Limits = Limits {
        vocab_size: 1000,
        max_tokens_default: 0,
        replay_outputs: false,
        generation: wring_model::GenerationDefaults {
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
        },
        dry_multiplier_default: 0.0,
    };

    fn chat(body: serde_json::Value) -> Result<(Plan, ChatInput), ApiError> {
        let req: ChatCompletionRequest =
            parse_json_object(body.to_string().as_bytes(), ChatCompletionRequest::FIELDS)?;
        chat_plan(&req, None, LIMITS)
    }

    fn completion(body: serde_json::Value) -> Result<(Plan, Vec<PromptInput>), ApiError> {
        let req: CompletionRequest =
            parse_json_object(body.to_string().as_bytes(), CompletionRequest::FIELDS)?;
        completion_plan(&req, Some("hdr".into()), LIMITS)
    }

    #[test]
    fn chat_defaults_and_fields() {
        let (plan, msgs) = chat(serde_json::json!({
            "model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                        {"role": "user", "content": "hi"}],
            "temperature": 0, "seed": 7, "stop": "x", "max_completion_tokens": 5, "max_tokens": 9,
            "logprobs": true, "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
            "top_k": -1, "workload": "code"
        }))
        .unwrap();
        assert_eq!(
            msgs.messages,
            vec![
                serde_json::json!({"role": "system", "content": "a\nb"}),
                serde_json::json!({"role": "user", "content": "hi"})
            ]
        );
        assert!(!msgs.tools.parses_calls());
        assert_eq!(plan.n, 1);
        assert_eq!(plan.max_tokens, Some(5));
        assert_eq!(plan.sampling.temperature, 0.0);
        assert_eq!(plan.sampling.seed, Some(7));
        assert_eq!(plan.sampling.logprobs, Some(3));
        assert_eq!(plan.sampling.top_k, 0);
        assert_eq!(plan.stop_strings, vec!["x".to_string()]);
        assert!(plan.stream && plan.include_usage);
        assert_eq!(plan.spec.workload.as_deref(), Some("code"));
        assert_eq!(plan.logprobs, Some(LogprobsFormat::Chat));
    }

    #[test]
    fn completion_defaults() {
        let (plan, prompt) =
            completion(serde_json::json!({"prompt": [[1, 2, 3]], "logprobs": 0})).unwrap();
        assert_eq!(prompt, vec![PromptInput::Ids(vec![1, 2, 3])]);
        assert_eq!(plan.max_tokens, Some(16));
        assert_eq!(plan.sampling.temperature, 1.0);
        assert_eq!(plan.sampling.logprobs, Some(0));
        assert_eq!(plan.spec.workload.as_deref(), Some("hdr"));
        let (_, prompt) = completion(serde_json::json!({"prompt": ["hello"]})).unwrap();
        assert_eq!(prompt, vec![PromptInput::Text("hello".into())]);
        let (plan, prompts) = completion(serde_json::json!({
            "prompt": ["a", "b"], "n": 3, "echo": true, "seed": 1,
            "logit_bias": {"5": -100, " 7": 2.5}, "min_tokens": 4, "ignore_eos": true, "stop_token_ids": [9]
        }))
        .unwrap();
        assert_eq!(prompts.len(), 2);
        assert_eq!((plan.n, plan.echo), (3, true));
        assert_eq!(plan.sampling.logit_bias, vec![(5, -100.0), (7, 2.5)]);
        assert_eq!(plan.sampling.min_tokens, 4);
        assert!(plan.ignore_eos);
        assert_eq!(plan.stop_token_ids, vec![9]);
    }

    #[test]
    fn dry_is_off_unless_asked_and_takes_llama_cpp_fields() {
        let m = serde_json::json!([{"role": "user", "content": "hi"}]);
        let (plan, _) = chat(serde_json::json!({"messages": m})).unwrap();
        assert_eq!(
            plan.sampling.dry_multiplier, 0.0,
            "OpenAI semantics: no DRY"
        );
        let (plan, _) = chat(serde_json::json!({
            "messages": m, "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3,
            "dry_penalty_last_n": 64, "dry_sequence_breakers": ["\n", "###"]
        }))
        .unwrap();
        let s = &plan.sampling;
        assert_eq!(
            (
                s.dry_multiplier,
                s.dry_base,
                s.dry_allowed_length,
                s.dry_penalty_last_n
            ),
            (0.8, 2.0, 3, 64)
        );
        assert_eq!(
            s.dry_sequence_breakers,
            Some(vec!["\n".to_string(), "###".to_string()])
        );
        let (plan, _) =
            completion(serde_json::json!({"prompt": "x", "dry_multiplier": 0.5})).unwrap();
        assert_eq!(
            (plan.sampling.dry_multiplier, plan.sampling.dry_base),
            (0.5, 1.75)
        );
        assert_eq!(plan.sampling.dry_allowed_length, 2);
        assert_eq!(plan.sampling.dry_penalty_last_n, -1);
    }

    #[test]
    fn the_servers_loop_penalty_default_fills_only_requests_that_send_none() {
        // What `wring serve` sets for the default model (the same DRY as `wring chat`).
        let limits = Limits {
            dry_multiplier_default: 0.8,
            ..LIMITS
        };
        let plan = |body: serde_json::Value| {
            let r: ChatCompletionRequest =
                parse_json_object(body.to_string().as_bytes(), ChatCompletionRequest::FIELDS)
                    .unwrap();
            chat_plan(&r, None, limits).unwrap().0.sampling
        };
        let m = serde_json::json!([{"role": "user", "content": "hi"}]);
        let s = plan(serde_json::json!({"messages": m}));
        assert_eq!(
            (
                s.dry_multiplier,
                s.dry_base,
                s.dry_allowed_length,
                s.dry_penalty_last_n
            ),
            (0.8, 1.75, 2, -1),
            "llama.cpp's DRY settings, as `wring chat` resolves them"
        );
        assert!(s.dry_enabled());
        let s = plan(serde_json::json!({"messages": m, "dry_multiplier": 0}));
        assert!(!s.dry_enabled(), "a request's 0 turns it off");
        let s = plan(serde_json::json!({"messages": m, "dry_multiplier": 1.5, "dry_base": 2}));
        assert_eq!((s.dry_multiplier, s.dry_base), (1.5, 2.0));
        // A grammar decides a constrained answer's shape: no default penalty, a sent one stays.
        let schema = serde_json::json!({"type": "json_schema",
            "json_schema": {"name": "p", "schema": {"type": "object"}}});
        let s = plan(serde_json::json!({"messages": m, "response_format": schema}));
        assert!(!s.dry_enabled(), "json_schema: no default loop penalty");
        let s = plan(serde_json::json!({"messages": m, "response_format": schema,
            "dry_multiplier": 0.5}));
        assert_eq!(
            s.dry_multiplier, 0.5,
            "a constrained request's own penalty stays"
        );
        let tool = serde_json::json!([{"type": "function", "function": {"name": "f",
            "parameters": {"type": "object"}}}]);
        let s = plan(serde_json::json!({"messages": m, "tools": tool, "tool_choice": "required"}));
        assert!(
            !s.dry_enabled(),
            "a forced tool call: no default loop penalty"
        );
        let s = plan(serde_json::json!({"messages": m, "tools": tool}));
        assert!(
            s.dry_enabled(),
            "tools the model may or may not call: free text first"
        );
        let r: CompletionRequest =
            parse_json_object(b"{\"prompt\": \"x\"}", CompletionRequest::FIELDS).unwrap();
        let (p, _) = completion_plan(&r, None, limits).unwrap();
        assert_eq!(
            p.sampling.dry_multiplier, 0.0,
            "legacy completions continue text as they always did"
        );
    }

    #[test]
    fn every_bad_parameter_is_named() {
        let m = serde_json::json!([{"role": "user", "content": "hi"}]);
        let chat_cases = [
            (serde_json::json!({"messages": m, "n": 0}), "n"),
            (serde_json::json!({"messages": m, "n": 65}), "n"),
            (
                serde_json::json!({"messages": m, "logit_bias": {"x": 1}}),
                "logit_bias",
            ),
            (
                serde_json::json!({"messages": m, "logit_bias": {"1": 101}}),
                "logit_bias",
            ),
            (
                serde_json::json!({"messages": m, "logit_bias": [1]}),
                "logit_bias",
            ),
            (
                serde_json::json!({"messages": m, "min_tokens": -1}),
                "min_tokens",
            ),
            (
                serde_json::json!({"messages": m, "min_tokens": 9, "max_tokens": 3}),
                "min_tokens",
            ),
            (
                serde_json::json!({"messages": m, "tool_choice": "auto"}),
                "tool_choice",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": null}]}),
                "messages[0].content",
            ),
            (
                serde_json::json!({"messages": m, "response_format": {"type": "yaml"}}),
                "response_format",
            ),
            (
                serde_json::json!({"messages": m, "max_tokens": 0}),
                "max_tokens",
            ),
            (
                serde_json::json!({"messages": m, "max_completion_tokens": -3}),
                "max_completion_tokens",
            ),
            (
                serde_json::json!({"messages": m, "temperature": 2.5}),
                "temperature",
            ),
            (serde_json::json!({"messages": m, "top_p": 0}), "top_p"),
            (serde_json::json!({"messages": m, "top_k": -5}), "top_k"),
            (serde_json::json!({"messages": m, "min_p": 1.5}), "min_p"),
            (
                serde_json::json!({"messages": m, "presence_penalty": 3}),
                "presence_penalty",
            ),
            (
                serde_json::json!({"messages": m, "frequency_penalty": -3}),
                "frequency_penalty",
            ),
            (
                serde_json::json!({"messages": m, "repetition_penalty": 0}),
                "repetition_penalty",
            ),
            (
                serde_json::json!({"messages": m, "dry_multiplier": -1}),
                "dry_multiplier",
            ),
            (
                serde_json::json!({"messages": m, "dry_base": 0.5}),
                "dry_base",
            ),
            (
                serde_json::json!({"messages": m, "dry_allowed_length": 0}),
                "dry_allowed_length",
            ),
            (
                serde_json::json!({"messages": m, "dry_penalty_last_n": -2}),
                "dry_penalty_last_n",
            ),
            (
                serde_json::json!({"messages": m, "dry_sequence_breakers": [""]}),
                "dry_sequence_breakers",
            ),
            (serde_json::json!({"messages": m, "stop": 5}), "stop"),
            (serde_json::json!({"messages": m, "stop": ["a", 1]}), "stop"),
            (serde_json::json!({"messages": m, "stop": [""]}), "stop"),
            (
                serde_json::json!({"messages": m, "stream_options": {"include_usage": true}}),
                "stream_options",
            ),
            (
                serde_json::json!({"messages": m, "top_logprobs": 2}),
                "top_logprobs",
            ),
            (
                serde_json::json!({"messages": m, "logprobs": true, "top_logprobs": 21}),
                "top_logprobs",
            ),
            (
                serde_json::json!({"messages": m, "tools": [{"type": "function"}]}),
                "tools[0].function",
            ),
            (
                serde_json::json!({"messages": m, "stop_token_ids": [1000]}),
                "stop_token_ids",
            ),
            (serde_json::json!({"messages": []}), "messages"),
            (
                serde_json::json!({"messages": [{"role": "wizard", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": 3}]}),
                "messages[0].content",
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                "messages[0].content",
            ),
            (
                serde_json::json!({"messages": m, "chat_template_kwargs": [1]}),
                "chat_template_kwargs",
            ),
            (
                serde_json::json!({"messages": m, "chat_template_kwargs": "enable_thinking=false"}),
                "chat_template_kwargs",
            ),
            (
                serde_json::json!({"messages": m, "chat_template_kwargs": {"enable_thinking": "false"}}),
                "chat_template_kwargs.enable_thinking",
            ),
            (
                serde_json::json!({"messages": m, "chat_template_kwargs": {"tools": []}}),
                "chat_template_kwargs.tools",
            ),
            (
                serde_json::json!({"messages": m, "reasoning_effort": "extreme"}),
                "reasoning_effort",
            ),
            (
                serde_json::json!({"messages": m, "reasoning_effort": 3}),
                "reasoning_effort",
            ),
        ];
        for (body, param) in chat_cases {
            let e = chat(body.clone()).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
        let completion_cases = [
            (
                serde_json::json!({"prompt": "x", "echo": true, "logprobs": 1}),
                "echo",
            ),
            (serde_json::json!({"prompt": "x", "best_of": 3}), "best_of"),
            (
                serde_json::json!({"prompt": "x", "logprobs": 30}),
                "logprobs",
            ),
            (
                serde_json::json!({"prompt": "x", "max_tokens": 0}),
                "max_tokens",
            ),
            (serde_json::json!({"prompt": "x", "suffix": "y"}), "suffix"),
            (serde_json::json!({}), "prompt"),
            (serde_json::json!({"prompt": []}), "prompt"),
            (serde_json::json!({"prompt": [1, -2]}), "prompt"),
            (serde_json::json!({"prompt": [5000]}), "prompt"),
            (serde_json::json!({"prompt": {"a": 1}}), "prompt"),
        ];
        for (body, param) in completion_cases {
            let e = completion(body.clone()).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn context_length_is_checked_and_max_tokens_defaults_to_the_rest() {
        let plan = chat(serde_json::json!({"messages": [{"role": "user", "content": "hi"}]}))
            .unwrap()
            .0;
        let req = plan
            .clone()
            .into_request("r".into(), vec![1; 10], 32, "messages")
            .unwrap();
        assert_eq!(req.max_tokens, 22);
        // The server's default caps a request that sends no max_tokens.
        let mut defaulted = plan.clone();
        defaulted.default_max_tokens = 8;
        let req = defaulted
            .into_request("r".into(), vec![1; 10], 32, "messages")
            .unwrap();
        assert_eq!(req.max_tokens, 8);
        let e = plan
            .clone()
            .into_request("r".into(), vec![1; 32], 32, "messages")
            .unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        let mut capped = plan;
        capped.max_tokens = Some(30);
        let e = capped
            .into_request("r".into(), vec![1; 10], 32, "messages")
            .unwrap_err();
        assert!(
            e.message
                .contains("10 in the prompt, 30 for the completion"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_models_own_defaults_fill_only_the_fields_a_request_leaves_out() {
        // SmolLM2's model card (temperature 0.2, top_p 0.9), as `wring serve` passes it.
        let limits = Limits {
            generation: wring_model::GenerationDefaults {
                temperature: Some(0.2),
                top_p: Some(0.9),
                ..LIMITS.generation
            },
            ..LIMITS
        };
        let req = |body: serde_json::Value| {
            let r: ChatCompletionRequest =
                parse_json_object(body.to_string().as_bytes(), ChatCompletionRequest::FIELDS)
                    .unwrap();
            chat_plan(&r, None, limits).unwrap().0.sampling
        };
        let msgs = serde_json::json!([{"role": "user", "content": "hi"}]);
        let s = req(serde_json::json!({"messages": msgs}));
        assert_eq!(
            (s.temperature, s.top_p, s.min_p, s.top_k),
            (0.2, 0.9, 0.0, 0)
        );
        let s = req(serde_json::json!({"messages": msgs, "temperature": 1.0}));
        assert_eq!((s.temperature, s.top_p), (1.0, 0.9));
        let s = req(serde_json::json!({"messages": msgs, "temperature": 0, "top_p": 1}));
        assert_eq!((s.temperature, s.top_p), (0.0, 1.0));
        // Without model defaults: OpenAI's.
        let (plan, _) = chat(serde_json::json!({"messages": msgs})).unwrap();
        assert_eq!((plan.sampling.temperature, plan.sampling.top_p), (1.0, 1.0));
    }

    #[test]
    fn replay_output_needs_the_server_flag_and_a_well_formed_value() {
        let chat = |extra: &str| {
            let body = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}]{extra}}}"#);
            let req: ChatCompletionRequest =
                parse_json_object(body.as_bytes(), ChatCompletionRequest::FIELDS).unwrap();
            req
        };
        let on = Limits {
            replay_outputs: true,
            ..LIMITS
        };
        let req = chat(r#","replay_output":[1,2,3]"#);
        let err = chat_plan(&req, None, LIMITS).unwrap_err();
        assert!(err.to_string().contains("--replay-outputs"), "{err}");
        let (plan, _) = chat_plan(&req, None, on).unwrap();
        assert_eq!(plan.replay_output, Some(ReplayOutput::Ids(vec![1, 2, 3])));
        let (plan, _) = chat_plan(&chat(r#","replay_output":"def f(): pass""#), None, on).unwrap();
        assert_eq!(
            plan.replay_output,
            Some(ReplayOutput::Text("def f(): pass".into()))
        );
        for bad in [
            r#"[]"#,
            r#""""#,
            r#"[1,-2]"#,
            r#"[5000]"#,
            r#"{"a":1}"#,
            r#"[1.5]"#,
        ] {
            let err =
                chat_plan(&chat(&format!(r#","replay_output":{bad}"#)), None, on).unwrap_err();
            assert!(err.to_string().contains("replay_output"), "{bad}: {err}");
        }
        let with_schema = chat(r#","replay_output":[1],"response_format":{"type":"json_object"}"#);
        assert!(chat_plan(&with_schema, None, on).is_err());
    }
}
