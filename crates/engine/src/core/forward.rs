//! Running the model for a step: the argmax-ids path when every sampled row only needs its
//! argmax (greedy, no logprobs, no grammar), else whole logit rows; step time recorded for
//! the K policy and the metrics.

use std::time::Instant;

use wring_model::runner::StepInput;

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
