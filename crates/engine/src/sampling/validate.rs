//! Checks sampling parameters; each error names the field and the allowed range.

use crate::api::SamplingParams;

/// Largest `logprobs` (top alternatives per token) accepted.
pub const MAX_TOP_LOGPROBS: u32 = 20;

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
        ];
        for (p, field) in cases {
            let e = validate_sampling(&p).unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
    }
}
