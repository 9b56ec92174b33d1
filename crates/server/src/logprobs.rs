//! Engine logprobs → the two OpenAI shapes (chat's per-token objects, legacy
//! completions' parallel arrays). Token strings are each token decoded alone.

use std::sync::Arc;

use wring_engine::api::TokenLogprob;
use wring_model::Tokenizer;

use crate::params::LogprobsFormat;
use crate::protocol::{ChatLogprobs, ChatTokenLogprob, ChatTopLogprob, CompletionLogprobs};

/// Formats one request's logprobs; keeps the running text offset of completions.
pub struct LogprobFormatter {
    tokenizer: Arc<Tokenizer>,
    /// Characters of token text already reported (`text_offset` of the next token).
    text_offset: u32,
}

/// One batch of logprobs in the request's format.
#[derive(Debug)]
pub enum Formatted {
    Chat(ChatLogprobs),
    Completion(CompletionLogprobs),
}

impl LogprobFormatter {
    pub fn new(tokenizer: Arc<Tokenizer>) -> Self {
        Self {
            tokenizer,
            text_offset: 0,
        }
    }

    fn piece(&self, id: u32) -> String {
        self.tokenizer.decode(&[id], false).unwrap_or_default()
    }

    pub fn format(&mut self, format: LogprobsFormat, lps: &[TokenLogprob]) -> Formatted {
        match format {
            LogprobsFormat::Chat => Formatted::Chat(self.chat(lps)),
            LogprobsFormat::Completion => Formatted::Completion(self.completion(lps)),
        }
    }

    pub fn chat(&self, lps: &[TokenLogprob]) -> ChatLogprobs {
        let content = lps
            .iter()
            .map(|lp| {
                let token = self.piece(lp.token_id);
                ChatTokenLogprob {
                    bytes: token.as_bytes().to_vec(),
                    token,
                    logprob: lp.logprob,
                    top_logprobs: lp
                        .top
                        .iter()
                        .map(|&(id, logprob)| {
                            let token = self.piece(id);
                            ChatTopLogprob {
                                bytes: token.as_bytes().to_vec(),
                                token,
                                logprob,
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        ChatLogprobs { content }
    }

    pub fn completion(&mut self, lps: &[TokenLogprob]) -> CompletionLogprobs {
        let mut out = CompletionLogprobs::default();
        for lp in lps {
            let token = self.piece(lp.token_id);
            out.text_offset.push(self.text_offset);
            self.text_offset += token.chars().count() as u32;
            out.tokens.push(token);
            out.token_logprobs.push(lp.logprob);
            out.top_logprobs.push(
                lp.top
                    .iter()
                    .map(|&(id, l)| (self.piece(id), serde_json::Value::from(l)))
                    .collect(),
            );
        }
        out
    }
}

impl ChatLogprobs {
    pub fn extend(&mut self, other: ChatLogprobs) {
        self.content.extend(other.content);
    }
}

impl CompletionLogprobs {
    pub fn extend(&mut self, other: CompletionLogprobs) {
        self.tokens.extend(other.tokens);
        self.token_logprobs.extend(other.token_logprobs);
        self.top_logprobs.extend(other.top_logprobs);
        self.text_offset.extend(other.text_offset);
    }
}
