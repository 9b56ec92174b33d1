//! OpenAI wire types: request bodies as clients send them and the response
//! objects we return. Validation and conversion to engine requests live in
//! `params.rs`; this file is only shapes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `stream_options` (only allowed with `stream: true`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
    /// vLLM extension: usage on every chunk. Accepted, treated like `include_usage`.
    pub continuous_usage_stats: Option<bool>,
}

/// Fields shared by chat and legacy completions, in the order OpenAI documents them.
/// `stop`, `prompt` and message contents are kept as raw JSON so that
/// `params.rs` can explain exactly what shape was expected.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatCompletionRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessageIn>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub stop: Option<Value>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub user: Option<String>,
    // OpenAI fields we accept only in their neutral form (checked in params.rs).
    pub logit_bias: Option<Value>,
    pub response_format: Option<Value>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub functions: Option<Value>,
    pub function_call: Option<Value>,
    pub metadata: Option<Value>,
    pub store: Option<bool>,
    pub service_tier: Option<String>,
    // vLLM-style extensions (the `openai` client sends them via `extra_body`).
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    // llama.cpp server extensions: the DRY loop penalty.
    pub dry_multiplier: Option<f32>,
    pub dry_base: Option<f32>,
    pub dry_allowed_length: Option<i64>,
    pub dry_penalty_last_n: Option<i64>,
    pub dry_sequence_breakers: Option<Vec<String>>,
    pub ignore_eos: Option<bool>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub skip_special_tokens: Option<bool>,
    pub min_tokens: Option<i64>,
    pub guided_json: Option<Value>,
    pub guided_regex: Option<Value>,
    pub guided_choice: Option<Value>,
    pub guided_grammar: Option<Value>,
    pub structured_outputs: Option<Value>,
    // vLLM's chat-template and reasoning fields: variables for the chat template,
    // `reasoning_effort` (OpenAI's field; vLLM's shorthand for `enable_thinking`), and
    // whether the response carries the reasoning.
    pub chat_template_kwargs: Option<Value>,
    pub reasoning_effort: Option<Value>,
    pub include_reasoning: Option<bool>,
    // wring extensions: speculative-decoding controls.
    pub workload: Option<String>,
    pub k_policy: Option<String>,
    /// Benchmark mode (`wring serve --replay-outputs`): the output to emit, as text or ids.
    pub replay_output: Option<Value>,
}

impl ChatCompletionRequest {
    /// Every top-level key this request accepts (kept equal to the struct by a test).
    pub const FIELDS: &'static [&'static str] = &[
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stream_options",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "user",
        "logit_bias",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "metadata",
        "store",
        "service_tier",
        "top_k",
        "min_p",
        "repetition_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "ignore_eos",
        "stop_token_ids",
        "skip_special_tokens",
        "min_tokens",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
        "chat_template_kwargs",
        "reasoning_effort",
        "include_reasoning",
        "workload",
        "k_policy",
        "replay_output",
    ];
}

/// One message of `messages`. `content` is a string, an array of text parts, or
/// null (only for an assistant message with `tool_calls` or reasoning). `refusal` and
/// `function_call` are accepted as null so that a response message can be sent back, and
/// an assistant's `reasoning_content` / `reasoning` (a reasoning model's thinking, as a
/// response gives it) reach the template, which may write it back (Qwen3's does).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<Value>,
    pub name: Option<String>,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
    pub refusal: Option<Value>,
    pub function_call: Option<Value>,
    pub reasoning_content: Option<Value>,
    pub reasoning: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Option<Value>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub n: Option<i64>,
    pub best_of: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<i64>,
    pub echo: Option<bool>,
    pub stop: Option<Value>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub suffix: Option<String>,
    pub user: Option<String>,
    pub logit_bias: Option<Value>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    // llama.cpp server extensions: the DRY loop penalty.
    pub dry_multiplier: Option<f32>,
    pub dry_base: Option<f32>,
    pub dry_allowed_length: Option<i64>,
    pub dry_penalty_last_n: Option<i64>,
    pub dry_sequence_breakers: Option<Vec<String>>,
    pub ignore_eos: Option<bool>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub skip_special_tokens: Option<bool>,
    pub min_tokens: Option<i64>,
    pub response_format: Option<Value>,
    pub guided_json: Option<Value>,
    pub guided_regex: Option<Value>,
    pub guided_choice: Option<Value>,
    pub guided_grammar: Option<Value>,
    pub structured_outputs: Option<Value>,
    pub workload: Option<String>,
    pub k_policy: Option<String>,
    pub replay_output: Option<Value>,
}

impl CompletionRequest {
    pub const FIELDS: &'static [&'static str] = &[
        "model",
        "prompt",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "best_of",
        "stream",
        "stream_options",
        "logprobs",
        "echo",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "suffix",
        "user",
        "logit_bias",
        "top_k",
        "min_p",
        "repetition_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "ignore_eos",
        "stop_token_ids",
        "skip_special_tokens",
        "min_tokens",
        "response_format",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
        "workload",
        "k_policy",
        "replay_output",
    ];
}

// ---------------------------------------------------------------- responses

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PromptTokensDetails {
    pub cached_tokens: u32,
}

/// wring extension inside `usage`: this request's speculative-decoding record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpecUsage {
    pub steps: u32,
    pub draft_tokens: u32,
    pub accepted_tokens: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UsageInfo {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub prompt_tokens_details: PromptTokensDetails,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<SpecUsage>,
}

impl From<&wring_engine::api::Usage> for UsageInfo {
    fn from(u: &wring_engine::api::Usage) -> Self {
        UsageInfo {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: u.cached_tokens,
            },
            spec_decode: (u.spec_steps > 0).then_some(SpecUsage {
                steps: u.spec_steps,
                draft_tokens: u.draft_tokens,
                accepted_tokens: u.accepted_tokens,
            }),
        }
    }
}

/// Chat logprobs: `{"content": [...]}`.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// Legacy completions logprobs: parallel arrays.
#[derive(Debug, Clone, Serialize, Default)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<serde_json::Map<String, Value>>,
    pub text_offset: Vec<u32>,
}

/// A tool call in a response message: `arguments` is a JSON string, as OpenAI sends it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionCallOut {
    pub name: String,
    pub arguments: String,
}

/// One element of a streamed `delta.tool_calls`: the first delta of a call carries
/// its id, type and name; later ones append to `arguments`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatMessageOut {
    pub role: &'static str,
    /// Null when the message is only tool calls, or only reasoning.
    pub content: Option<String>,
    /// A reasoning model's thinking (the reasoning parser's; absent when it is off for
    /// the request): vLLM's `reasoning_content`, and `reasoning`, its newer name for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageInfo,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// New reasoning text, under both of vLLM's names (see [`ChatMessageOut`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: usize,
    /// What a request gets for the fields it leaves out (wring's extension).
    pub sampling_defaults: SamplingDefaults,
    /// The system message a chat request without one (and without tools) gets in place of
    /// the template's own; absent = the template's (wring's extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_system_message: Option<String>,
    /// The reasoning parser chat responses go through (`qwen3`, `deepseek_r1`); absent
    /// when off (wring's extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_parser: Option<&'static str>,
}

/// The sampling a request gets for fields it leaves out, where that is not OpenAI's
/// default: the model's own settings (generation config or model card) and the server's
/// DRY loop penalty (`dry_multiplier` 0 = off; a request's own value wins).
#[derive(Debug, Clone, Serialize)]
pub struct SamplingDefaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    /// `max_tokens` of a chat request that sends none (0 = the rest of the context).
    pub max_tokens: u32,
    /// The DRY loop penalty of a chat request that sends no `dry_multiplier` (0 = off;
    /// legacy completions always default to off).
    pub dry_multiplier: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_base: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_allowed_length: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_penalty_last_n: Option<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FIELDS` must name exactly the struct's fields: every listed key deserialises
    /// (deny_unknown_fields would reject a stray one) and the struct has no others.
    #[test]
    fn chat_fields_list_matches_struct() {
        let mut obj = serde_json::Map::new();
        for f in ChatCompletionRequest::FIELDS {
            obj.insert(f.to_string(), Value::Null);
        }
        obj.insert("messages".into(), serde_json::json!([]));
        serde_json::from_value::<ChatCompletionRequest>(Value::Object(obj)).unwrap();
        let err = serde_json::from_value::<ChatCompletionRequest>(
            serde_json::json!({"messages": [], "zz": 1}),
        )
        .unwrap_err()
        .to_string();
        for f in ChatCompletionRequest::FIELDS {
            assert!(
                err.contains(&format!("`{f}`")),
                "{f} missing from FIELDS check: {err}"
            );
        }
        assert_eq!(
            err.matches('`').count() / 2,
            ChatCompletionRequest::FIELDS.len() + 1
        );
    }

    #[test]
    fn completion_fields_list_matches_struct() {
        let mut obj = serde_json::Map::new();
        for f in CompletionRequest::FIELDS {
            obj.insert(f.to_string(), Value::Null);
        }
        serde_json::from_value::<CompletionRequest>(Value::Object(obj)).unwrap();
        let err = serde_json::from_value::<CompletionRequest>(serde_json::json!({"zz": 1}))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err.matches('`').count() / 2,
            CompletionRequest::FIELDS.len() + 1
        );
    }
}
