//! The path a step of at most `GEMV_MAX_T` tokens (4-bit models: `GEMV_4BIT_LIMIT`) takes
//! ([`StepPath`]) and the rules that decide it ([`PathRules`], pure: tested here without a
//! GPU); `small_step.rs` applies them per step and runs the `Auto` timings.

use crate::graphs::GraphKey;
use crate::options::{MultiGemvPath, PersistentMode, SmallStepPath};
use crate::params::{GEMV_4BIT_LIMIT, GEMV_BUCKETS};
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
    /// int4/nvfp4 linears of 9 to 64 tokens through the multi-tile gemv (gemv_multi.cu)
    /// rather than the tensor-core kernel; steps of at most 8 take the gemv regardless.
    pub multi_gemv: bool,
    /// A captured step's gemv and decode-attention launches run as one launch of the
    /// persistent step kernel (dense gemv with the fused norm only; `persistent.rs`).
    pub persistent: bool,
}

impl StepPath {
    /// The name logs and checks print.
    pub(crate) fn label(self) -> &'static str {
        if self.persistent {
            return "gemv+fused norm+persistent";
        }
        match (self.dense_gemv, self.fused_norm, self.multi_gemv) {
            (_, false, true) => "4-bit multi gemv",
            (_, true, true) => "4-bit multi gemv+fused norm",
            (false, false, false) => "cublas",
            (false, true, false) => "cublas+4-bit gemv fused norm",
            (true, false, false) => "gemv",
            (true, true, false) => "gemv+fused norm",
        }
    }

    /// The gemv side of an `Auto` pair (dense gemv, or the 4-bit multi-tile gemv).
    pub(crate) fn is_gemv_variant(self) -> bool {
        self.dense_gemv || self.multi_gemv
    }
}

/// What `Auto` measured for one graph key.
#[derive(Debug, Clone, Copy)]
pub struct SmallStepChoice {
    pub bucket: usize,
    pub query_len: usize,
    /// The kept path's label ([`StepPath::label`]).
    pub chosen: &'static str,
    /// Mean replay time of the gemv and the other graph (cuBLAS; for 4-bit steps of 9 to 64
    /// tokens the tensor-core kernel), and of the persistent step kernel's, milliseconds
    /// (NaN: not measured).
    pub gemv_ms: f64,
    pub cublas_ms: f64,
    pub persistent_ms: f64,
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
    pub multi_gemv: MultiGemvPath,
    /// The norm fused on multi-tile steps too (`CudaOptions::multi_fused_norm`).
    pub multi_fused_norm: bool,
    pub persistent: PersistentMode,
}

impl PathRules {
    /// Whether the layer linears of a step of `tokens` take the gemv kernels on `dense_gemv`
    /// (`multi_gemv`: 4-bit steps of 9 to 64 tokens, already bounded).
    fn layers_take_gemv(&self, tokens: usize, dense_gemv: bool, multi_gemv: bool) -> bool {
        if self.four_bit_layers {
            tokens <= self.gemv_4bit_max_t.min(GEMV_MAX_T) || multi_gemv
        } else {
            dense_gemv
        }
    }

    /// Whether a 4-bit step of `tokens` is in the multi-tile gemv's range (9 to
    /// `gemv_4bit_max_t`, at most `GEMV_4BIT_LIMIT`).
    fn multi_range(&self, tokens: usize) -> bool {
        self.four_bit_layers
            && tokens > GEMV_MAX_T
            && tokens <= self.gemv_4bit_max_t.min(GEMV_4BIT_LIMIT)
    }

    /// The path for `dense_gemv` at `tokens`: dense gemv only up to `small_linear_max_t`,
    /// the norm fused when the layers run gemv, the option allows it, and this backend is
    /// not a tensor-parallel rank.
    pub(crate) fn path_with(&self, tokens: usize, dense_gemv: bool, multi_gemv: bool) -> StepPath {
        let dense_gemv =
            dense_gemv && tokens > 0 && tokens <= self.small_linear_max_t.min(GEMV_MAX_T);
        let multi_gemv = multi_gemv && self.multi_range(tokens);
        StepPath {
            dense_gemv,
            fused_norm: self.fused_norm
                && !self.sharded
                && tokens > 0
                && self.layers_take_gemv(tokens, dense_gemv, multi_gemv)
                && (!multi_gemv || self.multi_fused_norm),
            multi_gemv,
            persistent: false,
        }
    }

    /// `path` on the persistent step kernel when it may take it: dense gemv with the fused
    /// norm, no 4-bit layers, not a tensor-parallel rank (the backend checks the rest: a
    /// kernel build for the head size, and that the step is being captured).
    fn with_persistent(&self, path: StepPath) -> Option<StepPath> {
        (self.persistent != PersistentMode::Off
            && path.dense_gemv
            && path.fused_norm
            && !path.multi_gemv
            && !self.four_bit_layers
            && !self.sharded)
            .then_some(StepPath {
                persistent: true,
                ..path
            })
    }

    /// The variants `Auto` captures and times for a graph key of `tokens` (gemv first), or
    /// None when the key is not measured: not `Auto`, too many tokens, 4-bit layers (they
    /// stay gemv), or a tensor-parallel rank (each rank would time alone and could choose
    /// otherwise).
    /// 4-bit models measure instead their keys of 9 to 64 tokens: multi-tile gemv against
    /// the tensor-core kernel (`MultiGemvPath::Auto`).
    ///
    /// `PersistentMode::Auto` puts the persistent step kernel in front where the gemv
    /// variant may take it, also when the gemv path is forced (then persistent against
    /// plain gemv); under `On` the gemv variant is the persistent one.
    pub(crate) fn measured_variants(&self, tokens: usize) -> Option<Vec<StepPath>> {
        if self.four_bit_layers {
            let measured = self.multi_gemv == MultiGemvPath::Auto
                && self.graphs_on
                && self.multi_range(tokens)
                && !self.sharded;
            let v = [
                self.path_with(tokens, false, true),
                self.path_with(tokens, false, false),
            ];
            return (measured && v[0] != v[1]).then(|| v.to_vec());
        }
        let usable = self.graphs_on && !self.sharded;
        let gemv = self.path_with(tokens, true, false);
        let mut v = match self.path {
            SmallStepPath::Auto if usable && tokens <= self.small_linear_max_t.min(GEMV_MAX_T) => {
                let cublas = self.path_with(tokens, false, false);
                if gemv == cublas {
                    return None;
                }
                vec![gemv, cublas]
            }
            SmallStepPath::Gemv if usable => vec![gemv],
            _ => return None,
        };
        match (self.persistent, self.with_persistent(gemv)) {
            (PersistentMode::Auto, Some(p)) => v.insert(0, p),
            (PersistentMode::On, Some(p)) => v[0] = p,
            _ => {}
        }
        (v.len() > 1).then_some(v)
    }

    /// The path of a step of `tokens` (padded): forced by the option, or `Auto`'s choice
    /// for its graph key, else cuBLAS (what steps ran before `Auto`).
    pub(crate) fn resolve(&self, tokens: usize, chosen: Option<StepPath>) -> StepPath {
        let dense_gemv = match self.path {
            SmallStepPath::Gemv => true,
            SmallStepPath::Cublas => false,
            SmallStepPath::Auto => chosen.is_some_and(|p| p.dense_gemv),
        };
        let multi_gemv = match self.multi_gemv {
            MultiGemvPath::Gemv => true,
            MultiGemvPath::TensorCore => false,
            MultiGemvPath::Auto => chosen.is_some_and(|p| p.multi_gemv),
        };
        let path = self.path_with(tokens, dense_gemv, multi_gemv);
        let persistent = match self.persistent {
            PersistentMode::Off => false,
            PersistentMode::On => true,
            PersistentMode::Auto => chosen.is_some_and(|p| p.persistent),
        };
        match self.with_persistent(path) {
            Some(p) if persistent => p,
            _ => path,
        }
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
            multi_gemv: MultiGemvPath::Auto,
            multi_fused_norm: false,
            persistent: PersistentMode::Off,
        }
    }
    const CUBLAS: StepPath = StepPath {
        dense_gemv: false,
        fused_norm: false,
        multi_gemv: false,
        persistent: false,
    };
    const GEMV_FUSED: StepPath = StepPath {
        dense_gemv: true,
        fused_norm: true,
        multi_gemv: false,
        persistent: false,
    };
    const PERSISTENT: StepPath = StepPath {
        persistent: true,
        ..GEMV_FUSED
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
                fused_norm: false,
                multi_gemv: false,
                persistent: false,
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
        assert_eq!(a.measured_variants(1), Some(vec![GEMV_FUSED, CUBLAS]));
        assert_eq!(a.measured_variants(8), Some(vec![GEMV_FUSED, CUBLAS]));
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
        assert!(
            rules(SmallStepPath::Gemv)
                .path_with(1, true, false)
                .fused_norm
        );
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
                fused_norm: true,
                multi_gemv: false,
                persistent: false,
            }
        );
        assert!(!four.resolve(9, None).fused_norm);
    }

    #[test]
    fn four_bit_steps_of_9_to_64_tokens_measure_the_multi_tile_gemv() {
        let four = PathRules {
            four_bit_layers: true,
            gemv_4bit_max_t: 64,
            ..rules(SmallStepPath::Auto)
        };
        const MULTI: StepPath = StepPath {
            dense_gemv: false,
            fused_norm: false,
            multi_gemv: true,
            persistent: false,
        };
        assert_eq!(
            four.measured_variants(8),
            None,
            "<= 8: the gemv, unmeasured"
        );
        for t in [9, 16, 32, 64] {
            assert_eq!(four.measured_variants(t), Some(vec![MULTI, CUBLAS]), "{t}");
        }
        assert_eq!(four.measured_variants(65), None);
        // Before a choice the tensor-core kernel; then the choice.
        assert_eq!(four.resolve(32, None), CUBLAS);
        assert_eq!(four.resolve(32, Some(MULTI)), MULTI);
        assert_eq!(
            four.resolve(65, Some(MULTI)),
            CUBLAS,
            "past the largest bucket"
        );
        let forced = PathRules {
            multi_gemv: MultiGemvPath::Gemv,
            ..four
        };
        assert_eq!(forced.measured_variants(32), None);
        assert_eq!(forced.resolve(32, None), MULTI);
        assert!(!forced.resolve(4, None).multi_gemv, "<= 8 unchanged");
        let tc = PathRules {
            multi_gemv: MultiGemvPath::TensorCore,
            ..four
        };
        assert_eq!(tc.resolve(32, Some(MULTI)), CUBLAS);
        let bounded = PathRules {
            gemv_4bit_max_t: 16,
            ..forced
        };
        assert_eq!(bounded.resolve(16, None), MULTI);
        assert_eq!(bounded.resolve(32, None), CUBLAS);
        let dense = rules(SmallStepPath::Auto);
        assert_eq!(dense.measured_variants(16), None, "dense models: unchanged");
        let dense_forced = PathRules {
            multi_gemv: MultiGemvPath::Gemv,
            ..dense
        };
        assert!(!dense_forced.resolve(16, None).multi_gemv);
        // The norm is fused on multi-tile steps only when asked.
        let fused = PathRules {
            multi_fused_norm: true,
            ..forced
        };
        assert!(fused.resolve(16, None).fused_norm);
        assert!(!forced.resolve(16, None).fused_norm);
        assert!(
            forced.resolve(8, None).fused_norm,
            "<= 8 tokens: fused as before"
        );
    }

    #[test]
    fn persistent_auto_measures_the_persistent_kernel_first() {
        let auto = PathRules {
            persistent: PersistentMode::Auto,
            ..rules(SmallStepPath::Auto)
        };
        assert_eq!(
            auto.measured_variants(4),
            Some(vec![PERSISTENT, GEMV_FUSED, CUBLAS])
        );
        assert_eq!(auto.resolve(4, None), CUBLAS, "before a choice");
        assert_eq!(auto.resolve(4, Some(PERSISTENT)), PERSISTENT);
        assert_eq!(auto.resolve(4, Some(GEMV_FUSED)), GEMV_FUSED);
        assert_eq!(
            auto.resolve(9, Some(PERSISTENT)),
            CUBLAS,
            "past the gemv buckets"
        );
        // With the gemv path forced: persistent against plain gemv.
        let gemv = PathRules {
            path: SmallStepPath::Gemv,
            ..auto
        };
        assert_eq!(
            gemv.measured_variants(1),
            Some(vec![PERSISTENT, GEMV_FUSED])
        );
        assert_eq!(gemv.resolve(1, None), GEMV_FUSED);
        // Without the fused norm, on ranks or with cuBLAS forced: never.
        for no in [
            PathRules {
                fused_norm: false,
                ..gemv
            },
            PathRules {
                sharded: true,
                ..gemv
            },
            PathRules {
                path: SmallStepPath::Cublas,
                ..auto
            },
        ] {
            assert_eq!(no.measured_variants(1), None, "{no:?}");
            assert!(!no.resolve(1, Some(PERSISTENT)).persistent, "{no:?}");
        }
        let four = PathRules {
            four_bit_layers: true,
            ..gemv
        };
        assert!(
            !four.resolve(1, Some(PERSISTENT)).persistent,
            "4-bit layers"
        );
        // On: every step that may, unmeasured; under Auto's pair the gemv side is it.
        let on = PathRules {
            persistent: PersistentMode::On,
            ..gemv
        };
        assert_eq!(on.measured_variants(1), None);
        assert_eq!(on.resolve(1, None), PERSISTENT);
        let on_auto = PathRules {
            path: SmallStepPath::Auto,
            ..on
        };
        assert_eq!(on_auto.measured_variants(2), Some(vec![PERSISTENT, CUBLAS]));
        assert_eq!(on_auto.resolve(2, Some(PERSISTENT)), PERSISTENT);
    }
}
