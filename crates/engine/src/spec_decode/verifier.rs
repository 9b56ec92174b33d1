//! Verification of drafts against the target model's logits.
//!
//! Greedy: accept while the draft equals the target's argmax, then emit the
//! target's own token (the correction at the first mismatch, or the bonus after a
//! fully accepted draft). Sampling: each draft token is a point mass, so accept x
//! with probability p(x); on rejection draw from p with x removed and renormalised.
//! Either way the emitted tokens follow exactly the distribution of plain decoding.
//! Only the first `valid_len` slots are ever looked at: pad slots are rejected by
//! construction, whatever token they hold.

use crate::sampling::RequestSampler;

/// Which residual to draw from after a rejection. Only `Correct` is used by the
/// engine; `BrokenKeepsDraft` exists so the statistical test can prove it detects
/// a wrong verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RejectionRule {
    #[default]
    Correct,
    /// Draws from p itself after a rejection (wrong: over-weights the draft).
    BrokenKeepsDraft,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOutcome {
    /// Accepted draft tokens followed by one token from the target.
    pub tokens: Vec<u32>,
    /// Number of draft tokens accepted.
    pub accepted: usize,
}

/// `rows(j)` returns the raw logits predicting the token after query position j
/// (position 0 is the last emitted token, position j the j-th draft slot). `drafts`
/// may be padded; `valid_len` says how many slots are real. The sampler's history
/// is advanced over every emitted token.
pub fn verify_drafts<'a>(
    sampler: &mut RequestSampler,
    rows: impl Fn(usize) -> &'a [f32],
    drafts: &[u32],
    valid_len: usize,
    rule: RejectionRule,
) -> VerifyOutcome {
    let valid_len = valid_len.min(drafts.len());
    let mut tokens = Vec::with_capacity(valid_len + 1);
    for (j, &x) in drafts.iter().enumerate().take(valid_len) {
        let dist = sampler.distribution(rows(j));
        let accept = if sampler.is_greedy() {
            dist.prob(x) == 1.0
        } else {
            sampler.uniform() < dist.prob(x)
        };
        if accept {
            tokens.push(x);
            sampler.observe(x);
            continue;
        }
        let y = match rule {
            RejectionRule::Correct => dist
                .sample_excluding(x, sampler.rng())
                .expect("a rejected draft leaves other tokens with mass"),
            RejectionRule::BrokenKeepsDraft => dist.sample(sampler.rng()),
        };
        tokens.push(y);
        sampler.observe(y);
        return VerifyOutcome {
            tokens,
            accepted: j,
        };
    }
    let y = sampler.sample(rows(valid_len));
    tokens.push(y);
    sampler.observe(y);
    VerifyOutcome {
        tokens,
        accepted: valid_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SamplingParams;

    /// Row j prefers token `best[j]`.
    fn rows_for(best: &[u32], vocab: usize) -> Vec<Vec<f32>> {
        best.iter()
            .map(|&b| {
                let mut r = vec![0.0; vocab];
                r[b as usize] = 5.0;
                r
            })
            .collect()
    }

    #[test]
    fn greedy_accepts_the_matching_prefix_then_corrects() {
        let rows = rows_for(&[3, 4, 5, 6], 8);
        let mut s = RequestSampler::new(SamplingParams::default(), &[]);
        let out = verify_drafts(&mut s, |j| &rows[j], &[3, 4, 1], 3, RejectionRule::Correct);
        assert_eq!(
            out,
            VerifyOutcome {
                tokens: vec![3, 4, 5],
                accepted: 2
            }
        );
        let mut s = RequestSampler::new(SamplingParams::default(), &[]);
        let out = verify_drafts(&mut s, |j| &rows[j], &[3, 4, 5], 3, RejectionRule::Correct);
        assert_eq!(
            out,
            VerifyOutcome {
                tokens: vec![3, 4, 5, 6],
                accepted: 3
            },
            "bonus token"
        );
    }

    #[test]
    fn pad_slots_are_rejected_whatever_they_hold() {
        // The pad slots hold exactly the tokens the target would accept.
        let rows = rows_for(&[3, 4, 5, 6], 8);
        let mut s = RequestSampler::new(SamplingParams::default(), &[]);
        let out = verify_drafts(&mut s, |j| &rows[j], &[3, 4, 5], 1, RejectionRule::Correct);
        assert_eq!(
            out,
            VerifyOutcome {
                tokens: vec![3, 4],
                accepted: 1
            }
        );
        let mut s = RequestSampler::new(SamplingParams::default(), &[]);
        let out = verify_drafts(&mut s, |j| &rows[j], &[3, 4, 5], 0, RejectionRule::Correct);
        assert_eq!(
            out,
            VerifyOutcome {
                tokens: vec![3],
                accepted: 0
            }
        );
    }

    #[test]
    fn sampling_never_emits_a_rejected_draft_in_its_place() {
        let rows = vec![vec![0.0f32, 0.1, 0.2, 0.0]; 2];
        for seed in 0..200 {
            let p = SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..Default::default()
            };
            let mut s = RequestSampler::new(p, &[]);
            let out = verify_drafts(&mut s, |j| &rows[j], &[2], 1, RejectionRule::Correct);
            if out.accepted == 0 {
                assert_ne!(out.tokens[0], 2);
            } else {
                assert_eq!(out.tokens.len(), 2);
            }
        }
    }

    /// Exact check on a toy distribution: accept/reject frequencies reproduce p.
    #[test]
    fn rejection_sampling_reproduces_the_target_distribution() {
        let probs = [0.5f32, 0.3, 0.15, 0.05];
        let row: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        let n = 40000;
        let mut counts = [0usize; 4];
        for seed in 0..n {
            let p = SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..Default::default()
            };
            let mut s = RequestSampler::new(p, &[]);
            let out = verify_drafts(&mut s, |_| &row, &[1], 1, RejectionRule::Correct);
            counts[out.tokens[0] as usize] += 1;
        }
        for (c, p) in counts.iter().zip(probs) {
            let f = *c as f32 / n as f32;
            assert!((f - p).abs() < 0.012, "{counts:?}");
        }
    }
}
