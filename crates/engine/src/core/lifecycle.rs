//! How a request leaves the engine loop (or enters the running set): admission, failure,
//! finishing (KV blocks and drafter state freed at once, trace and metrics recorded) and the
//! metrics snapshot the handles read.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Instant;

use super::EngineCore;
use crate::api::{EngineEvent, FinishReason};
use crate::channel::Shared;
use crate::step_input::StepRow;

impl EngineCore {
    /// Counts requests whose first step this is as admitted (out of the queue).
    pub(super) fn mark_admitted(&mut self, rows: &[StepRow], shared: &Weak<Shared>) {
        for row in rows {
            let Some(r) = self.requests.get_mut(&row.id) else {
                continue;
            };
            if !r.admitted {
                r.admitted = true;
                self.metrics.prompt_tokens += r.usage.prompt_tokens as u64;
                if let Some(sh) = shared.upgrade() {
                    sh.pending.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }

    pub(super) fn fail(&mut self, id: u64, message: String, shared: &Weak<Shared>) {
        if let Some(r) = self.requests.get(&id) {
            self.outbox.push(
                &r.events,
                EngineEvent::Error {
                    message: message.clone(),
                },
            );
        }
        self.finish(id, FinishReason::Error, shared);
    }

    /// Ends a request: frees its KV blocks and drafter state at once.
    pub(super) fn finish(&mut self, id: u64, reason: FinishReason, shared: &Weak<Shared>) {
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
        self.spec.proposer().finish(id, completed);
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
            self.outbox.push(
                &r.events,
                EngineEvent::Finished {
                    reason,
                    usage: r.usage,
                },
            );
        }
    }

    pub(super) fn publish(&mut self, shared: &Weak<Shared>) {
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
