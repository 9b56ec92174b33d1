//! The OpenAI surface beyond plain generation, over a real engine on loopback:
//! CORS preflights, 415 and the other early 4xx, `n` samples that share the
//! prompt's KV blocks through the prefix cache, batched prompts with `echo`,
//! `/tokenize` + `/detokenize`, the `max_tokens` default, and structured-output
//! fields checked against the real tokenizer.

mod common;

use common::*;
use serde_json::{json, Value};
use wring_server::ServerConfig;

async fn json_of(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflights_are_answered_before_the_key_check() {
    // By default no origin may call from a browser: no CORS headers at all.
    let closed = serve(shared_engine(), config()).await;
    for method in [reqwest::Method::OPTIONS, reqwest::Method::GET] {
        let r = closed
            .http
            .request(method.clone(), format!("{}/v1/models", closed.base))
            .bearer_auth(KEY)
            .header("Origin", "http://app.test")
            .header("Access-Control-Request-Method", "GET")
            .send()
            .await
            .unwrap();
        assert!(
            r.headers().get("access-control-allow-origin").is_none(),
            "{method}: CORS must be off unless the operator asks"
        );
    }
    // `--allowed-origins '*'`: any origin.
    let srv = serve(
        shared_engine(),
        ServerConfig {
            allowed_origins: vec!["*".into()],
            ..config()
        },
    )
    .await;
    let preflight = srv
        .http
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/v1/chat/completions", srv.base),
        )
        .header("Origin", "http://app.test")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization,content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 200);
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    assert!(h["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    assert!(h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("authorization"));
    let models = srv
        .http
        .get(format!("{}/v1/models", srv.base))
        .bearer_auth(KEY)
        .header("Origin", "http://app.test")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    assert_eq!(models.headers()["access-control-allow-origin"], "*");

    // A listed origin only.
    let only = serve(
        shared_engine(),
        ServerConfig {
            allowed_origins: vec!["http://app.test".into()],
            ..config()
        },
    )
    .await;
    for (origin, allowed) in [("http://app.test", true), ("http://evil.test", false)] {
        let r = only
            .http
            .request(reqwest::Method::OPTIONS, format!("{}/v1/models", only.base))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "GET")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers().get("access-control-allow-origin").is_some(),
            allowed,
            "{origin}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_client_errors() {
    let srv = serve(shared_engine(), config()).await;
    let r = srv
        .http
        .post(format!("{}/v1/chat/completions", srv.base))
        .bearer_auth(KEY)
        .header("Content-Type", "text/plain")
        .body(chat_body("hi", 2).to_string())
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(r).await;
    assert_eq!(status, 415);
    assert_eq!(body["error"]["code"], "unsupported_media_type");
    let cases = [
        (
            json!({"messages": [{"role": "user", "content": null}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"}),
            "tool_choice",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}],
                   "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}}),
            "response_format",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "guided_regex": "(unclosed"}),
            "guided_regex",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"999999": 5}}),
            "logit_bias",
        ),
    ];
    for (body, param) in cases {
        let (status, err) = json_of(
            srv.post("/v1/chat/completions", &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"]["param"], param, "{body}: {err}");
    }
    // A valid constraint is enforced (crates/server/tests/structured_output.rs).
    let valid = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "guided_choice": ["yes", "no"]});
    let (status, r) = json_of(
        srv.post("/v1/chat/completions", &valid)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert!(
        ["yes", "no"].contains(&r["choices"][0]["message"]["content"].as_str().unwrap()),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_samples_share_the_prompt_blocks_through_the_prefix_cache() {
    let srv = serve(shared_engine(), config()).await;
    // A prompt no other test sends, several blocks long.
    let prompt = "Samples share blocks: ".to_string()
        + &"the quick brown fox jumps over the lazy dog ".repeat(12);
    let hits_before = srv.metric("vllm:prefix_cache_hits_total").await;
    let body = json!({"model": "smol", "prompt": prompt, "n": 4, "max_tokens": 8,
                      "temperature": 1.0, "seed": 11});
    let (status, r) = json_of(srv.post("/v1/completions", &body).send().await.unwrap()).await;
    assert_eq!(status, 200, "{r}");
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    let prompt_tokens = r["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert!(prompt_tokens > 64, "{prompt_tokens}");
    let completion: u64 = 4 * 8;
    assert_eq!(r["usage"]["completion_tokens"], completion, "{r}");
    let hits = srv.metric("vllm:prefix_cache_hits_total").await - hits_before;
    let shareable = (prompt_tokens - 1) / 16 * 16;
    assert!(
        hits >= (3 * shareable) as f64,
        "3 siblings should each reuse {shareable} cached prompt tokens; hits grew by {hits}"
    );
    let texts: std::collections::HashSet<&str> = choices
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert!(texts.len() > 1, "sampled choices should differ: {texts:?}");
    // Seeded: the same request gives the same samples.
    let (_, again) = json_of(srv.post("/v1/completions", &body).send().await.unwrap()).await;
    assert_eq!(again["choices"], r["choices"]);
    srv.wait_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_prompts_with_echo_stream_and_non_stream_agree() {
    let srv = serve(shared_engine(), config()).await;
    let prompts = ["The capital of France is", "One, two, three,"];
    let body = json!({"model": "smol", "prompt": prompts, "n": 2, "max_tokens": 5,
                      "temperature": 0, "echo": true});
    let (status, r) = json_of(srv.post("/v1/completions", &body).send().await.unwrap()).await;
    assert_eq!(status, 200, "{r}");
    let texts: Vec<String> = r["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), 4);
    for (i, t) in texts.iter().enumerate() {
        assert!(t.starts_with(prompts[i / 2]), "choice {i}: {t:?}");
        assert!(
            t.len() > prompts[i / 2].len(),
            "choice {i} has no completion"
        );
    }
    assert_eq!(texts[0], texts[1], "greedy samples of one prompt are equal");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let payloads = sse_payloads(srv.post("/v1/completions", &streamed).send().await.unwrap()).await;
    assert_eq!(payloads.last().unwrap(), "[DONE]");
    let mut by_index = vec![String::new(); 4];
    let mut finished = 0;
    let mut usage = Value::Null;
    for p in &payloads[..payloads.len() - 1] {
        let v: Value = serde_json::from_str(p).unwrap();
        if !v["usage"].is_null() {
            usage = v["usage"].clone();
        }
        for c in v["choices"].as_array().unwrap() {
            by_index[c["index"].as_u64().unwrap() as usize] += c["text"].as_str().unwrap();
            finished += c["finish_reason"].is_string() as usize;
        }
    }
    assert_eq!(by_index, texts);
    assert_eq!(finished, 4);
    assert_eq!(usage, r["usage"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_and_detokenize_round_trip_and_match_chat_usage() {
    let srv = serve(shared_engine(), config()).await;
    let (status, t) = json_of(
        srv.post(
            "/tokenize",
            &json!({"prompt": "Hello world", "return_token_strs": true}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{t}");
    let tokens = t["tokens"].as_array().unwrap().clone();
    assert_eq!(t["count"], tokens.len());
    assert_eq!(t["max_model_len"], 2048);
    assert_eq!(t["token_strs"].as_array().unwrap().len(), tokens.len());
    let (_, d) = json_of(
        srv.post("/detokenize", &json!({"tokens": tokens}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        d["prompt"].as_str().unwrap().ends_with("Hello world"),
        "{d}"
    );
    let (status, e) = json_of(
        srv.post("/detokenize", &json!({"tokens": [1, -1]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, e["error"]["param"].as_str()),
        (400, Some("tokens"))
    );

    let messages = json!([{"role": "user", "content": "What is 2+2?"}]);
    let (_, t) = json_of(
        srv.post("/tokenize", &json!({"messages": messages}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let (_, chat) = json_of(
        srv.post(
            "/v1/chat/completions",
            &json!({"messages": messages, "max_tokens": 1}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(t["count"], chat["usage"]["prompt_tokens"]);
    // The key protects them like /v1.
    let r = srv
        .http
        .post(format!("{}/tokenize", srv.base))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_without_max_tokens_stops_at_the_server_default() {
    let srv = serve(
        shared_engine(),
        ServerConfig {
            max_tokens_default: 5,
            ..config()
        },
    )
    .await;
    let body = json!({"messages": [{"role": "user", "content": "Write a long story about a ship."}],
                      "temperature": 0});
    let (status, r) = json_of(
        srv.post("/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["completion_tokens"], 5);
    assert_eq!(r["choices"][0]["finish_reason"], "length");
}
