//! The engine's public request/response types: what the server and the CLI use.
//! (Shared contract between the engine, the server and the CLI; change with care.)

use serde::{Deserialize, Serialize};
pub use wring_grammar::GrammarMatcher;

/// Sampling parameters, OpenAI semantics. `temperature == 0` means greedy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// 0 = disabled.
    pub top_k: u32,
    pub min_p: f32,
    pub seed: Option<u64>,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// 1.0 = disabled (HF/vLLM semantics: divides positive logits, multiplies negative).
    pub repetition_penalty: f32,
    /// Number of top logprobs to return per token (None = no logprobs).
    pub logprobs: Option<u32>,
    /// Added to the raw logit of each listed token before anything else (OpenAI
    /// `logit_bias`: -100 bans a token, +100 all but forces it).
    #[serde(default)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Stop token ids (EOS and `stop_token_ids`) cannot be sampled before this
    /// many tokens were emitted (vLLM `min_tokens`).
    #[serde(default)]
    pub min_tokens: u32,
    /// DRY ("Don't Repeat Yourself", as in llama.cpp and text-generation-webui): a token that
    /// would extend a sequence repeated from earlier in the context by n >= `dry_allowed_length`
    /// tokens loses `dry_multiplier * dry_base^(n - dry_allowed_length)` from its logit.
    /// 0 = off.
    #[serde(default)]
    pub dry_multiplier: f32,
    #[serde(default = "dry_base_default")]
    pub dry_base: f32,
    /// Repeats up to this long go unpenalised (at least 1).
    #[serde(default = "dry_allowed_length_default")]
    pub dry_allowed_length: u32,
    /// How many of the last context tokens (prompt and output) are searched for repeats:
    /// -1 = the whole context, 0 = none (DRY off).
    #[serde(default = "dry_penalty_last_n_default")]
    pub dry_penalty_last_n: i32,
    /// Texts that end a repeat: a token whose text contains one never belongs to a match.
    /// None = [`DRY_SEQUENCE_BREAKERS`].
    #[serde(default)]
    pub dry_sequence_breakers: Option<Vec<String>>,
}

impl SamplingParams {
    /// Whether DRY acts at all (a multiplier and a non-empty window).
    pub fn dry_enabled(&self) -> bool {
        self.dry_multiplier != 0.0 && self.dry_penalty_last_n != 0
    }
}

/// llama.cpp's default DRY sequence breakers: repeats do not run across lines, "key:" labels,
/// quotes or markdown emphasis, which legitimately recur.
pub const DRY_SEQUENCE_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];
pub const DRY_BASE: f32 = 1.75;
pub const DRY_ALLOWED_LENGTH: u32 = 2;

fn dry_base_default() -> f32 {
    DRY_BASE
}
fn dry_allowed_length_default() -> u32 {
    DRY_ALLOWED_LENGTH
}
fn dry_penalty_last_n_default() -> i32 {
    -1
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logprobs: None,
            logit_bias: Vec::new(),
            min_tokens: 0,
            dry_multiplier: 0.0,
            dry_base: DRY_BASE,
            dry_allowed_length: DRY_ALLOWED_LENGTH,
            dry_penalty_last_n: -1,
            dry_sequence_breakers: None,
        }
    }
}

/// Per-request speculative-decoding overrides (None = server default).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SpecOverrides {
    /// e.g. "fixed:8", "dynamic", "adaptive" (profile files are server-side only).
    pub k_policy: Option<String>,
    /// Workload tag looked up in a `profile:` best-K table.
    pub workload: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct GenerateRequest {
    /// Caller-chosen id for logs (the engine assigns its own numeric id too).
    pub request_id: String,
    pub prompt_ids: Vec<u32>,
    pub sampling: SamplingParams,
    pub max_tokens: u32,
    /// Extra stop token ids (the model's EOS ids are always stop tokens unless `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
    pub stop_strings: Vec<String>,
    pub ignore_eos: bool,
    pub spec: SpecOverrides,
    /// Structured output: every sampled token is drawn from the tokens this
    /// matcher allows (compiled by the caller with a `wring_grammar::GrammarCompiler`
    /// over the model's tokenizer, at the start of the output); the request
    /// finishes with `Stop` when the grammar is complete and nothing may follow.
    pub grammar: Option<GrammarMatcher>,
    /// Where `grammar` starts to bind: the first output token, or (a reasoning model's
    /// thinking left free) the token after the one that closes the thinking.
    pub grammar_start: GrammarStart,
    /// Replayed output (a benchmark mode, `EngineConfig::replay_outputs`): every step
    /// still runs the whole forward pass and takes the target's tokens on the device, but
    /// the tokens emitted, and so which drafted tokens are accepted, are these; the
    /// request ends where they end (or at `max_tokens`). Greedy requests only.
    pub replay_output: Option<Vec<u32>>,
}

/// Where a request's grammar starts to bind. A reasoning model writes its thinking
/// first, between an opening and a closing token (`<think>` … `</think>`); a constraint
/// (a schema, a forced tool call) is for the answer after it, as vLLM's structured output
/// with a reasoning parser has it. Before the grammar binds nothing is masked or forced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GrammarStart {
    /// From the first output token.
    #[default]
    First,
    /// From the token after the first `close` the output emits (the prompt opened the
    /// thinking, or the model is expected to).
    After { close: u32 },
    /// The first output token is the grammar's, or `open`: then the grammar binds after
    /// the first `close` (a model that may or may not think before answering).
    FirstOr { open: u32, close: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    Stop,
    Length,
    Abort,
    Error,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token_id: u32,
    pub logprob: f32,
    /// (token id, logprob), best first; `SamplingParams::logprobs` entries.
    pub top: Vec<(u32, f32)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
    /// Speculative decoding: verify steps, real draft tokens proposed, accepted.
    pub spec_steps: u32,
    pub draft_tokens: u32,
    pub accepted_tokens: u32,
}

/// Events streamed back for one request, in order. Exactly one `Finished` or
/// `Error` ends the stream.
#[derive(Debug, Clone)]
pub enum EngineEvent {
    /// One or more new tokens (several per step under speculation). `text` is the
    /// newly completed UTF-8 text (never a split character; may be empty while a
    /// character is incomplete). When a stop string appears, the text is cut exactly
    /// where it starts; `ids` end with the token that completed it (tokens after it,
    /// e.g. the rest of an accepted draft run, are dropped). A stop token id (EOS) is
    /// the last id and adds no text. `logprobs` (when asked for) are the model's raw
    /// log-softmax, one per id.
    Tokens {
        ids: Vec<u32>,
        text: String,
        logprobs: Option<Vec<TokenLogprob>>,
    },
    Finished {
        reason: FinishReason,
        usage: Usage,
    },
    Error {
        message: String,
    },
}

/// Why a request was not admitted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    #[error("the waiting queue is full ({0} requests); retry later")]
    QueueFull(usize),
    #[error("prompt has {prompt} tokens and max_tokens is {max_tokens}: together more than the model's context length of {max_len} tokens")]
    TooLong {
        prompt: usize,
        max_tokens: usize,
        max_len: usize,
    },
    #[error("prompt is empty")]
    EmptyPrompt,
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("engine is shutting down")]
    ShuttingDown,
}
