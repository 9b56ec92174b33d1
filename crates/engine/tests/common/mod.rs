//! Helpers for the engine's tests on the real default model.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use wring_engine::{
    Engine, EngineConfig, EngineEvent, EngineHandle, EngineInfo, FinishReason, GenerateRequest,
    RequestHandle, SpecConfig, Usage,
};
use wring_model::{LoadedModel, ModelSpec, RunnerOptions};

/// The repository's test data (`tests/data`: golden outputs, a trace, corpus fixtures; see its README).
pub fn test_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

pub fn load_default() -> LoadedModel {
    wring_model::load_model(&ModelSpec::default()).expect("default model loads (run `wring pull`)")
}

pub fn runner_opts(kv_mib: usize, max_model_len: usize) -> RunnerOptions {
    RunnerOptions {
        kv_cache_bytes: kv_mib << 20,
        max_model_len,
        ..RunnerOptions::default()
    }
}

pub fn start(cfg: EngineConfig) -> (EngineHandle, EngineInfo) {
    start_with(cfg, runner_opts(512, 2048))
}

pub fn start_with(cfg: EngineConfig, opts: RunnerOptions) -> (EngineHandle, EngineInfo) {
    Engine::start(load_default(), opts, cfg).expect("engine starts")
}

pub fn config(max_num_seqs: usize, spec: SpecConfig) -> EngineConfig {
    EngineConfig {
        max_num_seqs,
        max_model_len: 2048,
        spec,
        ..EngineConfig::default()
    }
}

pub fn greedy(prompt: &[u32], max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        request_id: "test".into(),
        prompt_ids: prompt.to_vec(),
        max_tokens,
        ..Default::default()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub ids: Vec<u32>,
    pub text: String,
    pub reason: Option<FinishReason>,
    pub usage: Usage,
    pub error: Option<String>,
    pub events: usize,
}

pub fn collect(mut h: RequestHandle) -> Outcome {
    let mut o = Outcome::default();
    while let Some(ev) = h.events.blocking_recv() {
        o.events += 1;
        match ev {
            EngineEvent::Tokens { ids, text, .. } => {
                o.ids.extend(ids);
                o.text.push_str(&text);
            }
            EngineEvent::Finished { reason, usage } => {
                o.reason = Some(reason);
                o.usage = usage;
                break;
            }
            EngineEvent::Error { message } => {
                o.error = Some(message);
                break;
            }
        }
    }
    o
}

/// Submits every request at once (so they batch), then collects each.
pub fn run_all(engine: &EngineHandle, reqs: Vec<GenerateRequest>) -> Vec<Outcome> {
    let handles: Vec<RequestHandle> = reqs
        .into_iter()
        .map(|r| engine.submit(r).expect("request accepted"))
        .collect();
    handles.into_iter().map(collect).collect()
}

/// Submits with at most `concurrency` requests in flight.
pub fn run_with_concurrency(
    engine: &EngineHandle,
    reqs: Vec<GenerateRequest>,
    concurrency: usize,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    for chunk in reqs.chunks(concurrency.max(1)) {
        out.extend(run_all(engine, chunk.to_vec()));
    }
    out
}

/// Metrics once the engine has nothing running or waiting (the snapshot is
/// published after the step that sent the last event, so it can lag a moment).
pub fn wait_idle(engine: &EngineHandle) -> wring_engine::MetricsSnapshot {
    let t = std::time::Instant::now();
    loop {
        let m = engine.metrics();
        if m.running == 0 && m.waiting == 0 {
            return m;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "engine did not go idle: {m:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn stop(engine: EngineHandle) {
    engine.shutdown(Duration::from_secs(5));
}

/// A real request trace (see tests/data/traces/README.md).
#[derive(Debug, Clone)]
pub struct TracePrompt {
    pub corpus: String,
    pub prompt_ids: Vec<u32>,
}

/// The prompts of the test trace: prompts in the style of every corpus, rendered
/// through the default model's chat template and tokenised.
pub fn trace_prompts() -> &'static [TracePrompt] {
    static P: OnceLock<Vec<TracePrompt>> = OnceLock::new();
    P.get_or_init(|| {
        let path = test_data_dir().join("traces/smollm2_f32_greedy_24.jsonl");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("trace line is JSON");
                TracePrompt {
                    corpus: v["corpus"].as_str().expect("corpus").to_string(),
                    prompt_ids: v["prompt_ids"]
                        .as_array()
                        .expect("prompt_ids")
                        .iter()
                        .map(|x| x.as_u64().expect("id") as u32)
                        .collect(),
                }
            })
            .collect()
    })
}

/// The `n` shortest prompts of each corpus (bounded by `max_len` tokens).
pub fn short_prompts_per_corpus(n: usize, max_len: usize) -> Vec<TracePrompt> {
    let all = trace_prompts();
    let mut corpora: Vec<&str> = all.iter().map(|p| p.corpus.as_str()).collect();
    corpora.dedup();
    let mut out = Vec::new();
    for c in corpora {
        let mut ps: Vec<&TracePrompt> = all
            .iter()
            .filter(|p| p.corpus == c && p.prompt_ids.len() <= max_len)
            .collect();
        ps.sort_by_key(|p| p.prompt_ids.len());
        out.extend(ps.into_iter().take(n).cloned());
    }
    out
}

/// The real runner seen from outside: `on_step` is called with every step it runs, and it
/// reports `captured` as the query lengths it captures (what a CUDA runner would say) and
/// `warm_up` as its warm-up shapes, keeping the query lengths the engine asked them for in
/// `asked`.
pub struct ObservedRunner {
    pub inner: Box<dyn wring_model::runner::ModelRunner>,
    pub on_step: Box<dyn FnMut(&wring_model::runner::StepInput) + Send>,
    pub captured: Option<Vec<usize>>,
    pub warm_up: Vec<wring_model::runner::WarmUpStep>,
    pub asked: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
}

impl ObservedRunner {
    pub fn new(
        inner: Box<dyn wring_model::runner::ModelRunner>,
        on_step: impl FnMut(&wring_model::runner::StepInput) + Send + 'static,
    ) -> Self {
        Self {
            inner,
            on_step: Box::new(on_step),
            captured: None,
            warm_up: Vec::new(),
            asked: Default::default(),
        }
    }
}

impl wring_model::runner::ModelRunner for ObservedRunner {
    fn forward(
        &mut self,
        step: &wring_model::runner::StepInput,
    ) -> anyhow::Result<wring_model::runner::Logits> {
        (self.on_step)(step);
        self.inner.forward(step)
    }
    fn forward_greedy(
        &mut self,
        step: &wring_model::runner::StepInput,
    ) -> anyhow::Result<Option<Vec<u32>>> {
        (self.on_step)(step);
        self.inner.forward_greedy(step)
    }
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> usize {
        self.inner.num_blocks()
    }
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn device_name(&self) -> String {
        self.inner.device_name()
    }
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        self.captured.clone()
    }
    fn warm_up_steps(
        &self,
        query_lens: &[usize],
        _max_seqs: usize,
        _max_tokens: usize,
    ) -> Vec<wring_model::runner::WarmUpStep> {
        *self.asked.lock().unwrap() = query_lens.to_vec();
        self.warm_up.clone()
    }
}
