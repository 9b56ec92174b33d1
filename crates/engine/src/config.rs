//! Engine configuration: scheduler limits, and the speculative decoding settings
//! (`spec_decode::config`) it carries.

use anyhow::bail;

use crate::spec_decode::{SpecConfig, MAX_K};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most sequences running at once.
    pub max_num_seqs: usize,
    /// Token budget of one step (prefill chunks + decode/verify tokens): the hard cap.
    pub max_num_batched_tokens: usize,
    /// Fair steps: size prefill chunks so a step takes about this long, from measured
    /// step times (`step_budget.rs`); None = every step may take the whole cap.
    pub step_time_target: Option<std::time::Duration>,
    /// Context length limit (prompt + output); 0 = the model's own limit.
    pub max_model_len: usize,
    /// Most requests waiting for admission; more get `SubmitError::QueueFull`.
    pub max_waiting: usize,
    pub enable_prefix_caching: bool,
    pub spec: SpecConfig,
    /// Write every completed request's prompt and output ids here (JSONL trace for
    /// `wring drafter-eval`).
    pub trace_out: Option<std::path::PathBuf>,
    /// Write one JSONL line per engine step here (`step_log.rs`).
    pub step_log: Option<std::path::PathBuf>,
    /// Run the runner's cold step shapes before serving (`warm_up.rs`).
    pub warm_up: bool,
    /// Accept requests that carry a recorded output to emit instead of the model's own
    /// tokens (`GenerateRequest::replay_output`): a benchmark mode, off unless asked for.
    pub replay_outputs: bool,
    /// How prefix-cache block hashes are chained, and where cache changes are reported
    /// (`kv_events.rs`).
    pub kv_events: crate::kv_events::KvEventsConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_num_seqs: 32,
            max_num_batched_tokens: 2048,
            step_time_target: None,
            max_model_len: 0,
            max_waiting: 1024,
            enable_prefix_caching: true,
            spec: SpecConfig::default(),
            trace_out: None,
            step_log: None,
            warm_up: false,
            replay_outputs: false,
            kv_events: Default::default(),
        }
    }
}

impl EngineConfig {
    /// Checks limits that do not depend on the model.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.max_num_seqs == 0 {
            bail!("max_num_seqs must be at least 1");
        }
        if self.max_waiting == 0 {
            bail!("max_waiting must be at least 1");
        }
        let min_budget = 1 + if self.spec.enabled() { MAX_K } else { 0 };
        if self.max_num_batched_tokens < min_budget {
            bail!(
                "max_num_batched_tokens ({}) must be at least {min_budget} so a decode or verify step fits",
                self.max_num_batched_tokens
            );
        }
        if self.step_time_target.is_some_and(|t| t.is_zero()) {
            bail!("the step time target must be positive (None turns it off)");
        }
        if self.spec.ngram_min == 0 || self.spec.ngram_min > self.spec.ngram_max {
            bail!("ngram sizes must satisfy 1 <= min <= max");
        }
        let s = &self.spec.suffix;
        if s.max_depth == 0 {
            bail!("suffix max depth must be at least 1");
        }
        if !(s.max_spec_factor.is_finite() && s.max_spec_factor > 0.0) {
            bail!("suffix max spec factor must be a positive number");
        }
        if !(0.0..=1.0).contains(&s.min_token_prob) {
            bail!("suffix min token prob must be within [0, 1]");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_decode::ProposerKind;

    #[test]
    fn config_validation_rejects_impossible_budgets() {
        let mut c = EngineConfig::default();
        c.validate().unwrap();
        c.spec.method = ProposerKind::Suffix;
        c.max_num_batched_tokens = 8;
        assert!(c.validate().is_err());
        c.max_num_batched_tokens = 2048;
        c.max_num_seqs = 0;
        assert!(c.validate().is_err());
    }
}
