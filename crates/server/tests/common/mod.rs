//! Helpers for the server's tests: the default model on a real engine, served on
//! loopback, driven over HTTP.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wring_engine::{Engine, EngineConfig, EngineHandle, EngineInfo, SpecConfig};
use wring_model::{Device, LoadFormat, ModelSpec, RunnerOptions};
use wring_server::{AppState, ServerConfig};

pub const KEY: &str = "k3y";

pub fn start_engine(max_num_seqs: usize, max_waiting: usize) -> (EngineHandle, EngineInfo) {
    start_engine_with(max_num_seqs, max_waiting, SpecConfig::default())
}

pub fn start_engine_with(
    max_num_seqs: usize,
    max_waiting: usize,
    spec: SpecConfig,
) -> (EngineHandle, EngineInfo) {
    let model = wring_model::load_model(&ModelSpec {
        model: None,
        load_format: LoadFormat::Auto,
        model_shape: None,
    })
    .expect("the default model loads (run `wring pull` first)");
    let opts = RunnerOptions {
        device: Device::Cpu,
        kv_cache_bytes: 128 << 20,
        block_size: 16,
        max_num_seqs,
        max_model_len: 2048,
        ..RunnerOptions::default()
    };
    let cfg = EngineConfig {
        max_num_seqs,
        max_waiting,
        max_model_len: 2048,
        spec,
        ..EngineConfig::default()
    };
    Engine::start(model, opts, cfg).expect("engine starts")
}

pub struct TestServer {
    pub base: String,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<anyhow::Result<()>>,
}

pub async fn serve(engine: (EngineHandle, EngineInfo), config: ServerConfig) -> TestServer {
    let listener =
        wring_server::listen::bind("127.0.0.1:0".parse().unwrap(), config.listen.backlog).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = AppState::new(engine.0, engine.1, config);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // Only an explicit `shutdown()` stops the server (a dropped sender must not
    // shut down the engine the other tests share).
    let served = tokio::spawn(wring_server::serve(listener, state, async move {
        if rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    }));
    TestServer {
        base,
        http: reqwest::Client::new(),
        stop: Some(tx),
        served,
    }
}

pub fn config() -> ServerConfig {
    ServerConfig {
        api_key: Some(KEY.into()),
        served_model_names: vec!["smol".into()],
        ..ServerConfig::default()
    }
}

impl TestServer {
    pub fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(KEY)
            .json(body)
    }

    /// POST `body` to `path` and read the answer as JSON, whatever its status.
    pub async fn post_json(&self, path: &str, body: &Value) -> Value {
        answer_json(self.post(path, body)).await
    }

    /// GET `path` with the API key and read the answer as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        answer_json(
            self.http
                .get(format!("{}{path}", self.base))
                .bearer_auth(KEY),
        )
        .await
    }

    pub async fn metric(&self, name: &str) -> f64 {
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            // `name{phase="draft"}` picks the series carrying that label (among others).
            .find(|l| match name.split_once('{') {
                Some((base, label)) => {
                    l.starts_with(&format!("{base}{{")) && l.contains(label.trim_end_matches('}'))
                }
                None => l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")),
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics"))
    }

    /// Waits until nothing runs or waits and no KV block is held.
    pub async fn wait_idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (running, waiting, used) = (
                self.metric("vllm:num_requests_running").await,
                self.metric("vllm:num_requests_waiting").await,
                self.metric("wring:kv_blocks_used").await,
            );
            if running == 0.0 && waiting == 0.0 && used == 0.0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not idle: running {running} waiting {waiting} kv used {used}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(60), self.served)
            .await
            .expect("serve returns after shutdown")
            .unwrap()
    }
}

/// Reads an SSE response into its `data:` payloads.
pub async fn sse_payloads(resp: reqwest::Response) -> Vec<String> {
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let body = resp.text().await.unwrap();
    body.split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(str::to_string)
        .collect()
}

pub fn chat_body(content: &str, max_tokens: u32) -> Value {
    json!({"model": "smol", "messages": [{"role": "user", "content": content}],
           "max_tokens": max_tokens, "temperature": 0})
}

/// Shared by the tests that leave the engine running and idle.
pub fn shared_engine() -> (EngineHandle, EngineInfo) {
    static ENGINE: std::sync::OnceLock<(EngineHandle, EngineInfo)> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| start_engine(8, 64)).clone()
}

/// Sends `request` and reads the answer as JSON, whatever its status.
async fn answer_json(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}
