//! Repetition (prompt + output), presence and frequency (output) penalties.

use std::collections::{HashMap, HashSet};

use crate::api::SamplingParams;

#[derive(Debug, Default)]
pub struct TokenHistory {
    /// Prompt tokens, kept only when a repetition penalty is set.
    prompt: HashSet<u32>,
    output_counts: HashMap<u32, u32>,
}

impl TokenHistory {
    pub fn new(prompt: &[u32], keep_prompt: bool) -> Self {
        Self {
            prompt: if keep_prompt {
                prompt.iter().copied().collect()
            } else {
                HashSet::new()
            },
            output_counts: HashMap::new(),
        }
    }

    pub fn push(&mut self, token: u32) {
        *self.output_counts.entry(token).or_default() += 1;
    }

    /// Whether applying penalties would change any logit.
    pub fn has_effect(&self, p: &SamplingParams) -> bool {
        let rep = p.repetition_penalty != 1.0
            && !(self.prompt.is_empty() && self.output_counts.is_empty());
        let out = (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0)
            && !self.output_counts.is_empty();
        rep || out
    }

    /// Applies the penalties in place (vLLM/HF semantics).
    pub fn apply(&self, p: &SamplingParams, logits: &mut [f32]) {
        if p.repetition_penalty != 1.0 {
            let r = p.repetition_penalty;
            let seen = self.prompt.iter().chain(
                self.output_counts
                    .keys()
                    .filter(|t| !self.prompt.contains(t)),
            );
            for &t in seen {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l > 0.0 { *l / r } else { *l * r };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            for (&t, &c) in &self.output_counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l -= p.frequency_penalty * c as f32 + p.presence_penalty;
                }
            }
        }
    }
}
