//! Errors of the drafter API. Every bad input maps to one of these; nothing panics.

/// What went wrong in a drafter call. The drafter's state is unchanged when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrafterError {
    #[error("request {0} is not active (never started, or already stopped/aborted)")]
    UnknownRequest(u64),
    #[error("request {0} is already active")]
    AlreadyActive(u64),
    #[error("request {0}: empty prompt")]
    EmptyPrompt(u64),
    #[error("request {id}: token id {token} at position {position} is outside the vocabulary (size {vocab_size})")]
    OutOfVocabulary {
        id: u64,
        token: u32,
        position: usize,
        vocab_size: u32,
    },
    #[error("invalid drafter config: {0}")]
    InvalidConfig(String),
    #[error("sequence too long for the tree index (over {0} tokens)")]
    TooLong(u64),
}
