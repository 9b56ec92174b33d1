//! One request's state in the engine loop: its sampler, detokeniser and stop rules,
//! and how emitted tokens are appended under them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use wring_model::{IncrementalDecoder, Tokenizer};

use crate::api::{EngineEvent, FinishReason, GenerateRequest, Usage};
use crate::constraint::Constraint;
use crate::sampling::RequestSampler;
use crate::sequence::Sequence;
use crate::spec_decode::KPolicy;
use crate::stop::{StopOutcome, StopStrings};

pub(crate) struct RequestState {
    pub request_id: String,
    pub sampler: RequestSampler,
    decoder: IncrementalDecoder,
    stops: StopStrings,
    stop_ids: HashSet<u32>,
    pub max_tokens: usize,
    pub logprobs: Option<u32>,
    pub events: UnboundedSender<EngineEvent>,
    pub arrival: Instant,
    pub first_token_at: Option<Instant>,
    pub usage: Usage,
    pub k_policy: KPolicy,
    pub workload: Option<String>,
    /// Counted as admitted (left the waiting queue for a first step).
    pub admitted: bool,
    /// Structured output (None: unconstrained, no grammar work at all). Taken
    /// out while a step computes its masks beside the forward.
    pub constraint: Option<Constraint>,
    /// Whether the request has a grammar (stays true while `constraint` is out).
    pub constrained: bool,
    /// The recorded output this request emits instead of the model's choices
    /// (`GenerateRequest::replay_output`).
    pub replay: Option<Vec<u32>>,
}

/// What appending a step's tokens produced.
pub(crate) struct Appended {
    /// Tokens kept (up to and including the one that stopped the request).
    pub kept: Vec<u32>,
    /// New text to stream.
    pub text: String,
    pub finish: Option<FinishReason>,
}

impl RequestState {
    pub fn new(
        req: &GenerateRequest,
        k_policy: KPolicy,
        events: UnboundedSender<EngineEvent>,
        eos: &[u32],
        tokenizer: Arc<Tokenizer>,
    ) -> Self {
        let mut stop_ids: HashSet<u32> = req.stop_token_ids.iter().copied().collect();
        if !req.ignore_eos {
            stop_ids.extend(eos.iter().copied());
        }
        Self {
            request_id: req.request_id.clone(),
            sampler: RequestSampler::new(req.sampling.clone(), &req.prompt_ids)
                .with_stop_ids(stop_ids.iter().copied()),
            decoder: IncrementalDecoder::new(tokenizer, &req.prompt_ids, true),
            stops: StopStrings::new(&req.stop_strings),
            stop_ids,
            max_tokens: req.max_tokens as usize,
            logprobs: req.sampling.logprobs,
            events,
            arrival: Instant::now(),
            first_token_at: None,
            usage: Usage {
                prompt_tokens: req.prompt_ids.len() as u32,
                ..Default::default()
            },
            k_policy,
            workload: req.spec.workload.clone(),
            admitted: false,
            constrained: req.grammar.is_some(),
            constraint: req
                .grammar
                .clone()
                .map(|g| Constraint::new(g, req.grammar_start)),
            replay: req.replay_output.clone(),
        }
    }

    /// Appends `tokens` to `seq`, applying stop rules token by token: a stop id, a
    /// stop string, `max_tokens` or the context limit ends the request there.
    pub fn append(
        &mut self,
        seq: &mut Sequence,
        tokens: Vec<u32>,
        max_model_len: usize,
    ) -> Appended {
        let mut kept = Vec::with_capacity(tokens.len());
        let mut text = String::new();
        let mut finish = None;
        let mut stopped_by_string = false;
        for t in tokens {
            seq.tokens.push(t);
            kept.push(t);
            if self.stop_ids.contains(&t) {
                finish = Some(FinishReason::Stop);
                break;
            }
            let piece = self.decoder.push(t);
            match self.stops.push(&piece) {
                StopOutcome::Continue(s) => text.push_str(&s),
                StopOutcome::Stopped(s) => {
                    text.push_str(&s);
                    finish = Some(FinishReason::Stop);
                    stopped_by_string = true;
                    break;
                }
            }
            if seq.num_output() >= self.max_tokens || seq.len() >= max_model_len {
                finish = Some(FinishReason::Length);
                break;
            }
            if self
                .replay
                .as_ref()
                .is_some_and(|r| seq.num_output() >= r.len())
            {
                // The recording ended here, as the recorded request did.
                finish = Some(FinishReason::Stop);
                break;
            }
        }
        if finish.is_some() && !stopped_by_string {
            // Release what the decoder and the stop-string guard still hold.
            let rest = self.decoder.flush();
            match self.stops.push(&rest) {
                StopOutcome::Continue(s) => {
                    text.push_str(&s);
                    text.push_str(&self.stops.flush());
                }
                StopOutcome::Stopped(s) => {
                    text.push_str(&s);
                    finish = Some(FinishReason::Stop);
                }
            }
        }
        Appended { kept, text, finish }
    }
}
