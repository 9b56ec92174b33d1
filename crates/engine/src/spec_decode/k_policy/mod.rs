//! K policies: how many draft slots a sequence gets this step. Fixed and profile K
//! are looked up; the study's dynamic controller follows an EMA of acceptance; the
//! adaptive controller prices every candidate K with the step-cost model
//! (`cost_model.rs`, measured at start-up by `calibrate.rs`, kept on disk by
//! `timings_cache.rs`) and calibrated acceptance estimates (`calibration.rs`).

mod adaptive;
pub(crate) mod calibrate;
mod calibration;
mod cost_model;
mod dynamic;
mod policy;
mod timings_cache;

pub use adaptive::{AdaptiveK, DraftScores, DraftSeq, StepLoad, FALLBACK_KS};
pub use calibration::ScoreCalibration;
pub use cost_model::{StepCostModel, StepShape};
pub use dynamic::DynamicK;
pub use policy::{KPolicy, KProfile, MAX_K};
pub use timings_cache::TimingsCache;

/// The runtime state behind the K policies (fixed and profile K need none).
#[derive(Debug, Clone)]
pub struct KPolicies {
    pub dynamic: DynamicK,
    pub adaptive: AdaptiveK,
    /// Present when the adaptive policy is available (measured at start-up).
    pub cost: Option<StepCostModel>,
}

impl KPolicies {
    /// `captured_query_lens`: the runner's captured verify shapes (None: no graphs).
    pub fn new(captured_query_lens: Option<&[usize]>) -> Self {
        Self {
            dynamic: DynamicK::default(),
            adaptive: AdaptiveK::from_query_lens(captured_query_lens),
            cost: None,
        }
    }

    /// The K a request's policy asks for now (for the adaptive policy: the most it
    /// may pick, so the drafter proposes enough to choose from).
    pub fn wanted_k(&self, policy: &KPolicy, workload: Option<&str>) -> usize {
        match policy {
            KPolicy::Fixed(k) => *k,
            KPolicy::Profile(p) => p.k_for(workload),
            KPolicy::Dynamic => self.dynamic.k(),
            KPolicy::Adaptive => self.adaptive.max_k(),
        }
    }

    /// The largest K `policy` can ask for.
    pub fn max_k(&self, policy: &KPolicy) -> usize {
        match policy {
            KPolicy::Fixed(k) => *k,
            KPolicy::Profile(p) => p.workloads.values().copied().fold(p.default, usize::max),
            KPolicy::Dynamic => self.dynamic.max_k(),
            KPolicy::Adaptive => self.adaptive.max_k(),
        }
    }
}
