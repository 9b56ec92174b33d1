//! Structured output for wring: a request's constraint (`response_format` JSON
//! object or schema, a regex, a list of choices, a Lark/GBNF grammar) compiled into a
//! matcher over the model's tokenizer, which answers the questions decoding asks:
//! which tokens may come next (a mask over the vocabulary), advance by the tokens
//! emitted, and — for speculation — how many leading tokens of a draft the grammar
//! allows.
//!
//! The engine is llguidance (the Rust crate llama.cpp and vLLM use): an Earley
//! parser over a derivative-based lexer, masks in tens of microseconds without a
//! per-grammar precomputation over the vocabulary, JSON schema with `$ref`, regexes
//! and full context-free grammars, plus `validate_tokens` and `rollback`, which
//! speculative decoding needs. See `compiler.rs` for the comparison with the
//! alternatives.

mod compiler;
mod gbnf;
mod matcher;
mod spec;

pub use compiler::{
    with_json_layout, GrammarCompiler, GrammarError, JSON_OBJECT_MAX_STRING, JSON_WHITESPACE,
};
pub use matcher::{GrammarMatcher, TokenMask};
pub use spec::GrammarSpec;
