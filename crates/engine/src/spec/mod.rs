//! Speculative decoding: proposers (drafters), verification, K policies and the
//! step-cost model behind the adaptive policy.

pub mod cost_model;
pub mod k_policy;
pub mod proposer;
pub mod suffix_proposer;
pub mod verify;

pub use cost_model::StepCostModel;
pub use k_policy::{AdaptiveK, DynamicK, PositionAcceptance, ScoreCalibration};
pub use proposer::{DraftProposal, NgramProposer, NoProposer, Proposer};
pub use suffix_proposer::SuffixProposer;
pub use verify::{verify_drafts, RejectionRule, VerifyOutcome};
