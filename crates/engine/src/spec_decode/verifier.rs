//! Verification of drafts against the target model, one verifier for both forms the
//! runner returns: greedy ids (the argmax already taken on the device,
//! `ModelRunner::forward_greedy`) or whole logit rows.
//!
//! Greedy: accept while the draft equals the target's argmax, then emit the
//! target's own token (the correction at the first mismatch, or the bonus after a
//! fully accepted draft). Sampling: each draft token is a point mass, so accept x
//! with probability p(x); on rejection draw from p with x removed and renormalised.
//! Either way the emitted tokens follow exactly the distribution of plain decoding.
//! Only the first `valid_len` slots are ever looked at: pad slots are rejected by
//! construction, whatever token they hold. A sequence without a draft
//! (`valid_len` 0) is plain decoding: one token from the target.

use wring_model::runner::Logits;

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

/// What one forward step returned: whole logit rows, or only their argmax ids.
pub enum StepOutput {
    Logits(Logits),
    Ids(Vec<u32>),
}

impl StepOutput {
    /// Checks the runner returned one result per requested row.
    pub fn check_shape(&self, rows: usize, vocab: usize) -> Result<(), String> {
        match self {
            Self::Logits(l) if l.rows != rows || l.vocab != vocab => Err(format!(
                "runner returned {}x{} logits, expected {rows}x{vocab}",
                l.rows, l.vocab
            )),
            Self::Ids(ids) if ids.len() != rows => Err(format!(
                "runner returned {} greedy ids, expected {rows}",
                ids.len()
            )),
            _ => Ok(()),
        }
    }

    /// One sequence's rows, starting at its first logit row.
    pub fn target(&self, first_row: usize) -> TargetRows<'_> {
        match self {
            Self::Logits(logits) => TargetRows::Logits { logits, first_row },
            Self::Ids(ids) => TargetRows::Ids(&ids[first_row..]),
        }
    }
}

/// The target model's verdict on one sequence's query positions: row j predicts
/// the token after position j (0 = the last emitted token, j = the j-th draft slot).
#[derive(Clone, Copy)]
pub enum TargetRows<'a> {
    /// Greedy next-token ids (the runner took the argmax); only for samplers whose
    /// next token is always the argmax (`RequestSampler::argmax_only`).
    Ids(&'a [u32]),
    /// Raw logit rows.
    Logits {
        logits: &'a Logits,
        first_row: usize,
    },
}

impl<'a> TargetRows<'a> {
    /// Logit row j, when the target gave logits.
    pub fn logits(&self, j: usize) -> Option<&'a [f32]> {
        match *self {
            Self::Logits { logits, first_row } => Some(logits.row(first_row + j)),
            Self::Ids(_) => None,
        }
    }
}

/// Verifies `drafts[..valid_len]` against the target and advances the sampler's
/// history over every emitted token.
pub fn verify(
    sampler: &mut RequestSampler,
    target: TargetRows,
    drafts: &[u32],
    valid_len: usize,
) -> VerifyOutcome {
    match target {
        TargetRows::Ids(ids) => {
            let valid_len = valid_len.min(drafts.len());
            let accepted = drafts[..valid_len]
                .iter()
                .zip(ids)
                .take_while(|(d, t)| d == t)
                .count();
            let tokens = ids[..=accepted].to_vec();
            for &t in &tokens {
                sampler.observe(t);
            }
            VerifyOutcome { tokens, accepted }
        }
        TargetRows::Logits { logits, first_row } => verify_drafts(
            sampler,
            |j| logits.row(first_row + j),
            drafts,
            valid_len,
            RejectionRule::Correct,
        ),
    }
}

/// The logits form of [`verify`]. `rows(j)` returns the raw logits predicting the token after query position j
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

    fn logits_of(rows: &[Vec<f32>]) -> Logits {
        Logits {
            rows: rows.len(),
            vocab: rows[0].len(),
            data: rows.concat(),
        }
    }

    #[test]
    fn ids_and_logits_give_the_same_greedy_verdict() {
        let rows = rows_for(&[3, 4, 5, 6], 8);
        let logits = logits_of(&rows);
        let ids = [3u32, 4, 5, 6];
        for (drafts, valid) in [
            (&[3u32, 4, 1][..], 3),
            (&[3, 4, 5], 3),
            (&[3, 4, 5], 1),
            (&[9, 9, 9], 3),
            (&[], 0),
        ] {
            let mut a = RequestSampler::new(SamplingParams::default(), &[]);
            let mut b = RequestSampler::new(SamplingParams::default(), &[]);
            let from_ids = verify(&mut a, TargetRows::Ids(&ids), drafts, valid);
            let target = TargetRows::Logits {
                logits: &logits,
                first_row: 0,
            };
            assert_eq!(
                from_ids,
                verify(&mut b, target, drafts, valid),
                "{drafts:?}"
            );
        }
    }

    #[test]
    fn a_token_decoded_without_a_draft_counts_for_the_penalties() {
        // Token 1 wins by 0.5; a frequency penalty of 1 moves the next choice to 2
        // only if the first emitted token was recorded.
        let row = vec![0.0f32, 3.0, 2.5, 0.0];
        let logits = logits_of(&[row.clone(), row]);
        let params = SamplingParams {
            frequency_penalty: 1.0,
            ..Default::default()
        };
        let mut s = RequestSampler::new(params, &[]);
        let first = verify(&mut s, StepOutput::Logits(logits).target(0), &[], 0);
        assert_eq!(first.tokens, vec![1]);
        let logits = logits_of(&[vec![0.0f32, 3.0, 2.5, 0.0]]);
        let next = verify(&mut s, StepOutput::Logits(logits).target(0), &[], 0);
        assert_eq!(next.tokens, vec![2]);
    }

    #[test]
    fn a_runner_returning_the_wrong_shape_is_reported() {
        let out = StepOutput::Ids(vec![1, 2]);
        assert!(out.check_shape(2, 8).is_ok());
        assert!(out.check_shape(3, 8).unwrap_err().contains("2 greedy ids"));
        let out = StepOutput::Logits(logits_of(&rows_for(&[1], 8)));
        assert!(out.check_shape(1, 9).unwrap_err().contains("1x8 logits"));
    }
}
