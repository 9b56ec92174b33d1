//! Which path a step of at most `GEMV_MAX_T` tokens takes, decided once per step in
//! `begin_step` (the one source of truth the linears, the FP8 producers and
//! `Backend::fuses_norm_into_linear` read; the rules are step_path.rs): cuBLAS or the gemv
//! kernels for dense (bf16, fp8) weights, and on the gemv path whether the RMSNorms and
//! residual adds run inside the gemv launches. With `SmallStepPath::Auto` a captured graph
//! key of few tokens is captured on both paths (and with `PersistentMode::Auto` on the
//! persistent step kernel too), each graph replayed and timed, and the fastest kept for good.

use super::step_path::{PathRules, SmallStepChoice, StepPath, GEMV_MAX_T};
use super::CudaBackend;
use crate::graphs::GraphKey;
use crate::options::{GraphMode, MultiGemvPath, PersistentMode, SmallStepPath};
use crate::params::GEMV_4BIT_LIMIT;
use std::time::Instant;

/// Replays of each candidate graph before timing, and timed replays.
const WARMUP_REPLAYS: usize = 3;
const TIMED_REPLAYS: usize = 20;

impl CudaBackend {
    /// How dense linears of small steps run from now on (graphs and `Auto`'s choices are
    /// dropped when it changes).
    pub fn set_small_step_path(&mut self, path: SmallStepPath) {
        if self.opts.small_step_path != path {
            self.drop_graphs();
        }
        self.opts.small_step_path = path;
    }

    /// How int4/nvfp4 linears of 9 to 64 tokens run from now on (graphs and choices dropped
    /// when it changes); the staged step's path follows at once (checks switch it between
    /// linears of one step).
    pub fn set_multi_gemv_path(&mut self, path: MultiGemvPath) {
        if self.opts.multi_gemv != path {
            self.drop_graphs();
        }
        self.opts.multi_gemv = path;
        self.path = self.resolve_step_path(self.layout.tokens, self.key);
    }

    /// Norm and residual fused into the multi-tile gemv launches too, or not (graphs and
    /// choices dropped when it changes; the staged step's path follows at once).
    pub fn set_multi_fused_norm(&mut self, on: bool) {
        if self.opts.multi_fused_norm != on {
            self.drop_graphs();
        }
        self.opts.multi_fused_norm = on;
        self.path = self.resolve_step_path(self.layout.tokens, self.key);
    }

    /// Captured small steps on the persistent step kernel, or not, or as measured
    /// (`persistent.rs`; graphs and choices dropped when it changes).
    pub fn set_persistent(&mut self, mode: PersistentMode) {
        if self.opts.persistent != mode {
            self.drop_graphs();
        }
        self.opts.persistent = mode;
    }

    /// Norm and residual fused into the gemv launches on the gemv path, or not (graphs and
    /// choices dropped when it changes).
    pub fn set_fused_norm(&mut self, on: bool) {
        if self.opts.fused_norm != on {
            self.drop_graphs();
        }
        self.opts.fused_norm = on;
    }

    /// Drops the captured graphs and the small-step choices made for them.
    pub(super) fn drop_graphs(&mut self) {
        self.graphs.clear();
        self.persistent_reset();
        self.clear_small_step_choices();
    }
    /// Most tokens a step's int4/nvfp4 linears may carry to take the gemv kernels: up to 8
    /// always (within `gemv_4bit_max_t`), up to 64 when the step path takes the multi-tile
    /// builds.
    pub(super) fn four_bit_gemv_max_t(&self) -> usize {
        let limit = if self.path.multi_gemv {
            GEMV_4BIT_LIMIT
        } else {
            GEMV_MAX_T
        };
        self.opts.gemv_4bit_max_t.min(limit)
    }

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
            multi_gemv: self.opts.multi_gemv,
            multi_fused_norm: self.opts.multi_fused_norm,
            persistent: self.opts.persistent,
        }
    }

    fn measured_variants(&self, key: GraphKey) -> Option<Vec<StepPath>> {
        self.path_rules().measured_variants(key.tokens())
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
        if let Some(variants) = self.measured_variants(key) {
            self.path = variants[0];
            // Popped from the end: the rest in order.
            self.small.queue = variants[1..].iter().rev().copied().collect();
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
                let ms = |is: fn(&StepPath) -> bool| {
                    captured
                        .iter()
                        .position(is)
                        .map_or(f64::NAN, |i| times[i] * 1e3)
                };
                let choice = SmallStepChoice {
                    bucket: key.bucket,
                    query_len: key.query_len,
                    chosen: captured[best].label(),
                    gemv_ms: ms(|p| p.is_gemv_variant() && !p.persistent),
                    cublas_ms: ms(|p| !p.is_gemv_variant()),
                    persistent_ms: ms(|p| p.persistent),
                };
                tracing::info!(
                    "small step {} × {}: {} ({:.4} ms gemv, {:.4} ms cuBLAS / tensor-core, {:.4} ms persistent per replay)",
                    key.bucket,
                    key.query_len,
                    choice.chosen,
                    choice.gemv_ms,
                    choice.cublas_ms,
                    choice.persistent_ms
                );
                self.graphs.keep_candidate(key, best);
                self.small.choices.insert(key, (captured[best], choice));
                self.path = captured[best];
            }
            Err(e) => {
                tracing::warn!(
                    "timing the small-step variants of {key:?} failed: {e:#}; the non-gemv (or the non-persistent) path kept"
                );
                let cublas = captured
                    .iter()
                    .position(|p| !p.is_gemv_variant())
                    .or_else(|| captured.iter().position(|p| !p.persistent))
                    .unwrap_or(0);
                self.graphs.keep_candidate(key, cublas);
                let path = captured[cublas];
                let choice = SmallStepChoice {
                    bucket: key.bucket,
                    query_len: key.query_len,
                    chosen: path.label(),
                    gemv_ms: f64::NAN,
                    cublas_ms: f64::NAN,
                    persistent_ms: f64::NAN,
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
