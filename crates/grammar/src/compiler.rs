//! Compiling a `GrammarSpec` into a matcher over the model's vocabulary.
//!
//! Why llguidance: it is the grammar engine llama.cpp and vLLM ship, MIT-licensed
//! and pure Rust. It covers everything the API exposes (JSON schema with `$ref`,
//! regex, Lark/GBNF context-free grammars) and computes a mask per step from a
//! token trie with an Earley parser, with no per-grammar pass over the vocabulary,
//! so compiling a new schema costs milliseconds. It also has what speculative
//! decoding needs: `validate_tokens` (how many draft tokens fit) and `rollback`.
//! The alternatives looked at: `outlines-core` builds a regex automaton index over
//! the whole vocabulary per schema (slow to compile for large schemas, regular
//! languages only: no recursive schemas or grammars); `kbnf` handles EBNF but has
//! no JSON-schema compiler and a far smaller user base; XGrammar is C++ with
//! Python bindings and no maintained Rust crate.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use toktrie_hf_tokenizers::ByteTokenizer;
use wring_model::Tokenizer;

use crate::matcher::GrammarMatcher;
use crate::spec::GrammarSpec;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrammarError {
    /// The request's constraint is malformed (a 400 for the client).
    #[error("{0}")]
    Invalid(String),
}

/// Builds matchers for one tokenizer; build it once and share it (the token trie
/// and lexer slices are computed here, a fraction of a second for a 50k-128k vocabulary).
#[derive(Clone)]
pub struct GrammarCompiler {
    factory: Arc<ParserFactory>,
    vocab_size: usize,
}

impl GrammarCompiler {
    /// `vocab_size` is the model's logit width (it may exceed the tokenizer's:
    /// the extra ids are never allowed); `eos_ids` end a finished grammar.
    pub fn new(tokenizer: &Tokenizer, eos_ids: &[u32], vocab_size: usize) -> anyhow::Result<Self> {
        let json = tokenizer.to_json()?;
        let mut bytes = ByteTokenizer::from_json_bytes(json.as_bytes())?;
        if !eos_ids.is_empty() {
            bytes.set_eos_tokens(eos_ids);
        }
        let vocab_size = vocab_size.max(tokenizer.vocab_size());
        let env = bytes.into_tok_env(Some(vocab_size))?;
        let mut factory = ParserFactory::new_simple(&env)?;
        factory.quiet();
        Ok(Self {
            factory: Arc::new(factory),
            vocab_size,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// A fresh matcher at the start of the output; errors describe what is wrong
    /// with the constraint.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<GrammarMatcher, GrammarError> {
        let grammar = top_level(spec)?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Invalid(format!("invalid {}: {e}", spec.kind())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Invalid(format!(
                "invalid {}: {e}",
                spec.kind()
            )));
        }
        Ok(GrammarMatcher::new(matcher, self.vocab_size))
    }
}

/// Whitespace a JSON constraint allows between tokens unless its schema sets its
/// own layout (`x-guidance`): any JSON whitespace, at most 16 characters per gap
/// (a newline and an indent), so a model cannot spend its budget on layout.
pub const JSON_WHITESPACE: &str = r"[\x20\x0A\x0D\x09]{1,16}";

/// `schema` with the default JSON layout, unless it names its own (`x-guidance`,
/// llguidance's options: `whitespace_flexible`, `whitespace_pattern`, separators).
/// Also for schemas embedded in a Lark grammar with `%json`.
pub fn with_json_layout(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance")
            .or_insert_with(|| json!({"whitespace_pattern": JSON_WHITESPACE}));
    }
    schema
}

/// Longest string of a `json_object` output (values; keys are free), in characters (an escape
/// counts as one).
pub const JSON_OBJECT_MAX_STRING: usize = 1024;

/// `response_format: {"type": "json_object"}`: any JSON object, but with every string value at
/// most [`JSON_OBJECT_MAX_STRING`] characters, so a model that repeats itself inside a string
/// (the default model did, to the token limit) has to close it, and the object then closes
/// like any other; an output cut by `max_tokens` still ends with `finish_reason: "length"`.
/// Whitespace is bounded as for every JSON constraint ([`JSON_WHITESPACE`]).
fn json_object_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": {"$ref": "#/$defs/value"},
        "$defs": {
            "value": {"anyOf": [
                {"type": "string", "maxLength": JSON_OBJECT_MAX_STRING},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
                {"type": "array", "items": {"$ref": "#/$defs/value"}},
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}}
            ]}
        }
    })
}

fn top_level(spec: &GrammarSpec) -> Result<TopLevelGrammar, GrammarError> {
    Ok(match spec {
        GrammarSpec::JsonObject => {
            TopLevelGrammar::from_json_schema(with_json_layout(&json_object_schema()))
        }
        GrammarSpec::JsonSchema(schema) => {
            if !schema.is_object() && !schema.is_boolean() {
                return Err(GrammarError::Invalid(
                    "a JSON schema must be an object (or a boolean)".into(),
                ));
            }
            TopLevelGrammar::from_json_schema(with_json_layout(schema))
        }
        GrammarSpec::Regex(rx) => {
            // Parse first: llguidance's rewrite assumes a valid regex.
            regex_syntax::Parser::new()
                .parse(rx)
                .map_err(|e| GrammarError::Invalid(format!("invalid regex: {e}")))?;
            TopLevelGrammar::from_regex(rx)
        }
        GrammarSpec::Choice(choices) => {
            if choices.is_empty() {
                return Err(GrammarError::Invalid("the list of choices is empty".into()));
            }
            let alternatives: Vec<String> =
                choices.iter().map(|c| regex_syntax::escape(c)).collect();
            TopLevelGrammar::from_regex(&format!("(?:{})", alternatives.join("|")))
        }
        GrammarSpec::Grammar(text) => {
            if text.trim().is_empty() {
                return Err(GrammarError::Invalid("the grammar is empty".into()));
            }
            let lark = if crate::gbnf::is_gbnf(text) {
                crate::gbnf::to_lark(text)
                    .map_err(|e| GrammarError::Invalid(format!("invalid grammar: {e}")))?
            } else {
                text.clone()
            };
            TopLevelGrammar::from_lark(lark)
        }
    })
}
