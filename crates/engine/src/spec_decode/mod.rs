//! Speculative decoding (vLLM's module name): everything about one step's
//! speculation. The engine loop asks [`SpecDecoder::plan`] for the step's drafts
//! ([`StepDrafts`]: `[B][K]` tokens plus `valid_len[B]`), feeds them to the model,
//! checks each sequence's rows with [`verify`] and reports the outcome to
//! [`SpecDecoder::record`].
//!
//! - `planner.rs`: the one planner (proposals, K per policy, padding).
//! - `drafts.rs`: [`StepDrafts`], the drafts as the verify step carries them.
//! - `verifier.rs`: one verifier for greedy ids and for logit rows.
//! - `stats.rs`: acceptance statistics.
//! - `config.rs`: the settings ([`SpecConfig`]).
//! - `k_policy/`: fixed, profile, dynamic and adaptive K (cost model, calibration).
//! - `proposer.rs`, `suffix_proposer.rs`: the drafters.

mod config;
pub(crate) mod drafts;
pub mod k_policy;
mod planner;
pub mod proposer;
mod stats;
pub mod suffix_proposer;
pub mod verifier;

pub use config::{ProposerKind, SpecConfig, SuffixParams};
pub use drafts::{StepDrafts, PAD_TOKEN};
pub use k_policy::{
    AdaptiveK, DraftSeq, DynamicK, KPolicies, KPolicy, KProfile, ScoreCalibration, StepCostModel,
    StepLoad, StepShape, TimingsCache, FALLBACK_KS, MAX_K,
};
pub use planner::{DraftAsk, StepBudget};
pub use proposer::{DraftProposal, NgramProposer, NoProposer, Proposer};
pub use stats::{AcceptanceStats, PositionAcceptance};
pub use suffix_proposer::SuffixProposer;
pub use verifier::{verify, verify_drafts, RejectionRule, StepOutput, TargetRows, VerifyOutcome};

use wring_model::runner::ModelRunner;

use crate::api::Usage;
use crate::block_manager::BlockManager;
use crate::metrics::MetricsSnapshot;

/// The speculation state the engine keeps across steps: the drafter, the K
/// policies and what verification has taught them.
pub struct SpecDecoder {
    proposer: Box<dyn Proposer>,
    pub policies: KPolicies,
    pub stats: AcceptanceStats,
    pad: bool,
    /// The drafter's time per sequence asked (a slow average): host time the step
    /// waits for, which a draft must earn back.
    draft_secs_per_seq: f64,
}

impl SpecDecoder {
    /// `captured_query_lens`: the runner's captured verify shapes
    /// (`ModelRunner::captured_query_lens`); the adaptive policy's K candidates.
    pub fn new(
        cfg: &SpecConfig,
        vocab: usize,
        captured_query_lens: Option<&[usize]>,
    ) -> anyhow::Result<Self> {
        let proposer: Box<dyn Proposer> = match cfg.method {
            ProposerKind::None => Box::new(NoProposer),
            ProposerKind::Ngram => Box::new(NgramProposer::new(cfg.ngram_min, cfg.ngram_max)),
            ProposerKind::Suffix => Box::new(SuffixProposer::new(&cfg.suffix, vocab)?),
        };
        let policies = KPolicies::new(captured_query_lens);
        let max_k = policies
            .max_k(&cfg.k_policy)
            .max(policies.max_k(&KPolicy::Adaptive));
        Ok(Self {
            proposer,
            stats: AcceptanceStats::new(max_k),
            policies,
            pad: cfg.pad,
            draft_secs_per_seq: 0.0,
        })
    }

    /// The drafter: told about prompts, emitted tokens and finished requests.
    pub fn proposer(&mut self) -> &mut dyn Proposer {
        self.proposer.as_mut()
    }

    /// Whether the adaptive policy has its step-cost model.
    pub fn adaptive_ready(&self) -> bool {
        self.policies.cost.is_some()
    }

    /// Times verify steps on the runner and fits the adaptive policy's cost model; with a
    /// `cache`, from the timings stored there for this configuration when there are any
    /// (and the new ones stored when not). True when the runner ran probe steps.
    pub fn calibrate(
        &mut self,
        runner: &mut dyn ModelRunner,
        blocks: &mut BlockManager,
        max_num_seqs: usize,
        cache: Option<&TimingsCache>,
    ) -> anyhow::Result<bool> {
        let t = std::time::Instant::now();
        let candidates = self.policies.adaptive.candidates();
        // A runner that replays one graph per padded shape has step times that are not
        // linear in rows: every candidate K is timed, and padded steps are priced by
        // their measured shape (`PaddedSteps`).
        let ks = if self.pad && runner.captured_query_lens().is_some() {
            candidates.to_vec()
        } else {
            k_policy::calibrate::calibration_ks(candidates)
        };
        // Everything else a step's time depends on: the caller's key says the model and
        // the machine.
        let key = cache.map(|c| {
            format!(
                "{}|device={}|max_num_seqs={max_num_seqs}|ks={ks:?}|wring={}",
                c.key,
                runner.device_name(),
                env!("CARGO_PKG_VERSION")
            )
        });
        let cached = cache
            .zip(key.as_deref())
            .filter(|(c, _)| !c.refresh)
            .and_then(|(c, k)| TimingsCache::load(&c.path, k));
        let probed = cached.is_none();
        let points = match cached {
            Some(p) => p,
            None => {
                let p = k_policy::calibrate::measure_step_costs(runner, blocks, max_num_seqs, &ks)?;
                if let (Some(c), Some(k)) = (cache, &key) {
                    if let Err(e) = TimingsCache::store(&c.path, k, &p) {
                        tracing::warn!(
                            "could not keep the step timings in {}: {e:#}",
                            c.path.display()
                        );
                    }
                }
                p
            }
        };
        let model = StepCostModel::fit_calibration(&points);
        let how = match (cache, probed) {
            (None, _) => "measured".to_string(),
            (Some(c), true) => format!("measured (kept in {})", c.path.display()),
            (Some(c), false) => format!(
                "from the timings kept in {} (--recalibrate measures again)",
                c.path.display()
            ),
        };
        tracing::info!(
            "adaptive K: candidates {:?}; step-cost model {how} in {:.1}s: {:?} (fixed s, s/seq, s/row, s/logit row, s/attended pair)",
            self.policies.adaptive.candidates(),
            t.elapsed().as_secs_f64(),
            model.coefficients()
        );
        self.policies.cost = Some(model);
        Ok(probed)
    }

    /// The cost model's seconds for a step of this shape (None before calibration).
    pub fn predict_step(&self, shape: StepShape) -> Option<f64> {
        self.policies.cost.as_ref().map(|c| c.predict(shape))
    }

    /// A real step's time, for the cost model.
    pub fn observe_step(&mut self, shape: StepShape, secs: f64) {
        if let Some(cost) = &mut self.policies.cost {
            cost.observe(shape, secs);
        }
    }

    /// Row b of `drafts` was verified with `accepted` draft tokens accepted.
    pub fn record(
        &mut self,
        drafts: &StepDrafts,
        b: usize,
        accepted: usize,
        usage: &mut Usage,
        metrics: &mut MetricsSnapshot,
    ) {
        self.stats.record(drafts, b, accepted, usage, metrics);
    }

    /// After every row of the step is verified: feeds the dynamic controller.
    pub fn end_step(&mut self) {
        if let Some(mean) = self.stats.take_dynamic_mean() {
            self.policies.dynamic.observe(mean);
        }
    }
}
