//! The engine's public face: `Engine::start` spawns the engine loop on its own OS
//! thread; `EngineHandle` (cheap to clone, Send + Sync) submits, aborts, reads
//! metrics and shuts down; `RequestHandle` streams one request's events and
//! aborts it when dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use wring_model::{ChatTemplate, LoadedModel, ModelRunner, RunnerOptions, Tokenizer};

use crate::api::{EngineEvent, GenerateRequest, SubmitError};
use crate::channel::{Command, Limits, Shared, Submission};
use crate::config::EngineConfig;
use crate::core::EngineCore;
use crate::metrics::MetricsSnapshot;
use crate::sampling::{validate_sampling, BreakerCache};
use crate::spec_decode::KPolicy;

/// What the server and the CLI need to know about the running engine.
#[derive(Clone)]
pub struct EngineInfo {
    pub model_name: String,
    pub max_model_len: usize,
    pub num_kv_blocks: usize,
    pub block_size: usize,
    pub device: String,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    pub eos_token_ids: Vec<u32>,
}

pub struct Engine;

/// What the engine needs to know about the model it serves besides its runner.
#[derive(Clone)]
pub struct ServedModel {
    pub name: String,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    pub eos_token_ids: Vec<u32>,
    /// Context length (prompt + output) before the KV pool's own limit.
    pub max_model_len: usize,
}

impl ServedModel {
    /// `max_model_len` 0: the model's own context length.
    pub fn of(model: &LoadedModel, max_model_len: usize) -> Self {
        Self {
            name: model.name.clone(),
            tokenizer: model.tokenizer.clone(),
            chat_template: model.chat_template.clone(),
            eos_token_ids: model.eos_token_ids.clone(),
            max_model_len: match max_model_len {
                0 => model.max_context(),
                n => n.min(model.max_context()),
            },
        }
    }
}

impl Engine {
    /// Binds the model to its runner, calibrates what needs calibrating and starts
    /// the engine loop. Returns once the engine accepts requests.
    pub fn start(
        model: LoadedModel,
        runner_opts: RunnerOptions,
        cfg: EngineConfig,
    ) -> anyhow::Result<(EngineHandle, EngineInfo)> {
        cfg.validate()?;
        let served = ServedModel::of(&model, runner_opts.max_model_len);
        let runner = wring_runtime::open_runner(model, &runner_opts)?;
        Self::start_with_runner(served, runner, cfg)
    }

    /// Starts the engine on a runner built by the caller (another backend, or a
    /// runner wrapped to observe its steps).
    pub fn start_with_runner(
        model: ServedModel,
        runner: Box<dyn ModelRunner>,
        cfg: EngineConfig,
    ) -> anyhow::Result<(EngineHandle, EngineInfo)> {
        cfg.validate()?;
        let mut cfg = cfg;
        if cfg.kv_events.model_name.is_empty() {
            // Block hashes chain from a root named after the model routers see.
            cfg.kv_events.model_name = model.name.clone();
        }
        let ServedModel {
            name,
            tokenizer,
            chat_template,
            eos_token_ids: eos,
            max_model_len: model_max,
        } = model;
        let (core, max_model_len) = EngineCore::new(
            runner,
            cfg.clone(),
            tokenizer.clone(),
            eos.clone(),
            model_max,
        )?;
        let info = EngineInfo {
            model_name: name,
            max_model_len,
            num_kv_blocks: core.num_blocks(),
            block_size: core.block_size(),
            device: core.device_name(),
            tokenizer,
            chat_template,
            eos_token_ids: eos,
        };
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            dry_breakers: BreakerCache::new(info.tokenizer.clone()),
            commands: Mutex::new(tx),
            next_id: AtomicU64::new(1),
            pending: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            metrics: Mutex::new(core.metrics().clone()),
            thread: Mutex::new(None),
            limits: Limits {
                max_model_len,
                vocab_size: core.vocab_size(),
                max_waiting: cfg.max_waiting,
                spec_enabled: cfg.spec.enabled(),
                adaptive_ready: core.adaptive_ready(),
            },
        });
        let weak = Arc::downgrade(&shared);
        let thread = std::thread::Builder::new()
            .name("wring-engine".into())
            .spawn(move || core.run(rx, weak))?;
        *shared.thread.lock().expect("fresh mutex") = Some(thread);
        Ok((EngineHandle { shared }, info))
    }
}

#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

/// One request's event stream. Dropping it aborts the request (its KV blocks and
/// drafter state are freed at once).
pub struct RequestHandle {
    pub id: u64,
    pub events: UnboundedReceiver<EngineEvent>,
    _abort_on_drop: AbortOnDrop,
}

struct AbortOnDrop {
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        // A finished request is unknown to the engine by now; it ignores this.
        self.shared.send(Command::Abort(self.id));
    }
}

impl EngineHandle {
    /// Validates a request and queues it.
    pub fn submit(&self, req: GenerateRequest) -> Result<RequestHandle, SubmitError> {
        let l = &self.shared.limits;
        if self.shared.shutting_down.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        let k_policy = validate_request(&req, l)?;
        // Here, not on the engine thread: the first DRY request decodes the vocabulary.
        let dry_breakers = self.shared.dry_breakers.for_params(&req.sampling);
        // Reserve a waiting slot (undone on failure below).
        let pending = self.shared.pending.fetch_add(1, Ordering::AcqRel);
        if pending >= l.max_waiting {
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::QueueFull(l.max_waiting));
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = unbounded_channel();
        let sub = Submission {
            id,
            req,
            k_policy,
            events: tx,
            dry_breakers,
        };
        if !self.shared.send(Command::Submit(Box::new(sub))) {
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::ShuttingDown);
        }
        Ok(RequestHandle {
            id,
            events: rx,
            _abort_on_drop: AbortOnDrop {
                id,
                shared: self.shared.clone(),
            },
        })
    }

    pub fn abort(&self, id: u64) {
        self.shared.send(Command::Abort(id));
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared
            .metrics
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Clears the suffix drafter's global tree (admin endpoint; benchmarks use it
    /// to control cache state).
    pub fn reset_suffix_cache(&self) {
        self.shared.send(Command::ResetSuffixCache);
    }

    /// Every block hash in the prefix cache, read on the engine thread between steps
    /// (None when the engine has stopped).
    pub async fn cached_block_hashes(&self) -> Option<Vec<u64>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if !self.shared.send(Command::CachedBlocks(tx)) {
            return None;
        }
        rx.await.ok()
    }

    /// Stops admitting, lets running requests finish until `drain` has passed,
    /// aborts the rest and joins the engine thread. Idempotent.
    pub fn shutdown(&self, drain: Duration) {
        self.shared.shutting_down.store(true, Ordering::Release);
        self.shared.send(Command::Shutdown(drain));
        let thread = self.shared.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::error!("engine thread panicked");
            }
        }
    }
}

fn validate_request(req: &GenerateRequest, l: &Limits) -> Result<Option<KPolicy>, SubmitError> {
    if req.prompt_ids.is_empty() {
        return Err(SubmitError::EmptyPrompt);
    }
    if let Some((i, t)) = req
        .prompt_ids
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= l.vocab_size)
    {
        return Err(SubmitError::Invalid(format!(
            "prompt token id {t} at position {i} is outside the vocabulary (size {})",
            l.vocab_size
        )));
    }
    if let Some(t) = req
        .stop_token_ids
        .iter()
        .find(|&&t| t as usize >= l.vocab_size)
    {
        return Err(SubmitError::Invalid(format!(
            "stop token id {t} is outside the vocabulary (size {})",
            l.vocab_size
        )));
    }
    if let Some((t, _)) = req
        .sampling
        .logit_bias
        .iter()
        .find(|(t, _)| *t as usize >= l.vocab_size)
    {
        return Err(SubmitError::Invalid(format!(
            "logit_bias token id {t} is outside the vocabulary (size {})",
            l.vocab_size
        )));
    }
    if req.max_tokens == 0 {
        return Err(SubmitError::Invalid("max_tokens must be at least 1".into()));
    }
    if req.prompt_ids.len() + req.max_tokens as usize > l.max_model_len {
        return Err(SubmitError::TooLong {
            prompt: req.prompt_ids.len(),
            max_tokens: req.max_tokens as usize,
            max_len: l.max_model_len,
        });
    }
    validate_sampling(&req.sampling).map_err(SubmitError::Invalid)?;
    let Some(k) = req.spec.k_policy.as_deref() else {
        return Ok(None);
    };
    if !l.spec_enabled {
        // Nothing to override: speculation is off on this server.
        return Ok(None);
    }
    let p = KPolicy::parse_override(k).map_err(|e| SubmitError::Invalid(format!("{e:#}")))?;
    if p == KPolicy::Adaptive && !l.adaptive_ready {
        return Err(SubmitError::Invalid(
            "k_policy \"adaptive\" needs a server started with --k-policy adaptive (it measures the step-cost model at start-up)".into(),
        ));
    }
    Ok(Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_model_len: 100,
            vocab_size: 50,
            max_waiting: 4,
            spec_enabled: true,
            adaptive_ready: false,
        }
    }

    fn req(prompt: Vec<u32>, max_tokens: u32) -> GenerateRequest {
        GenerateRequest {
            prompt_ids: prompt,
            max_tokens,
            ..Default::default()
        }
    }

    #[test]
    fn request_validation_gives_precise_errors() {
        let l = limits();
        assert!(matches!(
            validate_request(&req(vec![], 5), &l),
            Err(SubmitError::EmptyPrompt)
        ));
        let e = validate_request(&req(vec![1, 99], 5), &l).unwrap_err();
        assert!(e.to_string().contains("token id 99 at position 1"), "{e}");
        assert!(matches!(
            validate_request(&req(vec![1; 90], 20), &l),
            Err(SubmitError::TooLong {
                prompt: 90,
                max_tokens: 20,
                max_len: 100
            })
        ));
        assert!(validate_request(&req(vec![1], 0), &l).is_err());
        let mut r = req(vec![1], 5);
        r.sampling.top_p = 0.0;
        assert!(validate_request(&r, &l)
            .unwrap_err()
            .to_string()
            .contains("top_p"));
        let mut r = req(vec![1], 5);
        r.spec.k_policy = Some("fixed:4".into());
        assert_eq!(validate_request(&r, &l).unwrap(), Some(KPolicy::Fixed(4)));
        r.spec.k_policy = Some("adaptive".into());
        assert!(validate_request(&r, &l)
            .unwrap_err()
            .to_string()
            .contains("adaptive"));
        r.spec.k_policy = Some("fixed:nope".into());
        assert!(validate_request(&r, &l).is_err());
        assert!(validate_request(&req(vec![1; 90], 10), &l).is_ok());
    }
}
