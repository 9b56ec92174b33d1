//! The path a step of at most `GEMV_MAX_T` tokens takes ([`StepPath`]) and the rules that
//! decide it ([`PathRules`], pure: tested here without a GPU); `small_step.rs` applies them
//! per step and runs `SmallStepPath::Auto`'s timing.

use crate::graphs::GraphKey;
use crate::options::SmallStepPath;
use crate::params::GEMV_BUCKETS;
use std::collections::HashMap;

/// Most tokens a step may carry to take the gemv kernels (their largest token bucket; the
/// same bound as linear.rs, taken from params.rs so this file imports no sibling).
pub(super) const GEMV_MAX_T: usize = GEMV_BUCKETS[GEMV_BUCKETS.len() - 1];

/// How this step's linears run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct StepPath {
    /// Dense (bf16, fp8) linears through the gemv kernels rather than cuBLAS/cuBLASLt.
    pub dense_gemv: bool,
    /// RMSNorm in the q|k|v and gate|up gemv prologue, residual add in the o and down gemv
    /// epilogue (`Backend::fuses_norm_into_linear`).
    pub fused_norm: bool,
}

impl StepPath {
    /// The name logs and checks print.
    pub(crate) fn label(self) -> &'static str {
        match (self.dense_gemv, self.fused_norm) {
            (false, false) => "cublas",
            (false, true) => "cublas+4-bit gemv fused norm",
            (true, false) => "gemv",
            (true, true) => "gemv+fused norm",
        }
    }
}

/// What `Auto` measured for one graph key.
#[derive(Debug, Clone, Copy)]
pub struct SmallStepChoice {
    pub bucket: usize,
    pub query_len: usize,
    /// The kept path's label ([`StepPath::label`]).
    pub chosen: &'static str,
    /// Mean replay time of the gemv and the cuBLAS graph, milliseconds.
    pub gemv_ms: f64,
    pub cublas_ms: f64,
}

#[derive(Default)]
pub(super) struct SmallSteps {
    /// `Auto`'s choice per graph key, fixed once made (cleared only with the graphs).
    pub choices: HashMap<GraphKey, (StepPath, SmallStepChoice)>,
    /// Variants of the key being captured that are still to capture, in order.
    pub queue: Vec<StepPath>,
    /// Variants captured for the key being measured (their graphs wait in `Graphs`).
    pub captured: Vec<StepPath>,
    /// Some layer weights are int4/nvfp4 (their own gemv bound, `gemv_4bit_max_t`).
    pub four_bit_layers: bool,
}

/// The inputs of the path decision: the options and what the backend holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathRules {
    pub path: SmallStepPath,
    pub graphs_on: bool,
    pub small_linear_max_t: usize,
    pub gemv_4bit_max_t: usize,
    pub fused_norm: bool,
    pub four_bit_layers: bool,
    pub sharded: bool,
}

impl PathRules {
    /// Whether the layer linears of a step of `tokens` take the gemv kernels on `dense_gemv`.
    fn layers_take_gemv(&self, tokens: usize, dense_gemv: bool) -> bool {
        if self.four_bit_layers {
            tokens <= self.gemv_4bit_max_t.min(GEMV_MAX_T)
        } else {
            dense_gemv
        }
    }

    /// The path for `dense_gemv` at `tokens`: dense gemv only up to `small_linear_max_t`,
    /// the norm fused when the layers run gemv, the option allows it, and this backend is
    /// not a tensor-parallel rank.
    pub(crate) fn path_with(&self, tokens: usize, dense_gemv: bool) -> StepPath {
        let dense_gemv =
            dense_gemv && tokens > 0 && tokens <= self.small_linear_max_t.min(GEMV_MAX_T);
        StepPath {
            dense_gemv,
            fused_norm: self.fused_norm
                && !self.sharded
                && tokens > 0
                && self.layers_take_gemv(tokens, dense_gemv),
        }
    }

    /// The variants `Auto` captures and times for a graph key of `tokens` (gemv first), or
    /// None when the key is not measured: not `Auto`, too many tokens, 4-bit layers (they
    /// stay gemv), or a tensor-parallel rank (each rank would time alone and could choose
    /// otherwise).
    pub(crate) fn measured_variants(&self, tokens: usize) -> Option<[StepPath; 2]> {
        let measured = self.path == SmallStepPath::Auto
            && self.graphs_on
            && tokens <= self.small_linear_max_t.min(GEMV_MAX_T)
            && !self.four_bit_layers
            && !self.sharded;
        let v = [self.path_with(tokens, true), self.path_with(tokens, false)];
        (measured && v[0] != v[1]).then_some(v)
    }

    /// The path of a step of `tokens` (padded): forced by the option, or `Auto`'s choice
    /// for its graph key, else cuBLAS (what steps ran before `Auto`).
    pub(crate) fn resolve(&self, tokens: usize, chosen: Option<StepPath>) -> StepPath {
        let dense_gemv = match self.path {
            SmallStepPath::Gemv => true,
            SmallStepPath::Cublas => false,
            SmallStepPath::Auto => chosen.is_some_and(|p| p.dense_gemv),
        };
        self.path_with(tokens, dense_gemv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(path: SmallStepPath) -> PathRules {
        PathRules {
            path,
            graphs_on: true,
            small_linear_max_t: 8,
            gemv_4bit_max_t: 8,
            fused_norm: true,
            four_bit_layers: false,
            sharded: false,
        }
    }
    const CUBLAS: StepPath = StepPath {
        dense_gemv: false,
        fused_norm: false,
    };
    const GEMV_FUSED: StepPath = StepPath {
        dense_gemv: true,
        fused_norm: true,
    };

    #[test]
    fn forced_paths_and_the_token_bound() {
        let g = rules(SmallStepPath::Gemv);
        assert_eq!(g.resolve(1, None), GEMV_FUSED);
        assert_eq!(g.resolve(8, None), GEMV_FUSED);
        assert_eq!(
            g.resolve(9, None),
            CUBLAS,
            "more tokens than the gemv buckets"
        );
        assert_eq!(
            rules(SmallStepPath::Cublas).resolve(1, Some(GEMV_FUSED)),
            CUBLAS
        );
        let unfused = PathRules {
            fused_norm: false,
            ..g
        };
        assert_eq!(
            unfused.resolve(4, None),
            StepPath {
                dense_gemv: true,
                fused_norm: false
            }
        );
        let bounded = PathRules {
            small_linear_max_t: 2,
            ..g
        };
        assert_eq!(bounded.resolve(4, None), CUBLAS);
    }

    #[test]
    fn auto_measures_small_keys_and_follows_the_choice() {
        let a = rules(SmallStepPath::Auto);
        assert_eq!(a.measured_variants(1), Some([GEMV_FUSED, CUBLAS]));
        assert_eq!(a.measured_variants(8), Some([GEMV_FUSED, CUBLAS]));
        assert_eq!(a.measured_variants(9), None);
        // Before a choice (eager steps, the first sighting) cuBLAS; then the choice.
        assert_eq!(a.resolve(1, None), CUBLAS);
        assert_eq!(a.resolve(1, Some(GEMV_FUSED)), GEMV_FUSED);
        assert_eq!(a.resolve(1, Some(CUBLAS)), CUBLAS);
        let off = PathRules {
            graphs_on: false,
            ..a
        };
        assert_eq!(off.measured_variants(1), None);
    }

    #[test]
    fn ranks_never_fuse_nor_measure_and_four_bit_layers_stay_gemv() {
        let ranks = PathRules {
            sharded: true,
            ..rules(SmallStepPath::Auto)
        };
        assert_eq!(ranks.measured_variants(1), None);
        assert!(rules(SmallStepPath::Gemv).path_with(1, true).fused_norm);
        let sharded_gemv = PathRules {
            sharded: true,
            ..rules(SmallStepPath::Gemv)
        };
        assert!(!sharded_gemv.resolve(1, None).fused_norm);
        let four = PathRules {
            four_bit_layers: true,
            ..rules(SmallStepPath::Auto)
        };
        assert_eq!(four.measured_variants(1), None);
        // cuBLAS for the dense lm head, the 4-bit layers on gemv with the norm fused.
        assert_eq!(
            four.resolve(1, None),
            StepPath {
                dense_gemv: false,
                fused_norm: true
            }
        );
        assert!(!four.resolve(9, None).fused_norm);
    }
}
