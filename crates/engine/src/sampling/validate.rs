//! Checks sampling parameters; each error names the field and the allowed range.

use crate::api::SamplingParams;

/// Largest `logprobs` (top alternatives per token) accepted.
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// Each request's breaker list is matched against every token's text once.
const MAX_DRY_BREAKERS: usize = 64;
const MAX_DRY_BREAKER_BYTES: usize = 40;

pub fn validate_sampling(p: &SamplingParams) -> Result<(), String> {
    let finite = |name: &str, v: f32| {
        if v.is_finite() {
            Ok(())
        } else {
            Err(format!("{name} must be a finite number, got {v}"))
        }
    };
    finite("temperature", p.temperature)?;
    finite("top_p", p.top_p)?;
    finite("min_p", p.min_p)?;
    finite("presence_penalty", p.presence_penalty)?;
    finite("frequency_penalty", p.frequency_penalty)?;
    finite("repetition_penalty", p.repetition_penalty)?;
    if !(0.0..=100.0).contains(&p.temperature) {
        return Err(format!(
            "temperature must be within [0, 100], got {}",
            p.temperature
        ));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(format!("top_p must be within (0, 1], got {}", p.top_p));
    }
    if !(0.0..=1.0).contains(&p.min_p) {
        return Err(format!("min_p must be within [0, 1], got {}", p.min_p));
    }
    if !(-2.0..=2.0).contains(&p.presence_penalty) {
        return Err(format!(
            "presence_penalty must be within [-2, 2], got {}",
            p.presence_penalty
        ));
    }
    if !(-2.0..=2.0).contains(&p.frequency_penalty) {
        return Err(format!(
            "frequency_penalty must be within [-2, 2], got {}",
            p.frequency_penalty
        ));
    }
    if !(p.repetition_penalty > 0.0 && p.repetition_penalty <= 10.0) {
        return Err(format!(
            "repetition_penalty must be within (0, 10], got {}",
            p.repetition_penalty
        ));
    }
    finite("dry_multiplier", p.dry_multiplier)?;
    finite("dry_base", p.dry_base)?;
    if p.dry_multiplier < 0.0 {
        return Err(format!(
            "dry_multiplier must be at least 0 (0 = off), got {}",
            p.dry_multiplier
        ));
    }
    if p.dry_base < 1.0 {
        return Err(format!("dry_base must be at least 1, got {}", p.dry_base));
    }
    if p.dry_allowed_length < 1 {
        return Err(format!(
            "dry_allowed_length must be at least 1, got {}",
            p.dry_allowed_length
        ));
    }
    if p.dry_penalty_last_n < -1 {
        return Err(format!(
            "dry_penalty_last_n must be -1 (the whole context), 0 (off) or positive, got {}",
            p.dry_penalty_last_n
        ));
    }
    if let Some(b) = &p.dry_sequence_breakers {
        if b.len() > MAX_DRY_BREAKERS {
            return Err(format!(
                "dry_sequence_breakers takes at most {MAX_DRY_BREAKERS} strings, got {}",
                b.len()
            ));
        }
        if let Some(s) = b
            .iter()
            .find(|s| s.is_empty() || s.len() > MAX_DRY_BREAKER_BYTES)
        {
            return Err(format!(
                "dry_sequence_breakers must be non-empty strings of at most {MAX_DRY_BREAKER_BYTES} bytes, got {s:?}"
            ));
        }
    }
    if let Some((t, b)) = p
        .logit_bias
        .iter()
        .find(|(_, b)| !(-100.0..=100.0).contains(b))
    {
        return Err(format!(
            "logit_bias must be within [-100, 100], got {b} for token {t}"
        ));
    }
    if let Some(n) = p.logprobs {
        if n > MAX_TOP_LOGPROBS {
            return Err(format!(
                "logprobs must be at most {MAX_TOP_LOGPROBS}, got {n}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_each_bad_field_with_its_name() {
        let base = SamplingParams::default();
        assert!(validate_sampling(&base).is_ok());
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: -1.0,
                    ..base.clone()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: f32::NAN,
                    ..base.clone()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: 0.0,
                    ..base.clone()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: 1.5,
                    ..base.clone()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    min_p: 2.0,
                    ..base.clone()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    presence_penalty: 3.0,
                    ..base.clone()
                },
                "presence_penalty",
            ),
            (
                SamplingParams {
                    frequency_penalty: -2.5,
                    ..base.clone()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    repetition_penalty: 0.0,
                    ..base.clone()
                },
                "repetition_penalty",
            ),
            (
                SamplingParams {
                    logprobs: Some(100),
                    ..base.clone()
                },
                "logprobs",
            ),
            (
                SamplingParams {
                    dry_multiplier: -0.5,
                    ..base.clone()
                },
                "dry_multiplier",
            ),
            (
                SamplingParams {
                    dry_multiplier: f32::INFINITY,
                    ..base.clone()
                },
                "dry_multiplier",
            ),
            (
                SamplingParams {
                    dry_base: 0.9,
                    ..base.clone()
                },
                "dry_base",
            ),
            (
                SamplingParams {
                    dry_allowed_length: 0,
                    ..base.clone()
                },
                "dry_allowed_length",
            ),
            (
                SamplingParams {
                    dry_penalty_last_n: -2,
                    ..base.clone()
                },
                "dry_penalty_last_n",
            ),
            (
                SamplingParams {
                    dry_sequence_breakers: Some(vec![String::new()]),
                    ..base.clone()
                },
                "dry_sequence_breakers",
            ),
        ];
        for (p, field) in cases {
            let e = validate_sampling(&p).unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
    }
}
