//! Which path a step of at most `GEMV_MAX_T` tokens takes, decided once per step in
//! `begin_step` (the one source of truth the linears, the FP8 producers and
//! `Backend::fuses_norm_into_linear` read): cuBLAS or the gemv kernels for dense (bf16, fp8)
//! weights, and on the gemv path whether the RMSNorms and residual adds run inside the gemv
//! launches. With `SmallStepPath::Auto` a captured graph key of few tokens is captured on
//! both paths, each graph replayed and timed, and the faster kept for good.

use super::linear::GEMV_MAX_T;
use super::CudaBackend;
use crate::graphs::GraphKey;
use crate::options::{GraphMode, SmallStepPath};
use std::collections::HashMap;
use std::time::Instant;

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

/// Replays of each candidate graph before timing, and timed replays.
const WARMUP_REPLAYS: usize = 3;
const TIMED_REPLAYS: usize = 20;

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
    choices: HashMap<GraphKey, (StepPath, SmallStepChoice)>,
    /// Variants of the key being captured that are still to capture, in order.
    queue: Vec<StepPath>,
    /// Variants captured for the key being measured (their graphs wait in `Graphs`).
    captured: Vec<StepPath>,
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

impl CudaBackend {
    /// Most tokens a step's dense linears may carry to take the gemv kernels (0: none).
    pub(super) fn dense_gemv_max_t(&self) -> usize {
        if self.path.dense_gemv {
            self.opts.small_linear_max_t.min(GEMV_MAX_T)
        } else {
            0
        }
    }

    fn path_rules(&self) -> PathRules {
        PathRules {
            path: self.opts.small_step_path,
            graphs_on: self.opts.graphs == GraphMode::On,
            small_linear_max_t: self.opts.small_linear_max_t,
            gemv_4bit_max_t: self.opts.gemv_4bit_max_t,
            fused_norm: self.opts.fused_norm,
            four_bit_layers: self.small.four_bit_layers,
            sharded: self.group.is_some(),
        }
    }

    fn measured_variants(&self, key: GraphKey) -> Option<[StepPath; 2]> {
        self.path_rules()
            .measured_variants(key.bucket * key.query_len)
    }

    /// The path of a step of `tokens` (padded) with graph key `key` ([`PathRules::resolve`]).
    pub(super) fn resolve_step_path(&self, tokens: usize, key: Option<GraphKey>) -> StepPath {
        let chosen = key.and_then(|k| self.small.choices.get(&k)).map(|c| c.0);
        self.path_rules().resolve(tokens, chosen)
    }

    /// Called when a capture of the step's key starts: the first variant to capture when
    /// `Auto` measures this key (the rest queued), else the step's resolved path.
    pub(super) fn begin_variant_captures(&mut self) {
        let Some(key) = self.key else { return };
        if !self.small.captured.is_empty() || !self.small.queue.is_empty() {
            // A later variant of the same key: `capture_again` set the path already.
            return;
        }
        if let Some([first, second]) = self.measured_variants(key) {
            self.path = first;
            self.small.queue = vec![second];
        }
    }

    /// `Backend::capture_again` after a successful capture: the next variant when one is
    /// queued, else (after several) the timing and the choice.
    pub(super) fn capture_again_op(&mut self) -> bool {
        let Some(key) = self.key else { return false };
        if self.small.queue.is_empty() && self.small.captured.is_empty() {
            return false; // a key that is not measured: one capture
        }
        self.small.captured.push(self.path);
        self.graphs
            .set_candidate(key, self.small.captured.len() - 1);
        if let Some(next) = self.small.queue.pop() {
            self.path = next;
            return true;
        }
        let captured = std::mem::take(&mut self.small.captured);
        match self.time_candidates(key, captured.len()) {
            Ok(times) => {
                let best = (0..times.len())
                    .min_by(|&a, &b| times[a].total_cmp(&times[b]))
                    .unwrap_or(0);
                let ms = |want: bool| {
                    captured
                        .iter()
                        .position(|p| p.dense_gemv == want)
                        .map_or(f64::NAN, |i| times[i] * 1e3)
                };
                let choice = SmallStepChoice {
                    bucket: key.bucket,
                    query_len: key.query_len,
                    chosen: captured[best].label(),
                    gemv_ms: ms(true),
                    cublas_ms: ms(false),
                };
                tracing::info!(
                    "small step {} × {}: {} ({:.4} ms gemv, {:.4} ms cuBLAS per replay)",
                    key.bucket,
                    key.query_len,
                    choice.chosen,
                    choice.gemv_ms,
                    choice.cublas_ms
                );
                self.graphs.keep_candidate(key, best);
                self.small.choices.insert(key, (captured[best], choice));
                self.path = captured[best];
            }
            Err(e) => {
                tracing::warn!(
                    "timing the small-step variants of {key:?} failed: {e:#}; cuBLAS kept"
                );
                let cublas = captured.iter().position(|p| !p.dense_gemv).unwrap_or(0);
                self.graphs.keep_candidate(key, cublas);
                let path = captured[cublas];
                let choice = SmallStepChoice {
                    bucket: key.bucket,
                    query_len: key.query_len,
                    chosen: path.label(),
                    gemv_ms: f64::NAN,
                    cublas_ms: f64::NAN,
                };
                self.small.choices.insert(key, (path, choice));
                self.path = path;
            }
        }
        false
    }

    /// Mean replay seconds of each candidate graph of `key` (warmed up, host-timed over
    /// synchronised back-to-back replays). Replays of one step are idempotent: the same
    /// inputs, the same K/V slots, the same values; the kept graph is replayed last.
    fn time_candidates(&mut self, key: GraphKey, n: usize) -> anyhow::Result<Vec<f64>> {
        let mut times = vec![f64::INFINITY; n];
        for (i, t) in times.iter_mut().enumerate() {
            for _ in 0..WARMUP_REPLAYS {
                self.graphs.launch_candidate(key, i)?;
            }
            self.sync()?;
            let t0 = Instant::now();
            for _ in 0..TIMED_REPLAYS {
                self.graphs.launch_candidate(key, i)?;
            }
            self.sync()?;
            *t = t0.elapsed().as_secs_f64() / TIMED_REPLAYS as f64;
        }
        Ok(times)
    }

    /// A capture of several variants failed part-way: drop what was captured, run the
    /// step (and the key, eagerly from now on) on the resolved path.
    pub(super) fn abandon_variant_captures(&mut self) {
        self.small.queue.clear();
        self.small.captured.clear();
        if let Some(key) = self.key {
            self.graphs.drop_candidates(key);
        }
        self.path = self.resolve_step_path(self.layout.tokens, self.key);
    }

    /// A step begins: variants of an earlier step's capture that never finished (an error
    /// left the loop) are dropped.
    pub(super) fn clear_pending_variants(&mut self) {
        if self.small.queue.is_empty() && self.small.captured.is_empty() {
            return;
        }
        self.abandon_variant_captures();
    }

    /// `Auto`'s choices so far, by graph key.
    pub fn small_step_choices(&self) -> Vec<SmallStepChoice> {
        let mut v: Vec<SmallStepChoice> = self.small.choices.values().map(|c| c.1).collect();
        v.sort_by_key(|c| (c.bucket, c.query_len));
        v
    }

    /// The label of the path the staged step takes ([`StepPath::label`]).
    pub fn step_path_label(&self) -> &'static str {
        self.path.label()
    }

    /// Forgets `Auto`'s choices (with the graphs they were made for).
    pub(super) fn clear_small_step_choices(&mut self) {
        self.small.choices.clear();
        self.small.queue.clear();
        self.small.captured.clear();
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
