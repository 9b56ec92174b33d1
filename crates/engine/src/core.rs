//! The engine loop: owns the runner, the scheduler, the speculation state and every
//! request's state. One iteration takes commands, then runs a step: plan the
//! drafts (`spec_decode`), schedule, build the input (`step_input.rs`), run the
//! model, verify or sample, and emit (detokenise, stop rules, stream events).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};

use wring_model::runner::ModelRunner;
use wring_model::Tokenizer;

use crate::api::{EngineEvent, FinishReason, TokenLogprob};
use crate::background::BackgroundWorker;
use crate::block_manager::BlockManager;
use crate::channel::{Command, Shared, Submission};
use crate::config::EngineConfig;
use crate::metrics::MetricsSnapshot;
use crate::outbox::Outbox;
use crate::request::{Appended, RequestState};
use crate::sampling::token_logprobs;
use crate::scheduler::{PrefillDemand, Scheduler, SchedulerLimits, TokenBudget};
use crate::sequence::Sequence;
use crate::spec_decode::KPolicy;
use crate::spec_decode::{
    verify, DraftAsk, SpecDecoder, StepBudget, StepDrafts, StepOutput, TargetRows,
};
use crate::step_budget::{StepBudgeter, StepWork};
use crate::step_input::{self, StepRow};

mod constraints;
mod forward;
mod lifecycle;

pub(crate) struct EngineCore {
    runner: Box<dyn ModelRunner>,
    sched: Scheduler,
    requests: HashMap<u64, RequestState>,
    spec: SpecDecoder,
    /// Runs the drafter's deferred tree updates beside the model.
    background: BackgroundWorker,
    /// Delivers the requests' events off the step's critical path, after each step.
    outbox: Outbox,
    /// Sizes each step's prefill chunk from measured step times (fair steps).
    budget: StepBudgeter,
    cfg: EngineConfig,
    eos: Vec<u32>,
    tokenizer: Arc<Tokenizer>,
    metrics: MetricsSnapshot,
    trace: Option<crate::trace::TraceWriter>,
    step_log: Option<crate::step_log::StepLog>,
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
        // Streams detokenise from each token's bytes where the tokenizer allows it; the
        // table is built (and checked) now rather than on the first request.
        let byte_stream = tokenizer.byte_table().is_some();
        tracing::debug!("detokenising from token bytes: {byte_stream}");
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
        let captured = runner.captured_query_lens();
        let spec = SpecDecoder::new(&cfg.spec, vocab, captured.as_deref())?;
        let sched = Scheduler::new(
            SchedulerLimits {
                max_num_seqs: cfg.max_num_seqs,
                max_num_batched_tokens: cfg.max_num_batched_tokens,
            },
            BlockManager::new(num_blocks, block_size, cfg.enable_prefix_caching),
        );
        let metrics = MetricsSnapshot {
            kv_blocks_total: num_blocks,
            ..Default::default()
        };
        let trace = match &cfg.trace_out {
            Some(p) => Some(crate::trace::TraceWriter::create(p)?),
            None => None,
        };
        let step_log = match &cfg.step_log {
            Some(p) => Some(crate::step_log::StepLog::create(p)?),
            None => None,
        };
        let budget = StepBudgeter::new(cfg.step_time_target, cfg.max_num_batched_tokens);
        let mut core = Self {
            budget,
            trace,
            step_log,
            runner,
            sched,
            requests: HashMap::new(),
            spec,
            background: BackgroundWorker::default(),
            outbox: Outbox::default(),
            cfg,
            eos,
            tokenizer,
            metrics,
            max_model_len,
            vocab,
            drain_deadline: None,
        };
        // Start-up steps on synthetic sequences (calibration probes, warm-up) ran.
        let mut probed = false;
        if core.cfg.spec.enabled() && core.cfg.spec.k_policy == KPolicy::Adaptive {
            probed = core.spec.calibrate(
                core.runner.as_mut(),
                &mut core.sched.blocks,
                core.cfg.max_num_seqs,
                core.cfg.spec.step_timings.as_ref(),
            )?;
        }
        if core.cfg.warm_up {
            let qs = crate::warm_up::query_lens(&core.cfg.spec, core.runner.as_ref());
            let r = crate::warm_up::warm_up(
                core.runner.as_mut(),
                &mut core.sched.blocks,
                &qs,
                core.cfg.max_num_seqs,
                core.cfg.max_num_batched_tokens,
            )?;
            let line = format!(
                "warm-up: {} step shapes ({} skipped: the KV pool cannot hold them at once), {} steps in {:.2} s",
                r.shapes,
                r.skipped,
                r.steps,
                r.seconds
            );
            probed |= r.steps > 0;
            // The CPU names no shapes: nothing worth a line at start-up there.
            if r.shapes > 0 {
                tracing::info!("{line}");
            } else {
                tracing::debug!("{line}");
            }
        }
        // Serving starts on KV memory no probe has written (`Backend::renew_kv`).
        if probed {
            core.runner.renew_kv()?;
            core.sched.blocks.reset_when_idle();
        }
        // Block hashes chain from the configured root; cache changes reach the sink.
        core.sched.blocks.attach_kv_events(&core.cfg.kv_events);
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
        self.spec.adaptive_ready()
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
                    self.outbox.flush();
                    break;
                }
            }
            self.abort_disconnected(&shared);
            if self.sched.has_work() && !self.step(&shared) {
                // Nothing could be scheduled (should not happen); don't spin.
                std::thread::sleep(Duration::from_millis(1));
            }
            // Metrics first, then the events: a client that reads the snapshot after its
            // event sees the step that made it.
            self.publish(&shared);
            self.outbox.flush();
        }
        tracing::debug!("engine loop finished");
    }

    fn handle(&mut self, c: Command, shared: &Weak<Shared>) {
        let t0 = Instant::now();
        self.handle_command(c, shared);
        self.metrics.admin_seconds += t0.elapsed().as_secs_f64();
    }

    fn handle_command(&mut self, c: Command, shared: &Weak<Shared>) {
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
            Command::ResetSuffixCache => self.spec.proposer().reset_global(),
            Command::CachedBlocks(reply) => {
                let _ = reply.send(self.sched.blocks.cached_hashes());
            }
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
            dry_breakers,
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
        if let Some(why) = self.replay_refusal(&req) {
            return fail(why);
        }
        if let Err(e) = self.spec.proposer().start(id, &req.prompt_ids) {
            self.metrics.finished_error += 1;
            return fail(format!("{e:#}"));
        }
        let k_policy = k_policy.unwrap_or_else(|| self.cfg.spec.k_policy.clone());
        let mut state =
            RequestState::new(&req, k_policy, events, &self.eos, self.tokenizer.clone());
        if let Some(b) = dry_breakers {
            state.sampler.set_dry_breakers(b);
        }
        self.requests.insert(id, state);
        self.sched.add(Sequence::new(id, req.prompt_ids));
    }

    /// Why a request's recorded output cannot be replayed, if it carries one that cannot.
    fn replay_refusal(&self, req: &crate::api::GenerateRequest) -> Option<String> {
        let rec = req.replay_output.as_ref()?;
        if !self.cfg.replay_outputs {
            return Some(
                "replay_output is a benchmark mode: start the server with --replay-outputs".into(),
            );
        }
        if req.grammar.is_some() {
            return Some("replay_output cannot be combined with structured output".into());
        }
        if rec.is_empty() {
            return Some("replay_output must hold at least one token".into());
        }
        rec.iter().find(|&&t| t as usize >= self.vocab).map(|t| {
            format!(
                "replay_output token id {t} is outside the vocabulary (size {})",
                self.vocab
            )
        })
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

    /// The step's drafts: one ask per decoding sequence, planned against the step's
    /// whole budget (the prefill waiting to share it included).
    fn plan_drafts(&mut self) -> StepDrafts {
        if !self.cfg.spec.enabled() {
            return StepDrafts::default();
        }
        let ids = self.sched.decoding_ids();
        // Per sequence: the most draft tokens it may have (emitting accepted + 1 tokens
        // must stay within the context and max_tokens) and the room left in its context.
        let limits: Vec<(u64, usize, usize)> = ids
            .iter()
            .filter_map(|&id| {
                let (seq, r) = (self.sched.get(id)?, self.requests.get(&id)?);
                let room = self.max_model_len.saturating_sub(seq.len());
                let remaining = r.max_tokens.saturating_sub(seq.num_output() + 1);
                Some((id, room, room.min(remaining)))
            })
            .collect();
        // A constrained sequence drafts what its grammar forces first.
        let forced = self.forced_tokens(&limits);
        let mut asks = Vec::with_capacity(limits.len());
        for (&(id, room, cap), forced) in limits.iter().zip(&forced) {
            let (Some(seq), Some(r)) = (self.sched.get(id), self.requests.get(&id)) else {
                continue;
            };
            asks.push(DraftAsk {
                id,
                policy: &r.k_policy,
                workload: r.workload.as_deref(),
                room,
                context: seq.num_computed,
                cap,
                forced,
            });
        }
        // The prefill that can share the step: at most what the budgeter would give
        // it beside these sequences' plain decode rows.
        let demand = self.sched.prefill_demand();
        let allowance = self.budget.prefill_tokens(
            self.decode_work(&ids, &|_| 0),
            self.sched.next_prefill_position(),
        );
        let budget = StepBudget {
            max_tokens: self.cfg.max_num_batched_tokens,
            prefill: PrefillDemand {
                seqs: demand.seqs,
                tokens: demand.tokens.min(allowance),
            },
        };
        let drafts = self.spec.plan(&asks, budget);
        self.metrics.last_k = drafts.k;
        drafts
    }

    /// One step: plan drafts → schedule → build the input → run the model →
    /// verify and emit. False when nothing could be scheduled.
    fn step(&mut self, shared: &Weak<Shared>) -> bool {
        let started = Instant::now();
        let model_before = self.metrics.step_model_seconds;
        self.background.wait();
        let waited = Instant::now();
        let drafts = self.plan_drafts();
        let drafted = Instant::now();
        let decoding = self.sched.decoding_ids();
        let decode = self.decode_work(&decoding, &|id| drafts.slots_for(id));
        let budget = TokenBudget {
            total: self.cfg.max_num_batched_tokens,
            prefill: self
                .budget
                .prefill_tokens(decode, self.sched.next_prefill_position()),
        };
        let plan = self.sched.schedule(&|id| drafts.slots_for(id), budget);
        if plan.is_empty() {
            return false;
        }
        let prefill_tokens: usize = plan
            .scheduled
            .iter()
            .filter(|s| !decoding.contains(&s.id))
            .map(|s| s.num_tokens)
            .sum();
        let (input, rows) = step_input::build(&plan, &self.sched, &drafts);
        let shape = (input.seqs.len(), input.tokens.len(), input.logit_rows.len());
        let work = StepWork::from_positions(&input.positions);
        self.mark_admitted(&rows, shared);
        let ids_only = self.ids_only(&rows);
        let jobs = self.take_constraints(&rows, &drafts);
        let constrained = !jobs.is_empty();
        // The drafter's deferred tree updates run beside the model (and the emitting
        // of its tokens); the next step's draft waits for them.
        if let Some(job) = self.spec.proposer().take_background() {
            self.background.submit(job);
        }
        let scheduled = Instant::now();
        let (out, jobs) = if jobs.is_empty() {
            (self.run_model(&input, &rows, ids_only, work), Vec::new())
        } else if self.greedy_rows(&rows) {
            self.run_model_masked(&input, &rows, jobs, work)
        } else {
            // The grammar masks of this step's positions are computed while the
            // model runs (constrained sequences only).
            self.metrics.constrained_steps += 1;
            std::thread::scope(|s| {
                let masks = s.spawn(move || EngineCore::prepare_masks(jobs));
                let out = self.run_model(&input, &rows, ids_only, work);
                (out, masks.join().unwrap_or_default())
            })
        };
        self.return_constraints(&rows, jobs, shared);
        let mut out = match out {
            Ok(out) => out,
            Err(msg) => {
                for r in &rows {
                    self.fail(r.id, msg.clone(), shared);
                }
                return true;
            }
        };
        let verify_start = Instant::now();
        if constrained {
            self.mask_logits(&rows, &mut out);
        }
        for r in rows {
            if r.completes {
                self.verify_and_emit(&r, &out, &drafts, shared);
            } else {
                self.sched.set_computed(r.id, r.num_computed + r.num_tokens);
            }
        }
        let verified = Instant::now();
        self.spec.end_step();
        let model = self.metrics.step_model_seconds - model_before;
        if prefill_tokens > 0 {
            self.metrics.steps_with_prefill += 1;
            self.metrics.step_model_seconds_with_prefill += model;
        }
        let secs = started.elapsed().as_secs_f64();
        self.metrics.step_host_seconds += (secs - model).max(0.0);
        if let Some(log) = &mut self.step_log {
            log.record(crate::step_log::StepLine {
                t_ms: 0.0,
                seqs: shape.0,
                decoding: decoding.len(),
                tokens: shape.1,
                prompt_tokens: prefill_tokens,
                logit_rows: shape.2,
                model_ms: model * 1e3,
                host_ms: (secs - model).max(0.0) * 1e3,
                graph: self.runner.last_step_graph().map(|g| g.as_str()),
            });
        }
        // The whole step, host work included: it is what a stream waits between tokens.
        self.budget.observe(work, prefill_tokens, secs);
        let phases = &mut self.metrics.step_host_phase_seconds;
        phases[0] += (waited - started).as_secs_f64();
        phases[1] += (drafted - waited).as_secs_f64();
        phases[2] += (scheduled - drafted).as_secs_f64();
        phases[3] += (verified - verify_start).as_secs_f64();
        phases[4] += verified.elapsed().as_secs_f64();
        true
    }

    /// The decode/verify rows of `ids` with `slots(id)` draft slots each.
    fn decode_work(&self, ids: &[u64], slots: &dyn Fn(u64) -> usize) -> StepWork {
        let mut w = StepWork::default();
        for &id in ids {
            let Some(seq) = self.sched.get(id) else {
                continue;
            };
            let n = 1 + slots(id);
            let c = StepWork::chunk(seq.num_computed, n);
            w.tokens += c.tokens;
            w.attended += c.attended;
        }
        w
    }

    /// Verifies a sequence's drafts (or samples its next token), records the
    /// acceptance, and emits what came out.
    fn verify_and_emit(
        &mut self,
        r: &StepRow,
        out: &StepOutput,
        drafts: &StepDrafts,
        shared: &Weak<Shared>,
    ) {
        let Some(state) = self.requests.get_mut(&r.id) else {
            return;
        };
        // A constrained sequence's rows were masked: in place (`mask_logits`), so the
        // verifier, the sampler and the logprobs all read the masked rows, or, on a
        // greedy step, inside the argmax (`run_model_masked`), so its ids are the masked
        // argmax.
        let target = out.target(r.first_logit);
        let draft_row = drafts.row_of(r.id).filter(|_| r.slots > 0);
        let (draft, mut valid) =
            draft_row.map_or((&[][..], 0), |b| (drafts.draft(b), drafts.valid_len[b]));
        // Replay: the step ran (and took its argmax) as usual, but the target's tokens
        // are the recording's; a draft is accepted as far as it matches the recording,
        // and never past its end.
        let target = match state.replay.as_deref() {
            None => target,
            Some(recording) => {
                let emitted = self.sched.get(r.id).map_or(0, |s| s.num_output());
                match recording.get(emitted..) {
                    Some(rest) if !rest.is_empty() => {
                        valid = valid.min(rest.len() - 1);
                        TargetRows::Ids(rest)
                    }
                    _ => return self.finish(r.id, FinishReason::Stop, shared),
                }
            }
        };
        let mut outcome = verify(&mut state.sampler, target, draft, valid);
        // The grammar follows what was emitted; once it is complete (nothing may
        // follow, or a stop token was taken) the rest of an accepted draft is dropped.
        let mut grammar_done = false;
        if let Some(c) = state.constraint.as_mut() {
            match c.advance(&outcome.tokens) {
                Ok(Some(n)) => {
                    outcome.tokens.truncate(n);
                    grammar_done = true;
                }
                Ok(None) => {}
                Err(e) => return self.fail(r.id, format!("structured output: {e:#}"), shared),
            }
        }
        if let Some(b) = draft_row {
            self.spec.record(
                drafts,
                b,
                outcome.accepted,
                &mut state.usage,
                &mut self.metrics,
            );
        }
        let logprob_rows: Option<Vec<TokenLogprob>> = state.logprobs.and_then(|n| {
            (0..outcome.tokens.len())
                .map(|i| {
                    let row = target.logits(i)?;
                    Some(token_logprobs(row, outcome.tokens[i], n as usize))
                })
                .collect()
        });
        if let Some(reason) = self.emit(r.id, outcome.tokens, logprob_rows, grammar_done) {
            self.finish(r.id, reason, shared);
        } else {
            self.sched
                .set_computed(r.id, r.num_computed + r.num_tokens + outcome.accepted);
        }
    }

    /// Appends emitted tokens to a request, applying stop rules token by token;
    /// streams what is new. Returns a finish reason when the request is done:
    /// `Stop` too when its grammar ended with the last of `tokens` (`grammar_done`).
    fn emit(
        &mut self,
        id: u64,
        tokens: Vec<u32>,
        logprobs: Option<Vec<TokenLogprob>>,
        grammar_done: bool,
    ) -> Option<FinishReason> {
        let now = Instant::now();
        let state = self.requests.get_mut(&id)?;
        let seq = self.sched.get_mut(id)?;
        let offered = tokens.len();
        let Appended {
            kept,
            text,
            mut finish,
        } = state.append(seq, tokens, self.max_model_len);
        if grammar_done && kept.len() == offered {
            finish = Some(FinishReason::Stop);
        }
        if state.first_token_at.is_none() {
            state.first_token_at = Some(now);
            self.metrics
                .ttft
                .observe((now - state.arrival).as_secs_f64());
        }
        state.usage.completion_tokens += kept.len() as u32;
        self.metrics.generation_tokens += kept.len() as u64;
        if let Err(e) = self.spec.proposer().append(id, &kept) {
            tracing::warn!("proposer append for request {id}: {e:#}");
        }
        let logprobs = logprobs.map(|mut l| {
            l.truncate(kept.len());
            l
        });
        self.outbox.push(
            &state.events,
            EngineEvent::Tokens {
                ids: kept,
                text,
                logprobs,
            },
        );
        finish
    }
}
