//! A recorded output a benchmark request carries for the server to replay
//! (`replay_output`), and the source it came from (`replay_source.rs` picks them).

/// Where a recorded output comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReplayKind {
    /// The corpus's own response (ShareGPT's assistant turn, HumanEval's canonical solution,
    /// MBPP's code, SWE-bench's patch, GPT-4's Arena-Hard answer), sent as text.
    Reference,
    /// A real model's own output for the prompt (token ids from a `--trace-out` file).
    Own,
}

impl ReplayKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayKind::Reference => "reference",
            ReplayKind::Own => "own",
        }
    }
}

/// One prompt's recorded output, as the request carries it (`replay_output`).
#[derive(Debug, Clone, PartialEq)]
pub enum Recording {
    Text(String),
    Ids(Vec<u32>),
}

impl Recording {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Recording::Text(t) => serde_json::Value::from(t.as_str()),
            Recording::Ids(ids) => serde_json::Value::from(ids.clone()),
        }
    }
}
