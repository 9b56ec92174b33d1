//! The engine loop: owns the runner, the scheduler, the proposer and every
//! request's state; one iteration plans a step, drafts, runs the model, verifies
//! or samples, detokenises, applies stop rules and streams events.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use wring_model::runner::{ModelRunner, SeqInput, StepInput};
use wring_model::{IncrementalDecoder, Tokenizer};

use crate::api::{EngineEvent, FinishReason, TokenLogprob, Usage};
use crate::block_manager::BlockManager;
use crate::config::{EngineConfig, KPolicy, ProposerKind, CAPTURED_KS};
use crate::handle::{Command, Shared, Submission};
use crate::metrics::MetricsSnapshot;
use crate::sampling::{token_logprobs, RequestSampler};
use crate::scheduler::{Scheduler, SchedulerLimits};
use crate::sequence::Sequence;
use crate::spec::{
    verify_drafts, AdaptiveK, DynamicK, NgramProposer, NoProposer, PositionAcceptance, Proposer,
    RejectionRule, ScoreCalibration, StepCostModel, SuffixProposer,
};
use crate::stop::{StopOutcome, StopStrings};

/// What one forward step returned: whole logit rows, or only their argmax ids.
enum StepOutput {
    Logits(wring_model::runner::Logits),
    Ids(Vec<u32>),
}

/// Token id written into pad slots; its value never matters (pads are rejected
/// by construction).
const PAD_TOKEN: u32 = 0;

struct RequestState {
    request_id: String,
    sampler: RequestSampler,
    decoder: IncrementalDecoder,
    stops: StopStrings,
    stop_ids: HashSet<u32>,
    max_tokens: usize,
    logprobs: Option<u32>,
    events: UnboundedSender<EngineEvent>,
    arrival: Instant,
    first_token_at: Option<Instant>,
    usage: Usage,
    k_policy: KPolicy,
    workload: Option<String>,
    admitted: bool,
}

/// This step's draft for one decoding sequence.
struct SeqDraft {
    /// Real draft tokens (`valid_len` of them).
    tokens: Vec<u32>,
    /// Query slots after the last token: K when padding, else `tokens.len()`.
    slots: usize,
    dynamic: bool,
    /// The drafter's own running probabilities for `tokens`, when it gives them.
    scores: Option<Vec<f32>>,
}

struct SpecState {
    dynamic: DynamicK,
    adaptive: AdaptiveK,
    /// Present when the adaptive policy is available (calibrated at start-up).
    cost: Option<StepCostModel>,
    acceptance: PositionAcceptance,
    /// Drafter scores → measured acceptance, learned from every verify step.
    calibration: ScoreCalibration,
}

pub(crate) struct EngineCore {
    runner: Box<dyn ModelRunner>,
    sched: Scheduler,
    requests: HashMap<u64, RequestState>,
    proposer: Box<dyn Proposer>,
    spec: SpecState,
    cfg: EngineConfig,
    eos: Vec<u32>,
    tokenizer: Arc<Tokenizer>,
    metrics: MetricsSnapshot,
    trace: Option<crate::trace::TraceWriter>,
    max_model_len: usize,
    vocab: usize,
    drain_deadline: Option<Instant>,
}

impl EngineCore {
    /// Returns the core and the effective context length.
    pub fn new(
        runner: Box<dyn ModelRunner>,
        cfg: EngineConfig,
        tokenizer: Arc<Tokenizer>,
        eos: Vec<u32>,
        model_max_len: usize,
    ) -> anyhow::Result<(Self, usize)> {
        let block_size = runner.block_size();
        let num_blocks = runner.num_blocks();
        if num_blocks == 0 || block_size == 0 {
            anyhow::bail!("the runner has no KV blocks (num_blocks {num_blocks}, block_size {block_size}); raise the KV cache budget");
        }
        let pool_tokens = num_blocks * block_size;
        let mut max_model_len = model_max_len;
        if cfg.max_model_len > 0 {
            if cfg.max_model_len > model_max_len {
                anyhow::bail!(
                    "max_model_len {} exceeds the model's context length {model_max_len}",
                    cfg.max_model_len
                );
            }
            max_model_len = cfg.max_model_len;
        }
        if max_model_len > pool_tokens {
            tracing::warn!(
                "KV pool holds {pool_tokens} tokens; limiting the context length from {max_model_len} to that"
            );
            max_model_len = pool_tokens;
        }
        let vocab = runner.vocab_size();
        let proposer: Box<dyn Proposer> = match cfg.spec.method {
            ProposerKind::None => Box::new(NoProposer),
            ProposerKind::Ngram => {
                Box::new(NgramProposer::new(cfg.spec.ngram_min, cfg.spec.ngram_max))
            }
            ProposerKind::Suffix => Box::new(SuffixProposer::new(&cfg.spec.suffix, vocab)?),
        };
        let sched = Scheduler::new(
            SchedulerLimits {
                max_num_seqs: cfg.max_num_seqs,
                max_num_batched_tokens: cfg.max_num_batched_tokens,
            },
            BlockManager::new(num_blocks, block_size, cfg.enable_prefix_caching),
        );
        let mut metrics = MetricsSnapshot {
            kv_blocks_total: num_blocks,
            ..Default::default()
        };
        metrics.spec_num_accepted_tokens_per_pos = Vec::new();
        let max_k = cfg
            .spec
            .k_policy
            .max_k()
            .max(*CAPTURED_KS.last().expect("ks"));
        let trace = match &cfg.trace_out {
            Some(p) => Some(crate::trace::TraceWriter::create(p)?),
            None => None,
        };
        let mut core = Self {
            trace,
            runner,
            sched,
            requests: HashMap::new(),
            proposer,
            spec: SpecState {
                dynamic: DynamicK::default(),
                adaptive: AdaptiveK::new(&CAPTURED_KS),
                cost: None,
                acceptance: PositionAcceptance::new(max_k),
                calibration: ScoreCalibration::new(),
            },
            cfg,
            eos,
            tokenizer,
            metrics,
            max_model_len,
            vocab,
            drain_deadline: None,
        };
        if core.cfg.spec.enabled() && core.cfg.spec.k_policy == KPolicy::Adaptive {
            let t = Instant::now();
            let points = crate::calibrate::measure_step_costs(
                core.runner.as_mut(),
                &mut core.sched.blocks,
                core.cfg.max_num_seqs,
                &[0, 4, 12],
            )?;
            let model = StepCostModel::fit_calibration(&points);
            tracing::info!(
                "adaptive K: step-cost model measured in {:.1}s: {:?} (fixed s, s/seq, s/row)",
                t.elapsed().as_secs_f64(),
                model.coefficients()
            );
            core.spec.cost = Some(model);
        }
        Ok((core, max_model_len))
    }

    pub fn num_blocks(&self) -> usize {
        self.sched.blocks.num_blocks()
    }
    pub fn block_size(&self) -> usize {
        self.sched.blocks.block_size()
    }
    pub fn device_name(&self) -> String {
        self.runner.device_name()
    }
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }
    pub fn metrics(&self) -> &MetricsSnapshot {
        &self.metrics
    }
    pub fn adaptive_ready(&self) -> bool {
        self.spec.cost.is_some()
    }

    pub fn run(mut self, rx: mpsc::Receiver<Command>, shared: Weak<Shared>) {
        loop {
            if !self.sched.has_work() && self.drain_deadline.is_none() {
                match rx.recv() {
                    Ok(c) => self.handle(c, &shared),
                    Err(_) => break,
                }
            }
            while let Ok(c) = rx.try_recv() {
                self.handle(c, &shared);
            }
            if let Some(deadline) = self.drain_deadline {
                if !self.sched.has_work() || Instant::now() >= deadline {
                    for id in self.sched.ids() {
                        self.finish(id, FinishReason::Abort, &shared);
                    }
                    self.publish(&shared);
                    break;
                }
            }
            self.abort_disconnected(&shared);
            if self.sched.has_work() && !self.step(&shared) {
                // Nothing could be scheduled (should not happen); don't spin.
                std::thread::sleep(Duration::from_millis(1));
            }
            self.publish(&shared);
        }
        tracing::debug!("engine loop finished");
    }

    fn handle(&mut self, c: Command, shared: &Weak<Shared>) {
        match c {
            Command::Submit(s) => {
                self.on_submit(*s, shared);
                // Published before the request's first event can reach its client, so a
                // snapshot read after that event never shows the engine idle without it.
                self.publish(shared);
            }
            Command::Abort(id) => {
                if self.requests.contains_key(&id) {
                    self.finish(id, FinishReason::Abort, shared);
                }
            }
            Command::ResetSuffixCache => self.proposer.reset_global(),
            Command::Shutdown(drain) => {
                let d = Instant::now() + drain;
                self.drain_deadline = Some(self.drain_deadline.map_or(d, |x| x.min(d)));
            }
        }
    }

    fn on_submit(&mut self, s: Submission, shared: &Weak<Shared>) {
        let Submission {
            id,
            req,
            k_policy,
            events,
        } = s;
        let fail = |msg: String| {
            let _ = events.send(EngineEvent::Error { message: msg });
            if let Some(sh) = shared.upgrade() {
                sh.pending.fetch_sub(1, Ordering::AcqRel);
            }
        };
        if self.drain_deadline.is_some() {
            return fail("engine is shutting down".into());
        }
        if let Err(e) = self.proposer.start(id, &req.prompt_ids) {
            self.metrics.finished_error += 1;
            return fail(format!("{e:#}"));
        }
        let mut stop_ids: HashSet<u32> = req.stop_token_ids.iter().copied().collect();
        if !req.ignore_eos {
            stop_ids.extend(self.eos.iter().copied());
        }
        let state = RequestState {
            request_id: req.request_id.clone(),
            sampler: RequestSampler::new(req.sampling.clone(), &req.prompt_ids),
            decoder: IncrementalDecoder::new(self.tokenizer.clone(), &req.prompt_ids, true),
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
            k_policy: k_policy.unwrap_or_else(|| self.cfg.spec.k_policy.clone()),
            workload: req.spec.workload.clone(),
            admitted: false,
        };
        self.requests.insert(id, state);
        self.sched.add(Sequence::new(id, req.prompt_ids));
    }

    fn abort_disconnected(&mut self, shared: &Weak<Shared>) {
        let gone: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.finish(id, FinishReason::Abort, shared);
        }
    }

    /// K a request's policy asks for now.
    fn wanted_k(&self, r: &RequestState) -> usize {
        match &r.k_policy {
            KPolicy::Fixed(k) => *k,
            KPolicy::Profile(p) => p.k_for(r.workload.as_deref()),
            KPolicy::Dynamic => self.spec.dynamic.k(),
            KPolicy::Adaptive => *self.spec.adaptive.candidates.last().unwrap_or(&0),
        }
    }

    /// Drafts for every decoding sequence, with uniform K padding when enabled.
    fn plan_drafts(&mut self) -> HashMap<u64, SeqDraft> {
        let ids = self.sched.decoding_ids();
        let mut asks = Vec::with_capacity(ids.len());
        // (want, cap, room, adaptive, dynamic)
        let mut info = Vec::with_capacity(ids.len());
        for &id in &ids {
            let (Some(seq), Some(r)) = (self.sched.get(id), self.requests.get(&id)) else {
                continue;
            };
            let room = self.max_model_len.saturating_sub(seq.len());
            // Emitting accepted + 1 tokens must stay within max_tokens.
            let remaining = r.max_tokens.saturating_sub(seq.num_output() + 1);
            let cap = room.min(remaining);
            let want = self.wanted_k(r);
            let adaptive = r.k_policy == KPolicy::Adaptive;
            let dynamic = r.k_policy == KPolicy::Dynamic;
            asks.push((id, want.min(cap)));
            info.push((want, cap, room, adaptive, dynamic));
        }
        let proposals = self.proposer.propose(&asks);

        // The adaptive policy picks one K for its sequences from their scores.
        let mut adaptive_k = 0;
        if let Some(cost) = &self.spec.cost {
            let scores: Vec<Vec<f32>> = proposals
                .iter()
                .zip(&info)
                .filter(|(_, i)| i.3)
                .map(|(p, i)| {
                    let n = p.tokens.len().min(i.1);
                    match &p.probs {
                        Some(pr) => self.spec.calibration.apply(&pr[..n.min(pr.len())]),
                        None => self.spec.acceptance.running_probs(n),
                    }
                })
                .collect();
            if !scores.is_empty() {
                let refs: Vec<&[f32]> = scores.iter().map(|s| s.as_slice()).collect();
                adaptive_k = self.spec.adaptive.choose(&refs, 0, self.cfg.spec.pad, cost);
            }
        }

        let mut drafts = HashMap::with_capacity(asks.len());
        let mut step_k = 0;
        for ((&(id, _), p), &(want, cap, _, adaptive, dynamic)) in
            asks.iter().zip(proposals).zip(&info)
        {
            let k = if adaptive { adaptive_k } else { want }.min(cap);
            step_k = step_k.max(k);
            let mut tokens = p.tokens;
            tokens.truncate(k);
            let scores = p.probs.map(|mut pr| {
                pr.truncate(tokens.len());
                pr
            });
            drafts.insert(
                id,
                SeqDraft {
                    slots: tokens.len(),
                    tokens,
                    dynamic,
                    scores,
                },
            );
        }
        if self.cfg.spec.pad {
            for (&(id, _), &(_, _, room, _, _)) in asks.iter().zip(&info) {
                if let Some(d) = drafts.get_mut(&id) {
                    d.slots = step_k.min(room);
                }
            }
        }
        self.metrics.last_k = step_k;
        drafts
    }

    /// One step; false when nothing could be scheduled.
    fn step(&mut self, shared: &Weak<Shared>) -> bool {
        let drafts = if self.cfg.spec.enabled() {
            self.plan_drafts()
        } else {
            HashMap::new()
        };
        let plan = self
            .sched
            .schedule(&|id| drafts.get(&id).map_or(0, |d| d.slots));
        if plan.is_empty() {
            return false;
        }

        // Build the step.
        struct Row {
            id: u64,
            num_tokens: usize,
            slots: usize,
            num_computed: usize,
            completes: bool,
            first_logit: usize,
        }
        let mut input = StepInput::default();
        let mut rows = Vec::with_capacity(plan.scheduled.len());
        for sc in &plan.scheduled {
            let seq = self.sched.get(sc.id).expect("scheduled seq exists");
            let nc = seq.num_computed;
            let query_start = input.tokens.len();
            input
                .tokens
                .extend_from_slice(&seq.tokens[nc..nc + sc.num_tokens]);
            if sc.num_slots > 0 {
                let d = &drafts[&sc.id];
                input.tokens.extend_from_slice(&d.tokens);
                input.tokens.extend(std::iter::repeat_n(
                    PAD_TOKEN,
                    sc.num_slots - d.tokens.len(),
                ));
            }
            let query_len = sc.num_tokens + sc.num_slots;
            input
                .positions
                .extend((nc..nc + query_len).map(|p| p as u32));
            let completes = nc + sc.num_tokens == seq.len();
            let first_logit = input.logit_rows.len();
            if completes {
                // The last known token, then every slot (all 1 + K rows when padded).
                let last = query_start + sc.num_tokens - 1;
                input.logit_rows.extend(last..last + 1 + sc.num_slots);
            }
            input.seqs.push(SeqInput {
                query_start,
                query_len,
                context_len: nc + query_len,
                block_table: seq.blocks.clone(),
            });
            rows.push(Row {
                id: sc.id,
                num_tokens: sc.num_tokens,
                slots: sc.num_slots,
                num_computed: nc,
                completes,
                first_logit,
            });
            if let Some(r) = self.requests.get_mut(&sc.id) {
                if !r.admitted {
                    r.admitted = true;
                    self.metrics.prompt_tokens += r.usage.prompt_tokens as u64;
                    if let Some(sh) = shared.upgrade() {
                        sh.pending.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
        }

        // When every row that gets logits takes their argmax (greedy, no penalties, no
        // logprobs), only ids come back from the runner (the argmax runs on the device
        // where it can); otherwise, or when the runner has no such path, whole rows.
        let ids_only = rows.iter().filter(|r| r.completes).all(|r| {
            self.requests
                .get(&r.id)
                .is_none_or(|s| s.logprobs.is_none() && s.sampler.argmax_only())
        });
        let t0 = Instant::now();
        let result = if ids_only && !input.logit_rows.is_empty() {
            match self.runner.forward_greedy(&input) {
                Ok(Some(ids)) => Ok(StepOutput::Ids(ids)),
                Ok(None) => self.runner.forward(&input).map(StepOutput::Logits),
                Err(e) => Err(e),
            }
        } else {
            self.runner.forward(&input).map(StepOutput::Logits)
        };
        let out = match result {
            Ok(o) => o,
            Err(e) => {
                tracing::error!("forward step failed: {e:#}");
                for r in &rows {
                    self.fail(r.id, format!("model step failed: {e:#}"), shared);
                }
                return true;
            }
        };
        let secs = t0.elapsed().as_secs_f64();
        if let Some(cost) = &mut self.spec.cost {
            cost.observe(rows.len(), input.tokens.len(), secs);
        }
        self.metrics.steps += 1;
        let shape_error = match &out {
            StepOutput::Logits(l) if l.rows != input.logit_rows.len() || l.vocab != self.vocab => {
                Some(format!(
                    "runner returned {}x{} logits, expected {}x{}",
                    l.rows,
                    l.vocab,
                    input.logit_rows.len(),
                    self.vocab
                ))
            }
            StepOutput::Ids(ids) if ids.len() != input.logit_rows.len() => Some(format!(
                "runner returned {} greedy ids, expected {}",
                ids.len(),
                input.logit_rows.len()
            )),
            _ => None,
        };
        if let Some(msg) = shape_error {
            for r in &rows {
                self.fail(r.id, msg.clone(), shared);
            }
            return true;
        }

        let (mut dyn_accepted, mut dyn_seqs) = (0usize, 0usize);
        for r in rows {
            if !r.completes {
                self.sched.set_computed(r.id, r.num_computed + r.num_tokens);
                continue;
            }
            let Some(state) = self.requests.get_mut(&r.id) else {
                continue;
            };
            let (tokens, accepted, valid) = match &out {
                StepOutput::Ids(ids) => {
                    // Greedy verification on ids: the same rule as `verify_drafts`
                    // for a greedy sampler (accept while the draft is the argmax,
                    // then the target's own token).
                    let ids = &ids[r.first_logit..r.first_logit + 1 + r.slots];
                    let draft: &[u32] = drafts.get(&r.id).map_or(&[], |d| &d.tokens);
                    let valid = if r.slots == 0 {
                        0
                    } else {
                        draft.len().min(r.slots)
                    };
                    let accepted = draft[..valid]
                        .iter()
                        .zip(ids)
                        .take_while(|(d, t)| d == t)
                        .count();
                    let tokens = ids[..=accepted].to_vec();
                    for &t in &tokens {
                        state.sampler.observe(t);
                    }
                    (tokens, accepted, valid)
                }
                StepOutput::Logits(logits) => {
                    let row = |j: usize| logits.row(r.first_logit + j);
                    if r.slots == 0 {
                        (vec![state.sampler.sample(row(0))], 0, 0)
                    } else {
                        let d = &drafts[&r.id];
                        let valid = d.tokens.len();
                        let out = verify_drafts(
                            &mut state.sampler,
                            row,
                            &d.tokens,
                            valid,
                            RejectionRule::Correct,
                        );
                        (out.tokens, out.accepted, valid)
                    }
                }
            };
            if r.slots > 0 {
                if valid > 0 {
                    state.usage.spec_steps += 1;
                    state.usage.draft_tokens += valid as u32;
                    state.usage.accepted_tokens += accepted as u32;
                    self.spec.acceptance.observe(valid, accepted);
                    if let Some(sc) = &drafts[&r.id].scores {
                        self.spec
                            .calibration
                            .observe(&sc[..valid.min(sc.len())], accepted);
                    }
                }
                self.metrics.count_verify(valid, accepted);
                if drafts[&r.id].dynamic {
                    dyn_accepted += accepted;
                    dyn_seqs += 1;
                }
            }
            let logprob_rows: Option<Vec<TokenLogprob>> = match (&out, state.logprobs) {
                (StepOutput::Logits(logits), Some(n)) => Some(
                    tokens
                        .iter()
                        .enumerate()
                        .map(|(i, &t)| token_logprobs(logits.row(r.first_logit + i), t, n as usize))
                        .collect(),
                ),
                _ => None,
            };
            if let Some(reason) = self.emit(r.id, tokens, logprob_rows) {
                self.finish(r.id, reason, shared);
            } else {
                self.sched
                    .set_computed(r.id, r.num_computed + r.num_tokens + accepted);
            }
        }
        if dyn_seqs > 0 {
            self.spec
                .dynamic
                .observe(dyn_accepted as f64 / dyn_seqs as f64);
        }
        true
    }

    /// Appends emitted tokens to a request, applying stop rules token by token;
    /// streams what is new. Returns a finish reason when the request is done.
    fn emit(
        &mut self,
        id: u64,
        tokens: Vec<u32>,
        logprobs: Option<Vec<TokenLogprob>>,
    ) -> Option<FinishReason> {
        let now = Instant::now();
        let state = self.requests.get_mut(&id)?;
        let seq = self.sched.get_mut(id)?;
        let mut kept = Vec::with_capacity(tokens.len());
        let mut text = String::new();
        let mut finish = None;
        let mut stopped_by_string = false;
        for t in tokens {
            seq.tokens.push(t);
            kept.push(t);
            if state.stop_ids.contains(&t) {
                finish = Some(FinishReason::Stop);
                break;
            }
            let piece = state.decoder.push(t);
            match state.stops.push(&piece) {
                StopOutcome::Continue(s) => text.push_str(&s),
                StopOutcome::Stopped(s) => {
                    text.push_str(&s);
                    finish = Some(FinishReason::Stop);
                    stopped_by_string = true;
                    break;
                }
            }
            if seq.num_output() >= state.max_tokens || seq.len() >= self.max_model_len {
                finish = Some(FinishReason::Length);
                break;
            }
        }
        if finish.is_some() && !stopped_by_string {
            // Release what the decoder and the stop-string guard still hold.
            let rest = state.decoder.flush();
            match state.stops.push(&rest) {
                StopOutcome::Continue(s) => {
                    text.push_str(&s);
                    text.push_str(&state.stops.flush());
                }
                StopOutcome::Stopped(s) => {
                    text.push_str(&s);
                    finish = Some(FinishReason::Stop);
                }
            }
        }
        if state.first_token_at.is_none() {
            state.first_token_at = Some(now);
            self.metrics
                .ttft
                .observe((now - state.arrival).as_secs_f64());
        }
        state.usage.completion_tokens += kept.len() as u32;
        self.metrics.generation_tokens += kept.len() as u64;
        if let Err(e) = self.proposer.append(id, &kept) {
            tracing::warn!("proposer append for request {id}: {e:#}");
        }
        let logprobs = logprobs.map(|mut l| {
            l.truncate(kept.len());
            l
        });
        let _ = state.events.send(EngineEvent::Tokens {
            ids: kept,
            text,
            logprobs,
        });
        finish
    }

    fn fail(&mut self, id: u64, message: String, shared: &Weak<Shared>) {
        if let Some(r) = self.requests.get(&id) {
            let _ = r.events.send(EngineEvent::Error {
                message: message.clone(),
            });
        }
        self.finish(id, FinishReason::Error, shared);
    }

    /// Ends a request: frees its KV blocks and drafter state at once.
    fn finish(&mut self, id: u64, reason: FinishReason, shared: &Weak<Shared>) {
        let seq = self.sched.remove(id);
        let Some(mut r) = self.requests.remove(&id) else {
            return;
        };
        if !r.admitted {
            if let Some(sh) = shared.upgrade() {
                sh.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let completed = matches!(reason, FinishReason::Stop | FinishReason::Length);
        self.proposer.finish(id, completed);
        if let Some(seq) = seq {
            r.usage.cached_tokens = seq.cached_prompt_tokens as u32;
            if let (true, Some(t)) = (completed, self.trace.as_mut()) {
                let (prompt, output) = seq.tokens.split_at(seq.prompt_len);
                let why = if reason == FinishReason::Stop {
                    "stop"
                } else {
                    "length"
                };
                t.record(r.workload.as_deref(), &r.request_id, prompt, output, why);
            }
        }
        self.metrics.count_finish(reason);
        let now = Instant::now();
        self.metrics.e2e.observe((now - r.arrival).as_secs_f64());
        if let Some(first) = r.first_token_at {
            if r.usage.completion_tokens > 1 {
                let tpot = (now - first).as_secs_f64() / (r.usage.completion_tokens - 1) as f64;
                self.metrics.tpot.observe(tpot);
            }
        }
        tracing::debug!(
            "request {} ({}) finished: {:?}, {} tokens",
            id,
            r.request_id,
            reason,
            r.usage.completion_tokens
        );
        if reason != FinishReason::Error {
            let _ = r.events.send(EngineEvent::Finished {
                reason,
                usage: r.usage,
            });
        }
    }

    fn publish(&mut self, shared: &Weak<Shared>) {
        let Some(sh) = shared.upgrade() else { return };
        self.metrics.running = self.sched.num_running();
        self.metrics.waiting = self.sched.num_waiting();
        self.metrics.kv_blocks_used = self.sched.blocks.num_used_blocks();
        self.metrics.preemptions = self.sched.num_preemptions();
        let st = self.sched.blocks.stats();
        self.metrics.prefix_cache_queried_tokens = st.queried_tokens;
        self.metrics.prefix_cache_hit_tokens = st.hit_tokens;
        if let Ok(mut m) = sh.metrics.lock() {
            m.clone_from(&self.metrics);
        };
    }
}
