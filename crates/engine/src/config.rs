//! Engine configuration: scheduler limits and speculative decoding settings.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::spec_decode::TimingsCache;

/// Levels of the study's dynamic-K controller.
pub const DYNAMIC_LEVELS: [usize; 3] = [4, 6, 12];
/// Largest K any policy may use.
pub const MAX_K: usize = 32;

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

/// A best-K table written by the tuner: `{"default": K, "workloads": {tag: K}}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KProfile {
    pub default: usize,
    #[serde(default)]
    pub workloads: HashMap<String, usize>,
}

impl KProfile {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading K profile {}", path.display()))?;
        let p: KProfile = serde_json::from_str(&text).with_context(|| {
            format!(
                "parsing K profile {} (expected {{\"default\": K, \"workloads\": {{tag: K}}}})",
                path.display()
            )
        })?;
        for (tag, k) in std::iter::once(("default", &p.default))
            .chain(p.workloads.iter().map(|(t, k)| (t.as_str(), k)))
        {
            if *k > MAX_K {
                bail!(
                    "K profile {}: K {k} for {tag:?} exceeds the maximum {MAX_K}",
                    path.display()
                );
            }
        }
        Ok(p)
    }

    pub fn k_for(&self, workload: Option<&str>) -> usize {
        workload
            .and_then(|w| self.workloads.get(w))
            .copied()
            .unwrap_or(self.default)
    }
}

/// How K (draft slots per sequence per verify step) is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum KPolicy {
    Fixed(usize),
    Profile(KProfile),
    Dynamic,
    Adaptive,
}

impl KPolicy {
    /// Parses `fixed:K | profile:FILE | dynamic | adaptive` (profile files are read now).
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        if let Some(k) = s.strip_prefix("fixed:") {
            let k: usize = k
                .parse()
                .with_context(|| format!("k policy {s:?}: K must be a whole number"))?;
            if k == 0 || k > MAX_K {
                bail!("k policy {s:?}: K must be between 1 and {MAX_K}");
            }
            return Ok(Self::Fixed(k));
        }
        if let Some(f) = s.strip_prefix("profile:") {
            return Ok(Self::Profile(KProfile::load(Path::new(f))?));
        }
        match s {
            "dynamic" => Ok(Self::Dynamic),
            "adaptive" => Ok(Self::Adaptive),
            _ => {
                bail!("unknown k policy {s:?}; expected fixed:K, profile:FILE, dynamic or adaptive")
            }
        }
    }

    /// Parses a per-request override; profile files are server-side only.
    pub fn parse_override(s: &str) -> anyhow::Result<Self> {
        if s.starts_with("profile:") {
            bail!("k_policy {s:?}: profile files can only be set on the server");
        }
        Self::parse(s)
    }

    pub fn label(&self) -> String {
        match self {
            Self::Fixed(k) => format!("fixed:{k}"),
            Self::Profile(_) => "profile".into(),
            Self::Dynamic => "dynamic".into(),
            Self::Adaptive => "adaptive".into(),
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

    #[test]
    fn k_policy_parses_every_form() {
        assert_eq!(KPolicy::parse("fixed:8").unwrap(), KPolicy::Fixed(8));
        assert_eq!(KPolicy::parse("dynamic").unwrap(), KPolicy::Dynamic);
        assert_eq!(KPolicy::parse("adaptive").unwrap(), KPolicy::Adaptive);
        for bad in [
            "fixed:0",
            "fixed:x",
            "fixed:99",
            "best",
            "profile:/nonexistent/x.json",
        ] {
            assert!(KPolicy::parse(bad).is_err(), "{bad} must be rejected");
        }
        assert!(KPolicy::parse_override("profile:x.json").is_err());
    }

    #[test]
    fn profile_falls_back_to_default_for_unknown_tags() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.json");
        std::fs::write(
            &f,
            r#"{"default": 6, "workloads": {"mbpp": 12, "wildchat": 4}}"#,
        )
        .unwrap();
        let KPolicy::Profile(p) = KPolicy::parse(&format!("profile:{}", f.display())).unwrap()
        else {
            panic!("not a profile")
        };
        assert_eq!(p.k_for(Some("mbpp")), 12);
        assert_eq!(p.k_for(Some("other")), 6);
        assert_eq!(p.k_for(None), 6);
        std::fs::write(&f, r#"{"default": 6, "workload": {}}"#).unwrap();
        let e = KPolicy::parse(&format!("profile:{}", f.display())).unwrap_err();
        assert!(format!("{e:#}").contains("workload"), "{e:#}");
    }

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
