//! The server over a real engine with the default model, on loopback, driven over
//! HTTP: streaming shape and exact usage, admission (429), disconnects that free
//! every KV block, the body limit, and graceful shutdown with and without a drain.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use wring_engine::{KPolicy, ProposerKind, SpecConfig};
use wring_server::{AppState, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_chunks_concatenate_to_the_full_answer_with_exact_usage() {
    let srv = serve(shared_engine(), config()).await;
    let full: Value = srv
        .post_json("/v1/chat/completions", &chat_body("Name a fruit.", 12))
        .await;
    let mut body = chat_body("Name a fruit.", 12);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let payloads = sse_payloads(
        srv.post("/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;

    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        text,
        full["choices"][0]["message"]["content"].as_str().unwrap()
    );
    // The chunk before the usage chunk carries the finish reason; nothing after it has choices.
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage_chunk["usage"][field], full["usage"][field], "{field}");
    }
    let finish = &chunks[chunks.len() - 2]["choices"][0]["finish_reason"];
    assert_eq!(finish, &full["choices"][0]["finish_reason"]);
    let finishes = chunks
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .count();
    assert_eq!(finishes, 1);
    let u = &full["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    srv.wait_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_stream_reports_length_and_exact_token_count() {
    let srv = serve(shared_engine(), config()).await;
    let body = json!({"model": "smol", "prompt": "Once upon a time", "max_tokens": 9, "temperature": 0,
                      "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}, "logprobs": 1});
    let payloads = sse_payloads(srv.post("/v1/completions", &body).send().await.unwrap()).await;
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    let tokens: usize = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(tokens, 9);
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 9);
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnects_free_every_kv_block_and_the_server_keeps_answering() {
    let srv = serve(shared_engine(), config()).await;
    let mut long = chat_body("Write a long poem about the sea.", 500);
    long["ignore_eos"] = json!(true);
    long["stream"] = json!(true);
    for _ in 0..3 {
        let resp = srv
            .post("/v1/chat/completions", &long)
            .send()
            .await
            .unwrap();
        let mut bytes = resp.bytes_stream();
        let mut seen = 0;
        while let Some(chunk) = bytes.next().await {
            seen += String::from_utf8_lossy(&chunk.unwrap())
                .matches("data: ")
                .count();
            if seen >= 4 {
                break;
            }
        }
        assert!(srv.metric("wring:kv_blocks_used").await > 0.0 || seen >= 4);
        // Dropping the body closes the connection mid-stream.
    }
    // A non-streaming client that gives up.
    long["stream"] = json!(false);
    let gave_up = srv
        .post("/v1/chat/completions", &long)
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(gave_up.is_err());
    srv.wait_idle().await;
    let ok = srv
        .post("/v1/chat/completions", &chat_body("Hi", 2))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    srv.wait_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limit_and_auth_apply_before_any_work() {
    let cfg = ServerConfig {
        max_body_bytes: 1024,
        ..config()
    };
    let srv = serve(shared_engine(), cfg).await;
    let big = chat_body(&"x".repeat(4096), 2);
    let resp = srv.post("/v1/chat/completions", &big).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["type"], "invalid_request_error");
    let resp = srv
        .http
        .post(format!("{}/v1/completions", srv.base))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    // Health and metrics stay open without the key.
    let resp = srv
        .http
        .get(format!("{}/health", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_with_retry_after() {
    let srv = serve(start_engine(1, 1), config()).await;
    let mut long = chat_body("Count to one thousand.", 300);
    long["ignore_eos"] = json!(true);
    long["stream"] = json!(true);
    // A occupies the only running slot…
    let a = srv
        .post("/v1/chat/completions", &long)
        .send()
        .await
        .unwrap();
    let mut a_body = a.bytes_stream();
    a_body.next().await.unwrap().unwrap();
    // …B takes the only waiting slot…
    let b = srv.post("/v1/chat/completions", &long).send();
    let b = tokio::spawn(b);
    let deadline = Instant::now() + Duration::from_secs(30);
    // (A must be running too: right after its first chunk it can still be the one waiting.)
    while srv.metric("vllm:num_requests_running").await < 1.0
        || srv.metric("vllm:num_requests_waiting").await < 1.0
    {
        assert!(Instant::now() < deadline, "B never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // …so C is refused.
    let c = srv
        .post("/v1/chat/completions", &chat_body("Hi", 2))
        .send()
        .await
        .unwrap();
    assert_eq!(c.status(), 429);
    assert_eq!(c.headers()["retry-after"], "1");
    let err: Value = c.json().await.unwrap();
    assert_eq!(err["error"]["code"], "rate_limit_exceeded");
    drop(a_body);
    drop(b.await.unwrap().unwrap());
    srv.wait_idle().await;
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_running_requests_then_refuses_connections() {
    let srv = serve(start_engine(4, 16), config()).await;
    let mut body = chat_body("Tell me about cats.", 24);
    body["stream"] = json!(true);
    body["ignore_eos"] = json!(true);
    let resp = srv
        .post("/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    let base = srv.base.clone();
    let http = srv.http.clone();
    let stopped = tokio::spawn(srv.shutdown());
    let payloads = sse_payloads(resp).await;
    let finish: Value = serde_json::from_str(&payloads[payloads.len() - 2]).unwrap();
    assert_eq!(
        finish["choices"][0]["finish_reason"], "length",
        "drained request completes"
    );
    stopped.await.unwrap().unwrap();
    assert!(http.get(format!("{base}/health")).send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_drain_timeout_requests_end_with_an_error_event() {
    let cfg = ServerConfig {
        drain_timeout: Duration::from_millis(200),
        ..config()
    };
    let srv = serve(start_engine(4, 16), cfg).await;
    let mut body = chat_body("Tell me about dogs.", 1500);
    body["stream"] = json!(true);
    body["ignore_eos"] = json!(true);
    let resp = srv
        .post("/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    let started = Instant::now();
    let stopped = tokio::spawn(srv.shutdown());
    let payloads = sse_payloads(resp).await;
    let err: Value = serde_json::from_str(&payloads[payloads.len() - 2]).unwrap();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{err}"
    );
    stopped.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// The text, token count and SSE chunk sizes of one streamed completion.
async fn streamed_completion(srv: &TestServer, body: &Value) -> (String, Vec<usize>, Value) {
    let payloads = sse_payloads(srv.post("/v1/completions", body).send().await.unwrap()).await;
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    let text = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    let sizes = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array())
        .map(Vec::len)
        .collect();
    (text, sizes, chunks.last().unwrap()["usage"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_streams_carry_several_tokens_per_chunk_and_match_plain_greedy() {
    let spec = SpecConfig {
        method: ProposerKind::Suffix,
        k_policy: KPolicy::Fixed(4),
        ..SpecConfig::default()
    };
    let plain = serve(shared_engine(), config()).await;
    let spec_srv = serve(start_engine_with(4, 16, spec), config()).await;
    let body = json!({"model": "smol", "max_tokens": 24, "temperature": 0, "ignore_eos": true, "logprobs": 0,
                      "prompt": "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat",
                      "stream": true, "stream_options": {"include_usage": true}});
    let (want, _, _) = streamed_completion(&plain, &body).await;
    let (got, sizes, usage) = streamed_completion(&spec_srv, &body).await;
    assert_eq!(got, want, "speculation must not change greedy output");
    assert_eq!(sizes.iter().sum::<usize>(), 24);
    assert_eq!(usage["completion_tokens"], 24);
    assert!(
        usage["spec_decode"]["accepted_tokens"].as_u64().unwrap() > 0,
        "{usage}"
    );
    assert!(
        sizes.iter().any(|&n| n > 1),
        "accepted drafts arrive together: {sizes:?}"
    );
    assert!(
        spec_srv
            .metric("vllm:spec_decode_num_accepted_tokens_total")
            .await
            > 0.0
    );
    // Every step's time is split into the forward and the host work around it.
    let steps = spec_srv.metric("wring:engine_steps_total").await;
    let model = spec_srv
        .metric("wring:engine_step_model_seconds_total")
        .await;
    let host = spec_srv
        .metric("wring:engine_step_host_seconds_total")
        .await;
    assert!(
        steps > 0.0 && model > 0.0 && host > 0.0,
        "{steps} {model} {host}"
    );
    // The host part by phase, and admission outside steps.
    let draft = spec_srv
        .metric(r#"wring:engine_step_host_phase_seconds_total{phase="draft"}"#)
        .await;
    let wait = spec_srv
        .metric(r#"wring:engine_step_host_phase_seconds_total{phase="drafter_wait"}"#)
        .await;
    let admin = spec_srv.metric("wring:engine_admin_seconds_total").await;
    assert!(
        draft > 0.0 && draft + wait <= host && admin > 0.0,
        "{draft} {wait} {host} {admin}"
    );
    // Steps that carried prompt tokens (each request's first), and their forward time.
    let prefill_steps = spec_srv
        .metric("wring:engine_steps_with_prefill_total")
        .await;
    let prefill_model = spec_srv
        .metric("wring:engine_step_model_seconds_with_prefill_total")
        .await;
    assert!(
        prefill_steps >= 1.0
            && prefill_steps < steps
            && prefill_model > 0.0
            && prefill_model < model,
        "{prefill_steps} {steps} {prefill_model} {model}"
    );
    spec_srv.shutdown().await.unwrap();
}

#[test]
fn state_ids_are_unique() {
    let (engine, info) = shared_engine();
    let state: Arc<AppState> = AppState::new(engine, info, ServerConfig::default());
    let a = state.new_request_id("chatcmpl");
    let b = state.new_request_id("chatcmpl");
    assert_ne!(a, b);
    assert!(a.starts_with("chatcmpl-"));
    assert_eq!(state.model_name(), wring_model::DEFAULT_MODEL_NAME);
}
