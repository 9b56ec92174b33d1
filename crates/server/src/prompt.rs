//! What a request's prompt becomes, shared by the generation routes and
//! `/tokenize`: messages and tools through the chat template, text to token ids.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::reasoning::{self, PromptThink, SplitStart};
use crate::state::AppState;
use crate::tools::{render_chat, RenderedChat, ToolFormat, ToolPlan};

/// A chat request's prompt, and where its output starts for the reasoning parser.
#[derive(Debug, Clone)]
pub struct ChatPrompt {
    pub rendered: RenderedChat,
    /// Where the output starts: inside the thinking, or maybe; None when the reasoning
    /// parser is off or the whole output is content (the prompt closed the block, or
    /// Qwen3's `enable_thinking` is false). When Some, a forced call's opening is left
    /// for its grammar (`RenderedChat::forced_opening`): the model thinks first.
    pub split: Option<SplitStart>,
}

/// A chat request's template variables, as the template sees them (`reasoning.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateArgs<'a> {
    /// The request's `chat_template_kwargs` (the server's defaults go under them).
    pub kwargs: Option<&'a Map<String, Value>>,
    pub reasoning_effort: Option<&'a str>,
}

/// A chat request's prompt: its messages and offered tools through the template, with its
/// template variables. A request with neither a system message nor tools gets the server's
/// default system message, when it has one, in place of the one the template would insert
/// (`ServerConfig::default_system`).
pub fn render_prompt(
    state: &AppState,
    mut messages: Vec<serde_json::Value>,
    tools: &ToolPlan,
    args: TemplateArgs<'_>,
) -> Result<ChatPrompt, ApiError> {
    let template = state.info.chat_template.as_ref().ok_or_else(|| {
        ApiError::invalid("This model has no chat template; use /v1/completions instead.")
    })?;
    if let Some(system) = &state.config.default_system {
        let has_system = messages.iter().any(|m| m["role"] == "system");
        if !has_system && tools.tools.is_empty() {
            messages.insert(0, serde_json::json!({"role": "system", "content": system}));
        }
    }
    let empty = Map::new();
    let kwargs = reasoning::template_kwargs(
        &state.config.default_chat_template_kwargs,
        args.kwargs.unwrap_or(&empty),
        args.reasoning_effort,
    );
    let think = state.reasoning.as_ref();
    let mut rendered = render_chat(
        template,
        messages,
        tools,
        tool_format(state),
        &kwargs,
        think.is_some(),
    )
    .map_err(|e| {
        ApiError::invalid_param(
            "messages",
            format!("The chat template rejected the messages: {e:#}"),
        )
    })?;
    let split = think.and_then(|r| {
        // The generation prompt decides; a template that renders the conversation
        // differently without it falls back to the whole prompt's last tag (vLLM's rule).
        let prompt = PromptThink::of(
            rendered
                .generation_prompt
                .as_deref()
                .unwrap_or(&rendered.text),
        );
        r.split_start(prompt, &kwargs)
    });
    if split.is_none() {
        rendered.write_forced_opening();
    }
    Ok(ChatPrompt { rendered, split })
}

pub fn tool_format(state: &AppState) -> ToolFormat {
    state.config.tool_call_format.unwrap_or_else(|| {
        state
            .info
            .chat_template
            .as_ref()
            .map_or(ToolFormat::Hermes, |t| ToolFormat::detect(t.source()))
    })
}

/// Token ids of a prompt, with BOS in front when the model wants one (chat
/// templates usually write it themselves; then it is not doubled).
pub fn encode(state: &AppState, text: &str) -> Result<Vec<u32>, ApiError> {
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

pub fn check_model(state: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(name) if !state.knows_model(name) => Err(ApiError::model_not_found(name)),
        _ => Ok(()),
    }
}
