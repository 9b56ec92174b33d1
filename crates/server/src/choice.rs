//! One choice's output as it arrives: text (a reasoning model's thinking split off
//! first, then the answer through the tool-call parser when the request offers tools),
//! logprobs in the endpoint's shape, the echoed prompt, and what it adds up to at the end.

use wring_engine::api::{FinishReason, TokenLogprob, Usage};

use crate::logprobs::{Formatted, LogprobFormatter};
use crate::params::LogprobsFormat;
use crate::protocol::{ChatLogprobs, CompletionLogprobs, FunctionCallOut, ToolCallOut};
use crate::reasoning::{self, ReasoningSplitter, SplitStart};
use crate::tools::{Piece, ToolCallParser, ToolFormat};

/// How a chat request's output is split into reasoning and content.
#[derive(Debug, Clone, Copy)]
pub struct ReasoningOutput {
    pub start: SplitStart,
    /// vLLM's `include_reasoning`: false leaves the reasoning out of the response.
    pub include: bool,
}

/// How a chat request's output is scanned for tool calls.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub format: ToolFormat,
    /// The call opening the prompt already wrote (`required` / a named function).
    pub forced_prefix: String,
    /// The functions offered (a call to any other is not a call).
    pub names: Vec<String>,
}

/// What one engine event adds to a choice.
#[derive(Debug, Default)]
pub struct Update {
    /// New reasoning text (a reasoning model's thinking).
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ToolCallOut>,
    /// Index (within the choice) of the first call in `calls`.
    pub first_call: u32,
    pub logprobs: Option<Formatted>,
}

impl Update {
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty()
            && self.content.is_empty()
            && self.calls.is_empty()
            && self.logprobs.is_none()
    }
}

pub struct ChoiceOut {
    pub index: u32,
    /// Index of its prompt; the first choice of each prompt carries the prompt's usage.
    pub group: usize,
    pub leader: bool,
    lp: LogprobFormatter,
    lp_format: Option<LogprobsFormat>,
    tools: Option<ToolCallParser>,
    /// Splits a reasoning model's thinking off; and whether the response carries it.
    reasoning: Option<(ReasoningSplitter, bool)>,
    /// The prompt text, given out in front of the first output (`echo`).
    echo: Option<String>,
    call_id_base: String,
    // The whole output so far (for non-streamed responses).
    pub text: String,
    /// The reasoning given out so far.
    pub reasoning_text: String,
    pub calls: Vec<ToolCallOut>,
    pub chat_lp: ChatLogprobs,
    pub cmpl_lp: CompletionLogprobs,
    pub finish: Option<FinishReason>,
    pub usage: Usage,
}

pub struct ChoiceSetup {
    pub index: u32,
    pub group: usize,
    pub leader: bool,
    pub echo: Option<String>,
}

impl ChoiceOut {
    pub fn new(
        setup: ChoiceSetup,
        lp: LogprobFormatter,
        lp_format: Option<LogprobsFormat>,
        tools: Option<&ToolOutput>,
        reasoning: Option<ReasoningOutput>,
        response_id: &str,
    ) -> Self {
        let suffix = response_id.rsplit('-').next().unwrap_or(response_id);
        Self {
            index: setup.index,
            group: setup.group,
            leader: setup.leader,
            lp,
            lp_format,
            tools: tools.map(|t| ToolCallParser::new(t.format, &t.forced_prefix, t.names.clone())),
            reasoning: reasoning.map(|r| (ReasoningSplitter::new(r.start), r.include)),
            echo: setup.echo,
            call_id_base: format!("call_{suffix}{:02x}", setup.index),
            text: String::new(),
            reasoning_text: String::new(),
            calls: Vec::new(),
            chat_lp: ChatLogprobs::default(),
            cmpl_lp: CompletionLogprobs::default(),
            finish: None,
            usage: Usage::default(),
        }
    }

    /// New tokens' text and logprobs.
    pub fn on_tokens(&mut self, text: &str, logprobs: Option<Vec<TokenLogprob>>) -> Update {
        let mut update = Update {
            first_call: self.calls.len() as u32,
            ..Default::default()
        };
        if let Some(echo) = self.echo.take() {
            update.content.push_str(&echo);
        }
        let split = match &mut self.reasoning {
            Some((s, _)) => s.push(text),
            None => vec![reasoning::Piece::Content(text.to_string())],
        };
        self.add_split(split, &mut update);
        if let (Some(format), Some(lps)) = (self.lp_format, logprobs) {
            if !lps.is_empty() {
                update.logprobs = Some(self.lp.format(format, &lps));
            }
        }
        self.record(&update);
        update
    }

    /// The end: what the tool-call parser still held, and the finish reason.
    pub fn on_finished(&mut self, reason: FinishReason, usage: Usage) -> Update {
        let mut update = Update {
            first_call: self.calls.len() as u32,
            ..Default::default()
        };
        if let Some(echo) = self.echo.take() {
            update.content.push_str(&echo);
        }
        if let Some((s, _)) = &mut self.reasoning {
            let split = s.finish();
            self.add_split(split, &mut update);
        }
        if let Some(p) = &mut self.tools {
            let pieces = p.finish();
            self.add_pieces(pieces, &mut update);
        }
        self.record(&update);
        self.finish = Some(reason);
        self.usage = usage;
        update
    }

    /// OpenAI's `finish_reason`: `tool_calls` when the model stopped after calling.
    pub fn finish_reason(&self) -> Option<&'static str> {
        match self.finish? {
            FinishReason::Stop if !self.calls.is_empty() => Some("tool_calls"),
            r => Some(r.as_str()),
        }
    }

    /// The reasoning the response carries: Some (maybe empty) when the output had a
    /// thinking part and the request did not turn `include_reasoning` off.
    pub fn reasoning(&self) -> Option<String> {
        match &self.reasoning {
            Some((s, true)) if s.reasoned() => Some(self.reasoning_text.clone()),
            _ => None,
        }
    }

    /// Whether the output had a thinking part (included in the response or not).
    pub fn reasoned(&self) -> bool {
        self.reasoning.as_ref().is_some_and(|(s, _)| s.reasoned())
    }

    /// Reasoning goes out as it is (when included); the answer goes through the
    /// tool-call parser.
    fn add_split(&mut self, split: Vec<reasoning::Piece>, update: &mut Update) {
        let include = self.reasoning.as_ref().is_none_or(|(_, include)| *include);
        for piece in split {
            match piece {
                reasoning::Piece::Reasoning(t) => {
                    if include {
                        update.reasoning.push_str(&t);
                    }
                }
                reasoning::Piece::Content(t) => {
                    let pieces = match &mut self.tools {
                        Some(p) => p.push(&t),
                        None => vec![Piece::Content(t)],
                    };
                    self.add_pieces(pieces, update);
                }
            }
        }
    }

    fn add_pieces(&mut self, pieces: Vec<Piece>, update: &mut Update) {
        for piece in pieces {
            match piece {
                Piece::Content(t) => update.content.push_str(&t),
                Piece::Call { name, arguments } => {
                    let n = self.calls.len() + update.calls.len();
                    update.calls.push(ToolCallOut {
                        id: format!("{}{n:02x}", self.call_id_base),
                        kind: "function",
                        function: FunctionCallOut { name, arguments },
                    });
                }
            }
        }
    }

    fn record(&mut self, update: &Update) {
        self.reasoning_text.push_str(&update.reasoning);
        self.text.push_str(&update.content);
        self.calls.extend(update.calls.iter().cloned());
        match &update.logprobs {
            Some(Formatted::Chat(c)) => self.chat_lp.extend(c.clone()),
            Some(Formatted::Completion(c)) => self.cmpl_lp.extend(c.clone()),
            None => {}
        }
    }
}

/// Usage of a whole response: each prompt's tokens once, every choice's output.
pub fn total_usage(choices: &[ChoiceOut]) -> Usage {
    let mut u = Usage::default();
    for c in choices {
        if c.leader {
            u.prompt_tokens += c.usage.prompt_tokens;
            u.cached_tokens += c.usage.cached_tokens;
        }
        u.completion_tokens += c.usage.completion_tokens;
        u.spec_steps += c.usage.spec_steps;
        u.draft_tokens += c.usage.draft_tokens;
        u.accepted_tokens += c.usage.accepted_tokens;
    }
    u
}
