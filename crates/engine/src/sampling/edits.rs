//! Request-level logit edits that change the target distribution itself: OpenAI's
//! `logit_bias` and vLLM's `min_tokens`. They are applied to a copy of the raw
//! logits before penalties and temperature, by `RequestSampler::distribution`, which
//! both plain sampling and the speculative verifier call: a draft is judged against
//! the same edited row that plain decoding would sample from, so speculation stays
//! lossless with them.

use crate::api::SamplingParams;

#[derive(Debug, Clone, Default)]
pub struct LogitEdits {
    bias: Vec<(u32, f32)>,
    min_tokens: usize,
    /// Tokens that end the request (EOS unless ignored, `stop_token_ids`): banned
    /// while fewer than `min_tokens` tokens were emitted.
    stop_ids: Vec<u32>,
}

impl LogitEdits {
    pub fn new(params: &SamplingParams) -> Self {
        Self {
            bias: params.logit_bias.clone(),
            min_tokens: params.min_tokens as usize,
            stop_ids: Vec::new(),
        }
    }

    pub fn set_stop_ids(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.stop_ids = ids.into_iter().collect();
        self.stop_ids.sort_unstable();
        self.stop_ids.dedup();
    }

    /// Whether any logit changes after `emitted` output tokens.
    pub fn is_active(&self, emitted: usize) -> bool {
        !self.bias.is_empty() || self.bans_stops(emitted)
    }

    fn bans_stops(&self, emitted: usize) -> bool {
        emitted < self.min_tokens && !self.stop_ids.is_empty()
    }

    pub fn apply(&self, emitted: usize, logits: &mut [f32]) {
        for &(t, b) in &self.bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        if self.bans_stops(emitted) {
            for &t in &self.stop_ids {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_adds_and_min_tokens_bans_stops_until_reached() {
        let p = SamplingParams {
            logit_bias: vec![(1, 2.0), (9, 5.0)],
            min_tokens: 2,
            ..Default::default()
        };
        let mut e = LogitEdits::new(&p);
        e.set_stop_ids([0, 0]);
        let mut l = vec![1.0, 1.0, 1.0];
        e.apply(1, &mut l);
        assert_eq!(
            l,
            vec![f32::NEG_INFINITY, 3.0, 1.0],
            "id 9 is out of range: ignored"
        );
        let mut l = vec![1.0, 1.0, 1.0];
        e.apply(2, &mut l);
        assert_eq!(l, vec![1.0, 3.0, 1.0]);
        let quiet = LogitEdits::new(&SamplingParams {
            min_tokens: 3,
            ..Default::default()
        });
        assert!(
            !quiet.is_active(0),
            "min_tokens without stop ids changes nothing"
        );
    }
}
