//! What a request constrains its output to, independent of the tokenizer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "value")]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid under this schema (`json_schema`, `guided_json`).
    JsonSchema(Value),
    /// Text matching this regex (Rust `regex` syntax, anchored at both ends).
    Regex(String),
    /// Exactly one of these strings (`guided_choice`).
    Choice(Vec<String>),
    /// A context-free grammar in llguidance's Lark dialect, which also reads GBNF
    /// (`root ::= ...`) rules (`guided_grammar`).
    Grammar(String),
}

impl GrammarSpec {
    /// Short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            GrammarSpec::JsonObject => "json_object",
            GrammarSpec::JsonSchema(_) => "json_schema",
            GrammarSpec::Regex(_) => "regex",
            GrammarSpec::Choice(_) => "choice",
            GrammarSpec::Grammar(_) => "grammar",
        }
    }
}
