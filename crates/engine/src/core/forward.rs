//! Running the model for a step: the argmax-ids path when every sampled row only needs its
//! argmax (greedy, no logprobs, no grammar), else whole logit rows; step time recorded for
//! the K policy and the metrics.

use std::time::Instant;

use wring_model::runner::{RowMasks, StepInput};

use super::constraints::{row_masks, MaskJob};
use super::EngineCore;
use crate::spec_decode::{StepOutput, StepShape};
use crate::step_budget::StepWork;
use crate::step_input::StepRow;

impl EngineCore {
    /// Whether every row that gets logits takes their raw argmax (greedy, no
    /// penalties, no logprobs, no grammar): then the step asks for ids only.
    pub(super) fn ids_only(&self, rows: &[StepRow]) -> bool {
        rows.iter().filter(|r| r.completes).all(|r| {
            self.requests
                .get(&r.id)
                .is_none_or(|s| s.logprobs.is_none() && s.sampler.argmax_only() && !s.constrained)
        })
    }

    /// Whether every row that gets logits takes the argmax of its (possibly masked) row:
    /// greedy, no penalties, no logprobs. With a grammar among them the step runs
    /// [`EngineCore::run_model_masked`].
    pub(super) fn greedy_rows(&self, rows: &[StepRow]) -> bool {
        rows.iter().filter(|r| r.completes).all(|r| {
            self.requests
                .get(&r.id)
                .is_none_or(|s| s.logprobs.is_none() && s.sampler.argmax_only())
        })
    }

    /// Runs a greedy step with constrained rows: the grammar masks are computed on a
    /// thread while the model runs, handed to the runner once the step is enqueued, and
    /// applied inside its argmax (on the device where it can), so only ids come back.
    /// A runner without that path runs `forward`; the rows are then masked on the host
    /// (`mask_logits`). Returns the step's output and the mask jobs.
    pub(super) fn run_model_masked(
        &mut self,
        input: &StepInput,
        rows: &[StepRow],
        jobs: Vec<MaskJob>,
        work: StepWork,
    ) -> (Result<StepOutput, String>, Vec<MaskJob>) {
        let logit_rows = input.logit_rows.len();
        let vocab = self.vocab;
        let mut joined: Option<Vec<MaskJob>> = None;
        let out = std::thread::scope(|s| {
            let mut pending = Some(s.spawn(move || EngineCore::prepare_masks(jobs)));
            let mut masks = || -> anyhow::Result<RowMasks> {
                let jobs = match pending.take() {
                    Some(h) => h.join().unwrap_or_default(),
                    None => anyhow::bail!("the step's masks were asked for twice"),
                };
                let m = row_masks(rows, &jobs, logit_rows, vocab);
                joined = Some(jobs);
                Ok(m)
            };
            let t0 = Instant::now();
            let result = self.runner.forward_greedy_masked(input, &mut masks);
            self.metrics.constrained_steps += 1;
            let out = match result {
                Ok(Some(ids)) => {
                    self.metrics.constrained_steps_masked_argmax += 1;
                    Ok(StepOutput::Ids(ids))
                }
                Ok(None) => self.runner.forward(input).map(StepOutput::Logits),
                Err(e) => Err(e),
            };
            if let Some(h) = pending.take() {
                joined = Some(h.join().unwrap_or_default());
            }
            self.finish_model_step(input, rows, work, t0, out)
        });
        (out, joined.unwrap_or_default())
    }

    /// Runs the step. With `ids_only` only the rows' argmax ids come back (taken
    /// on the device where it can); otherwise, or when the runner has no such
    /// path, whole rows.
    pub(super) fn run_model(
        &mut self,
        input: &StepInput,
        rows: &[StepRow],
        ids_only: bool,
        work: StepWork,
    ) -> Result<StepOutput, String> {
        let t0 = Instant::now();
        let result = if ids_only && !input.logit_rows.is_empty() {
            match self.runner.forward_greedy(input) {
                Ok(Some(ids)) => Ok(StepOutput::Ids(ids)),
                Ok(None) => self.runner.forward(input).map(StepOutput::Logits),
                Err(e) => Err(e),
            }
        } else {
            self.runner.forward(input).map(StepOutput::Logits)
        };
        self.finish_model_step(input, rows, work, t0, result)
    }

    /// Records a model step's time (for the K policy and the metrics) and checks its
    /// output's shape.
    fn finish_model_step(
        &mut self,
        input: &StepInput,
        rows: &[StepRow],
        work: StepWork,
        t0: Instant,
        result: anyhow::Result<StepOutput>,
    ) -> Result<StepOutput, String> {
        let out = result.map_err(|e| {
            tracing::error!("forward step failed: {e:#}");
            format!("model step failed: {e:#}")
        })?;
        let secs = t0.elapsed().as_secs_f64();
        let shape = StepShape {
            seqs: rows.len() as f64,
            rows: input.tokens.len() as f64,
            logit_rows: input.logit_rows.len() as f64,
            attended: work.attended,
        };
        tracing::trace!(
            target: "wring_engine::step_cost",
            "step seqs {} rows {} logit_rows {} attended {} secs {:.5} predicted {:.5}",
            shape.seqs,
            shape.rows,
            shape.logit_rows,
            shape.attended,
            secs,
            self.spec.predict_step(shape).unwrap_or(f64::NAN)
        );
        self.spec.observe_step(shape, secs);
        self.metrics.steps += 1;
        self.metrics.step_model_seconds += secs;
        out.check_shape(input.logit_rows.len(), self.vocab)?;
        Ok(out)
    }
}
