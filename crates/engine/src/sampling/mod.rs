//! Sampling: parameter validation, logit processing (logit bias, min tokens,
//! penalties, DRY, temperature, top-k, top-p, min-p), seeded per-request random draws
//! and logprobs.

mod distribution;
mod dry;
mod edits;
mod logprobs;
mod penalties;
mod validate;

pub use distribution::{argmax, Distribution};
pub use dry::{BreakerCache, Dry, DryBreakers};
pub use edits::LogitEdits;
pub use logprobs::token_logprobs;
pub use penalties::TokenHistory;
pub use validate::validate_sampling;

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::api::SamplingParams;

/// Per-request sampler: parameters, token history for penalties, and its own RNG
/// (same seed → same draws).
#[derive(Debug)]
pub struct RequestSampler {
    params: SamplingParams,
    history: TokenHistory,
    /// DRY's context and settings; None when DRY is off.
    dry: Option<Dry>,
    edits: LogitEdits,
    /// Tokens observed so far (the output length, for `min_tokens`).
    emitted: usize,
    rng: ChaCha8Rng,
}

impl RequestSampler {
    pub fn new(params: SamplingParams, prompt: &[u32]) -> Self {
        let seed = params.seed.unwrap_or_else(|| rand::thread_rng().gen());
        Self {
            history: TokenHistory::new(prompt, params.repetition_penalty != 1.0),
            dry: Dry::new(&params, prompt),
            edits: LogitEdits::new(&params),
            emitted: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            params,
        }
    }

    /// The tokens that end this request; `min_tokens` keeps them from being
    /// sampled until enough tokens were emitted.
    pub fn with_stop_ids(mut self, ids: impl IntoIterator<Item = u32>) -> Self {
        self.edits.set_stop_ids(ids);
        self
    }

    /// The tokens that end DRY matches (without them every token may belong to one).
    pub fn set_dry_breakers(&mut self, breakers: Arc<DryBreakers>) {
        if let Some(d) = &mut self.dry {
            d.set_breakers(breakers);
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0
    }

    /// Whether the next token is always the argmax of the raw logits: greedy (or
    /// top-k 1) with no penalty (DRY included), bias or `min_tokens` ban that could move it. Then the
    /// engine may ask the runner for ids alone (`ModelRunner::forward_greedy`)
    /// instead of whole logit rows; otherwise the step takes the logits path, where
    /// sampling and verification see the edited rows.
    pub fn argmax_only(&self) -> bool {
        let p = &self.params;
        (p.temperature == 0.0 || p.top_k == 1)
            && p.repetition_penalty == 1.0
            && p.presence_penalty == 0.0
            && p.frequency_penalty == 0.0
            && self.dry.is_none()
            && !self.edits.is_active(self.emitted)
    }

    /// The distribution the next token is drawn from, given the model's raw logits
    /// and the tokens emitted so far.
    pub fn distribution(&self, raw_logits: &[f32]) -> Distribution {
        let edits = self.edits.is_active(self.emitted);
        let dry = self.dry.as_ref().map(|d| d.repeat_lengths());
        let dry = dry.filter(|r| !r.is_empty());
        if edits || self.history.has_effect(&self.params) || dry.is_some() {
            let mut l = raw_logits.to_vec();
            self.edits.apply(self.emitted, &mut l);
            self.history.apply(&self.params, &mut l);
            if let (Some(d), Some(repeats)) = (&self.dry, dry) {
                d.apply(&repeats, &mut l);
            }
            Distribution::from_logits(&l, &self.params)
        } else {
            Distribution::from_logits(raw_logits, &self.params)
        }
    }

    /// Plain decoding: draw the next token.
    pub fn sample(&mut self, raw_logits: &[f32]) -> u32 {
        let d = self.distribution(raw_logits);
        d.sample(&mut self.rng)
    }

    /// Uniform draw in [0, 1) from the request's RNG.
    pub fn uniform(&mut self) -> f32 {
        self.rng.gen::<f32>()
    }

    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// Records an emitted token (for penalties and DRY).
    pub fn observe(&mut self, token: u32) {
        self.history.push(token);
        if let Some(d) = &mut self.dry {
            d.push(token);
        }
        self.emitted += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, 0.5, -1.0, 2.5]
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = RequestSampler::new(SamplingParams::default(), &[]);
        assert_eq!(s.sample(&logits()), 1);
    }

    #[test]
    fn same_seed_gives_same_draws_and_different_seeds_differ() {
        let p = SamplingParams {
            temperature: 1.0,
            seed: Some(7),
            ..Default::default()
        };
        let draw = |p: &SamplingParams| {
            let mut s = RequestSampler::new(p.clone(), &[]);
            (0..64).map(|_| s.sample(&logits())).collect::<Vec<_>>()
        };
        assert_eq!(draw(&p), draw(&p));
        let q = SamplingParams {
            seed: Some(8),
            ..p.clone()
        };
        assert_ne!(draw(&p), draw(&q));
    }

    #[test]
    fn repetition_penalty_changes_greedy_choice() {
        let p = SamplingParams {
            repetition_penalty: 2.0,
            ..Default::default()
        };
        // Token 1 (logit 3.0) is in the prompt: 3.0 / 2 = 1.5 < 2.5.
        let mut s = RequestSampler::new(p, &[1]);
        assert_eq!(s.sample(&logits()), 5);
    }

    #[test]
    fn argmax_only_exactly_when_no_setting_can_move_the_argmax() {
        let only = |p: SamplingParams| RequestSampler::new(p, &[]).argmax_only();
        assert!(only(SamplingParams::default()));
        assert!(only(SamplingParams {
            temperature: 0.7,
            top_k: 1,
            ..Default::default()
        }));
        for p in [
            SamplingParams {
                temperature: 0.7,
                ..Default::default()
            },
            SamplingParams {
                repetition_penalty: 1.1,
                ..Default::default()
            },
            SamplingParams {
                presence_penalty: 0.5,
                ..Default::default()
            },
            SamplingParams {
                frequency_penalty: -0.5,
                ..Default::default()
            },
            SamplingParams {
                dry_multiplier: 0.8,
                ..Default::default()
            },
        ] {
            assert!(!only(p.clone()), "{p:?}");
        }
        // Where it holds, sampling is the raw argmax whatever was emitted before.
        let mut s = RequestSampler::new(SamplingParams::default(), &[1, 1, 1]);
        s.observe(1);
        assert_eq!(s.sample(&logits()), argmax(&logits()));
    }

    #[test]
    fn bias_and_min_tokens_move_the_argmax_and_turn_off_the_ids_only_path() {
        let p = SamplingParams {
            logit_bias: vec![(3, 10.0)],
            ..Default::default()
        };
        let mut s = RequestSampler::new(p, &[]);
        assert!(!s.argmax_only());
        assert_eq!(s.sample(&logits()), 3);
        let p = SamplingParams {
            min_tokens: 1,
            ..Default::default()
        };
        // Token 1 (the argmax) ends the request: banned for the first token only.
        let mut s = RequestSampler::new(p, &[]).with_stop_ids([1]);
        assert!(!s.argmax_only());
        assert_eq!(s.sample(&logits()), 5);
        s.observe(5);
        assert!(s.argmax_only());
        assert_eq!(s.sample(&logits()), 1);
    }

    #[test]
    fn dry_moves_the_greedy_choice_off_a_repeat_and_turns_off_the_ids_only_path() {
        let p = SamplingParams {
            dry_multiplier: 0.8,
            ..Default::default()
        };
        // Prompt "1 0 4 1 0": token 4 would repeat "1 0 4"; logit 2.5 - 0.8 * 1.75^0 = 1.7,
        // below token 2's 2.0 (and token 1 does not follow "1 0" anywhere).
        let logits = [0.0, 1.0, 2.0, 0.5, 2.5, -1.0];
        let mut s = RequestSampler::new(p.clone(), &[1, 0, 4, 1, 0]);
        assert!(!s.argmax_only());
        assert_eq!(s.sample(&logits), 2);
        // Off: the raw argmax.
        let off = SamplingParams {
            dry_multiplier: 0.0,
            ..p.clone()
        };
        let mut s = RequestSampler::new(off.clone(), &[1, 0, 4, 1, 0]);
        assert!(s.argmax_only());
        assert_eq!(s.sample(&logits), 4);
        // A breaker inside the repeat ends it: 0 breaks, so "1 0" never matches.
        let mut s = RequestSampler::new(p.clone(), &[1, 0, 4, 1, 0]);
        s.set_dry_breakers(Arc::new(DryBreakers::from_ids(&[0])));
        assert_eq!(s.sample(&logits), 4);
        // Emitted tokens extend the context: after "3 1", token 0 would repeat "3 1 0".
        let mut s = RequestSampler::new(p, &[3, 1, 0, 5]);
        let l = [2.0, 1.0, 1.5, 0.0, 0.0, 0.0];
        assert_eq!(s.sample(&l), 0);
        s.observe(3);
        s.observe(1);
        assert_eq!(s.sample(&l), 2);
    }

    #[test]
    fn frequency_and_presence_penalties_use_output_counts() {
        let p = SamplingParams {
            frequency_penalty: 0.4,
            presence_penalty: 0.3,
            ..Default::default()
        };
        let mut s = RequestSampler::new(p, &[5]);
        assert_eq!(s.sample(&logits()), 1, "prompt tokens are not penalised");
        s.observe(1);
        // 3.0 - 0.4 - 0.3 = 2.3 < 2.5
        assert_eq!(s.sample(&logits()), 5);
    }
}
