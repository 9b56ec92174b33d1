//! Structured output over HTTP on the real default model: `response_format`
//! (`json_object`, `json_schema`), vLLM's `guided_*` and `structured_outputs`
//! extras, and forced tool calls, all enforced while decoding. A 135M model writes
//! poor content, but the grammar guarantees the shape, which is what is asserted.

mod common;

use common::*;
use serde_json::{json, Value};

async fn post(srv: &TestServer, path: &str, body: &Value) -> Value {
    let resp = srv.post(path, body).send().await.unwrap();
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{body}: {v}");
    v
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false
    })
}

fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let o = v.as_object().unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(o.len(), 3, "{text}");
    assert!(
        o["name"].as_str().is_some_and(|n| n.chars().count() <= 20),
        "{text}"
    );
    assert!(
        o["age"].as_i64().is_some_and(|a| (0..=130).contains(&a)),
        "{text}"
    );
    let pets = o["pets"].as_array().unwrap_or_else(|| panic!("{text}"));
    assert!(pets.len() <= 3, "{text}");
    for p in pets {
        assert!(
            ["cat", "dog", "fish"].contains(&p.as_str().unwrap()),
            "{text}"
        );
    }
}

/// Whether `text` has whitespace outside JSON string literals.
fn has_layout_whitespace(text: &str) -> bool {
    let (mut in_str, mut esc) = (false, false);
    for c in text.chars() {
        match (in_str, esc, c) {
            (true, true, _) => esc = false,
            (true, false, '\\') => esc = true,
            (_, false, '"') => in_str = !in_str,
            (false, _, c) if c.is_whitespace() => return true,
            _ => {}
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_format_json_schema_and_json_object_are_enforced() {
    let srv = serve(shared_engine(), config()).await;
    let mut body = chat_body("Describe a person and their pets as JSON.", 80);
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": person_schema(), "strict": true}});
    let r = post(&srv, "/v1/chat/completions", &body).await;
    let c = &r["choices"][0];
    assert_eq!(c["finish_reason"], "stop", "{r}");
    check_person(c["message"]["content"].as_str().unwrap());

    // Streamed json_object: the deltas add up to one JSON object.
    let mut body = chat_body("Give me a small JSON object about cats.", 60);
    body["response_format"] = json!({"type": "json_object"});
    body["stream"] = json!(true);
    let payloads = sse_payloads(
        srv.post("/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let (mut text, mut finish) = (String::new(), Value::Null);
    for p in payloads.iter().filter(|p| p.as_str() != "[DONE]") {
        let v: Value = serde_json::from_str(p).unwrap();
        text += v["choices"][0]["delta"]["content"].as_str().unwrap_or("");
        if !v["choices"][0]["finish_reason"].is_null() {
            finish = v["choices"][0]["finish_reason"].clone();
        }
    }
    if finish == "stop" {
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(v.is_object(), "{text}");
    } else {
        assert_eq!(finish, "length");
        assert!(text.trim_start().starts_with('{'), "{text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guided_choice_regex_and_structured_outputs_on_both_endpoints() {
    let srv = serve(shared_engine(), config()).await;
    // Two prompts, two sampled choices each: every one of them is constrained.
    let body = json!({"model": "smol", "prompt": ["The weather today is", "My favourite colour is"],
                      "n": 2, "max_tokens": 8, "temperature": 1.0, "seed": 3,
                      "guided_choice": ["sunny", "rainy", "green"]});
    let r = post(&srv, "/v1/completions", &body).await;
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    for c in choices {
        assert!(
            ["sunny", "rainy", "green"].contains(&c["text"].as_str().unwrap()),
            "{r}"
        );
        assert_eq!(c["finish_reason"], "stop", "{r}");
    }

    let mut body = chat_body("What is the order number?", 20);
    body["guided_regex"] = json!("ORD-[0-9]{4}");
    let r = post(&srv, "/v1/chat/completions", &body).await;
    let text = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.len() == 8
            && text.starts_with("ORD-")
            && text[4..].chars().all(|c| c.is_ascii_digit()),
        "{text:?}"
    );
    assert_eq!(r["choices"][0]["finish_reason"], "stop");

    // vLLM's newer object, with its JSON layout option: no whitespace at all.
    let mut body = chat_body("Describe a person and their pets as JSON.", 80);
    body["structured_outputs"] = json!({"json": person_schema(), "disable_any_whitespace": true});
    let r = post(&srv, "/v1/chat/completions", &body).await;
    let text = r["choices"][0]["message"]["content"].as_str().unwrap();
    check_person(text);
    assert!(!has_layout_whitespace(text), "{text:?}");

    // A GBNF grammar through `guided_grammar`.
    let mut body = chat_body("List some directions.", 16);
    body["guided_grammar"] =
        json!("root ::= dir (\",\" dir)*\ndir ::= \"N\" | \"S\" | \"E\" | \"W\"");
    let r = post(&srv, "/v1/chat/completions", &body).await;
    let text = r["choices"][0]["message"]["content"].as_str().unwrap();
    let complete = r["choices"][0]["finish_reason"] == "stop";
    let parts: Vec<&str> = text.split(',').collect();
    let checked = if complete {
        parts.len()
    } else {
        parts.len() - 1
    };
    for p in &parts[..checked] {
        assert!(["N", "S", "E", "W"].contains(p), "{text:?}");
    }
}

fn two_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "Local time in a time zone",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                "required": ["zone"], "additionalProperties": false}}}
    ])
}

/// A call's arguments are valid under the schema of the function it names.
fn check_call(name: &str, arguments: &str) {
    let args: Value =
        serde_json::from_str(arguments).unwrap_or_else(|e| panic!("{e}: {arguments:?}"));
    let o = args.as_object().unwrap();
    match name {
        "get_weather" => {
            assert!(o["city"].is_string(), "{arguments}");
            assert!(
                ["celsius", "fahrenheit"].contains(&o["unit"].as_str().unwrap()),
                "{arguments}"
            );
            assert_eq!(o.len(), 2, "{arguments}");
        }
        "get_time" => {
            assert!(o["zone"].is_string(), "{arguments}");
            assert_eq!(o.len(), 1, "{arguments}");
        }
        other => panic!("unknown function {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_calls_always_parse_against_the_tool_schema() {
    let srv = serve(shared_engine(), config()).await;
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    for (choice, prompt) in [
        (json!("required"), "What time is it in Tokyo?"),
        (json!("required"), "Is it raining in Oslo?"),
        (named, "Hello there!"),
    ] {
        let body = json!({"model": "smol", "messages": [{"role": "user", "content": prompt}],
                          "tools": two_tools(), "tool_choice": choice, "temperature": 0, "max_tokens": 60});
        let r = post(&srv, "/v1/chat/completions", &body).await;
        let c = &r["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{choice}: {r}");
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{r}");
        let f = &calls[0]["function"];
        if choice.is_object() {
            assert_eq!(f["name"], "get_time");
        }
        check_call(
            f["name"].as_str().unwrap(),
            f["arguments"].as_str().unwrap(),
        );

        // Streamed: the deltas carry the same call.
        let mut body = body.clone();
        body["stream"] = json!(true);
        let payloads = sse_payloads(
            srv.post("/v1/chat/completions", &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        let (mut name, mut args, mut finish) = (String::new(), String::new(), Value::Null);
        for p in payloads.iter().filter(|p| p.as_str() != "[DONE]") {
            let v: Value = serde_json::from_str(p).unwrap();
            let ch = &v["choices"][0];
            for d in ch["delta"]["tool_calls"].as_array().into_iter().flatten() {
                name += d["function"]["name"].as_str().unwrap_or("");
                args += d["function"]["arguments"].as_str().unwrap_or("");
            }
            if !ch["finish_reason"].is_null() {
                finish = ch["finish_reason"].clone();
            }
        }
        assert_eq!(finish, "tool_calls", "{payloads:?}");
        assert_eq!(name, f["name"].as_str().unwrap());
        check_call(&name, &args);
    }
}
