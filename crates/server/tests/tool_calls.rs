//! Tool calls through the real default model. Its ChatML template has no tool
//! support, so the tools reach it as a Hermes system block; the conversation shows
//! one earlier call (an assistant `tool_calls` turn and a `tool` result), which the
//! 135M model follows. Named and `required` choices open the call in the prompt.

mod common;

use common::*;
use serde_json::{json, Value};

fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

fn conversation() -> Value {
    json!([
        {"role": "user", "content": "What is the weather in London?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"London\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature_c\": 14}"},
        {"role": "assistant", "content": "It is 14 degrees in London."},
        {"role": "user", "content": "What is the weather in Paris?"}
    ])
}

fn request(tool_choice: Value) -> Value {
    json!({"model": "smol", "messages": conversation(), "tools": tools(), "tool_choice": tool_choice,
           "temperature": 0, "max_tokens": 40})
}

fn assert_paris_call(call: &Value) {
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_calls_are_parsed_whole_and_streamed_as_deltas() {
    let srv = serve(shared_engine(), config()).await;
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    for choice in [named, json!("required")] {
        let r: Value = srv
            .post_json("/v1/chat/completions", &request(choice.clone()))
            .await;
        let c = &r["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{choice}: {r}");
        assert!(c["message"]["content"].is_null(), "{r}");
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{r}");
        assert_paris_call(&calls[0]);

        // Streamed: the first delta of the call has its id and name, the rest the
        // arguments; no content delta carries call markup.
        let mut body = request(choice.clone());
        body["stream"] = json!(true);
        let payloads = sse_payloads(
            srv.post("/v1/chat/completions", &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        let (mut content, mut id, mut name, mut args, mut finish) = (
            String::new(),
            Value::Null,
            String::new(),
            String::new(),
            Value::Null,
        );
        for p in &payloads[..payloads.len() - 1] {
            let v: Value = serde_json::from_str(p).unwrap();
            let ch = &v["choices"][0];
            content += ch["delta"]["content"].as_str().unwrap_or("");
            for d in ch["delta"]["tool_calls"].as_array().into_iter().flatten() {
                assert_eq!(d["index"], 0);
                if !d["id"].is_null() {
                    id = d["id"].clone();
                }
                name += d["function"]["name"].as_str().unwrap_or("");
                args += d["function"]["arguments"].as_str().unwrap();
            }
            if !ch["finish_reason"].is_null() {
                finish = ch["finish_reason"].clone();
            }
        }
        assert_eq!(content, "", "{choice}: {payloads:?}");
        assert_paris_call(
            &json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}),
        );
        assert_eq!(finish, "tool_calls");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_call_and_its_result_continue_the_conversation() {
    let srv = serve(shared_engine(), config()).await;
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let r: Value = srv.post_json("/v1/chat/completions", &request(named)).await;
    let message = r["choices"][0]["message"].clone();
    let call_id = message["tool_calls"][0]["id"].clone();
    let mut messages = conversation().as_array().unwrap().clone();
    messages.push(message);
    messages.push(
        json!({"role": "tool", "tool_call_id": call_id, "content": "{\"temperature_c\": 18}"}),
    );
    let body = json!({"model": "smol", "messages": messages, "tools": tools(), "temperature": 0, "max_tokens": 16});
    let resp = srv
        .post("/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let r: Value = resp.json().await.unwrap();
    assert!(r["choices"][0]["message"]["content"].is_string(), "{r}");
    // With tool_choice none the tools are not offered and nothing is parsed.
    let mut none = request(json!("none"));
    none["max_tokens"] = json!(12);
    let r: Value = srv.post_json("/v1/chat/completions", &none).await;
    assert!(
        r["choices"][0]["message"].get("tool_calls").is_none(),
        "{r}"
    );
    assert_ne!(r["choices"][0]["finish_reason"], "tool_calls");
}
