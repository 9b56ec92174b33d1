//! Speculative decoding settings: which drafter, the K policy, padding, the suffix
//! drafter's parameters and where the adaptive policy keeps its start-up timings.

use std::str::FromStr;

use anyhow::bail;

use super::k_policy::{KPolicy, TimingsCache};

/// Which drafter proposes tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProposerKind {
    #[default]
    None,
    Suffix,
    Ngram,
}

impl FromStr for ProposerKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "none" => Ok(Self::None),
            "suffix" => Ok(Self::Suffix),
            "ngram" => Ok(Self::Ngram),
            _ => bail!("unknown speculative method {s:?}; expected none, suffix or ngram"),
        }
    }
}

impl ProposerKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Suffix => "suffix",
            Self::Ngram => "ngram",
        }
    }
}

/// Suffix-drafter parameters exposed on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct SuffixParams {
    pub max_depth: usize,
    pub max_spec_factor: f32,
    pub min_token_prob: f32,
    /// Token budget of the global tree (None = unlimited).
    pub cache_tokens: Option<usize>,
}

impl Default for SuffixParams {
    /// ArcticInference's published parameters: right where every drafted token costs a
    /// row of verify work (unpadded drafts).
    fn default() -> Self {
        Self {
            max_depth: 24,
            max_spec_factor: 1.0,
            min_token_prob: 0.1,
            cache_tokens: None,
        }
    }
}

impl SuffixParams {
    /// Padded to K, a draft shorter than K leaves verify slots empty that cost the same,
    /// so the length cap (match length × factor) and the 0.1 probability floor only throw
    /// tokens away: no cap below K, floor 0.05 (results/2026-11-29-suffix-drafter,
    /// "Our parameters for padded-K verification": +5 % tokens a step at K 4, +9 % at K 8 on the trace).
    pub fn padded() -> Self {
        Self {
            max_spec_factor: 100.0,
            min_token_prob: 0.05,
            ..Self::default()
        }
    }

    /// The parameters for drafts that are (`pad`) or are not padded to K.
    pub fn for_padding(pad: bool) -> Self {
        if pad {
            Self::padded()
        } else {
            Self::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpecConfig {
    pub method: ProposerKind,
    pub k_policy: KPolicy,
    /// Uniform K padding: every sequence in a verify step carries exactly 1 + K
    /// query tokens. Off = variable-length drafts (`--no-pad`).
    pub pad: bool,
    /// Suffix-drafter parameters; the default is ArcticInference's, and the CLI picks
    /// [`SuffixParams::for_padding`] of `pad` (padded drafts fill their K).
    pub suffix: SuffixParams,
    /// Prompt-lookup n-gram sizes (largest tried first).
    pub ngram_min: usize,
    pub ngram_max: usize,
    /// Where the adaptive policy keeps its start-up step timings (None: measured at every
    /// start, kept nowhere).
    pub step_timings: Option<TimingsCache>,
}

impl Default for SpecConfig {
    fn default() -> Self {
        Self {
            method: ProposerKind::None,
            k_policy: KPolicy::Fixed(8),
            pad: true,
            suffix: SuffixParams::default(),
            ngram_min: 2,
            ngram_max: 4,
            step_timings: None,
        }
    }
}

impl SpecConfig {
    pub fn enabled(&self) -> bool {
        self.method != ProposerKind::None
    }
}
