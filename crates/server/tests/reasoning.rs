//! Reasoning models over HTTP, on the tiny transformers-made Qwen3 of tests/data/hf_tiny
//! (its own chat template, with Qwen3's `enable_thinking` switch, and a DeepSeek-R1-style
//! variant that opens `<think>` in the prompt). Its random weights never close a thinking
//! block, so outputs are scripted with `replay_output` (`--replay-outputs`, the benchmark
//! mode: the engine runs every step and emits the recording's tokens), and structured
//! output is checked on the model's own greedy tokens, steered with `logit_bias`.
//!
//! Covered: `reasoning_content` / `reasoning` beside `content`, whole and streamed, the
//! stream's pieces adding up to the whole response (also with speculation, whose deltas
//! carry several tokens, and with `</think>` spelled in pieces across deltas);
//! `enable_thinking: false` through `chat_template_kwargs`, the server's defaults and
//! `reasoning_effort`; a block that never closes (`max_tokens`); tool calls parsed from the
//! answer only; the R1 style; a grammar that binds only the answer; and the 400s.

mod common;

use std::sync::{Arc, OnceLock};

use common::*;
use serde_json::{json, Value};
use wring_engine::{
    Engine, EngineConfig, EngineHandle, EngineInfo, KPolicy, ProposerKind, SpecConfig,
};
use wring_model::{ChatTemplate, Device, LoadFormat, ModelSpec, RunnerOptions};
use wring_server::reasoning::ParserChoice;
use wring_server::ServerConfig;

/// DeepSeek-R1's style: the generation prompt opens the block, so the output starts
/// inside it with no opening tag.
const R1_TEMPLATE: &str = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";

fn tiny_dir() -> String {
    format!(
        "{}/../../tests/data/hf_tiny/qwen3",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn start_tiny(spec: SpecConfig) -> (EngineHandle, EngineInfo) {
    let model = wring_model::load_model(&ModelSpec {
        model: Some(tiny_dir()),
        load_format: LoadFormat::Auto,
        model_shape: None,
    })
    .expect("the tiny Qwen3 loads");
    let opts = RunnerOptions {
        device: Device::Cpu,
        kv_cache_bytes: 16 << 20,
        block_size: 16,
        max_num_seqs: 4,
        max_model_len: 1024,
        ..RunnerOptions::default()
    };
    let cfg = EngineConfig {
        max_num_seqs: 4,
        max_waiting: 64,
        max_model_len: 1024,
        replay_outputs: true,
        spec,
        ..EngineConfig::default()
    };
    Engine::start(model, opts, cfg).expect("engine starts")
}

/// The tiny Qwen3 without speculation, and with suffix drafts (several tokens a delta).
fn engines() -> &'static [(EngineHandle, EngineInfo); 2] {
    static E: OnceLock<[(EngineHandle, EngineInfo); 2]> = OnceLock::new();
    E.get_or_init(|| {
        let spec = SpecConfig {
            method: ProposerKind::Suffix,
            k_policy: KPolicy::Fixed(4),
            ..SpecConfig::default()
        };
        [start_tiny(SpecConfig::default()), start_tiny(spec)]
    })
}

fn tiny_config() -> ServerConfig {
    ServerConfig {
        replay_outputs: true,
        ..config()
    }
}

/// A server over one of the shared engines (dropped, not shut down: that would stop the
/// engine the other tests share).
async fn serve_tiny(which: usize, cfg: ServerConfig, template: Option<&str>) -> TestServer {
    let (engine, mut info) = engines()[which].clone();
    if let Some(src) = template {
        info.chat_template = Some(Arc::new(ChatTemplate::new(src, "", "<|im_end|>").unwrap()));
    }
    serve((engine, info), cfg).await
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body = chat_body(content, 64);
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

async fn post_ok(s: &TestServer, body: &Value) -> Value {
    let resp = s.post("/v1/chat/completions", body).send().await.unwrap();
    let status = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

async fn post_err(s: &TestServer, body: &Value) -> Value {
    let resp = s.post("/v1/chat/completions", body).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    resp.json().await.unwrap()
}

/// A streamed chat answer: its reasoning and content deltas joined, the order in which
/// kinds arrived ('r', 'c', 't' for tool calls, without repeats), the finish reason and
/// the tool calls' names and arguments.
#[derive(Debug, Default, PartialEq)]
struct Streamed {
    reasoning: String,
    reasoning_alias: String,
    content: String,
    order: String,
    finish: Option<String>,
    calls: Vec<(String, String)>,
}

async fn stream(s: &TestServer, body: &Value) -> Streamed {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let resp = s.post("/v1/chat/completions", &body).send().await.unwrap();
    let mut out = Streamed::default();
    for p in sse_payloads(resp).await {
        if p == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&p).unwrap();
        assert!(v.get("error").is_none(), "{v}");
        let choice = &v["choices"][0];
        let d = &choice["delta"];
        let mut kind = |k: char| {
            if !out.order.ends_with(k) {
                out.order.push(k);
            }
        };
        if let Some(r) = d["reasoning_content"].as_str() {
            assert!(!r.is_empty(), "an empty reasoning delta: {v}");
            out.reasoning.push_str(r);
            out.reasoning_alias
                .push_str(d["reasoning"].as_str().expect("both names"));
            kind('r');
        }
        if let Some(c) = d["content"].as_str().filter(|c| !c.is_empty()) {
            out.content.push_str(c);
            kind('c');
        }
        if let Some(calls) = d["tool_calls"].as_array() {
            for c in calls {
                let f = &c["function"];
                if let Some(name) = f["name"].as_str() {
                    out.calls.push((name.into(), String::new()));
                }
                if let Some(a) = f["arguments"].as_str() {
                    out.calls.last_mut().unwrap().1.push_str(a);
                }
            }
            kind('t');
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            out.finish = Some(f.into());
        }
    }
    out
}

/// Checks the whole response against the stream of the same request.
fn same_as_stream(whole: &Value, streamed: &Streamed) {
    let m = &whole["choices"][0]["message"];
    assert_eq!(
        m["reasoning_content"].as_str().unwrap_or(""),
        streamed.reasoning,
        "{whole}"
    );
    assert_eq!(streamed.reasoning, streamed.reasoning_alias);
    assert_eq!(
        m["content"].as_str().unwrap_or(""),
        streamed.content,
        "{whole}"
    );
    assert_eq!(
        whole["choices"][0]["finish_reason"].as_str(),
        streamed.finish.as_deref()
    );
}

fn replay(text: &str) -> Value {
    json!({"replay_output": text})
}

#[tokio::test]
async fn thinking_is_split_from_the_answer_whole_and_streamed() {
    let recording = "<think>\nThe user asks for France's capital.\n</think>\n\nParis.";
    for which in [0, 1] {
        let s = serve_tiny(which, tiny_config(), None).await;
        let models: Value = s.get_json("/v1/models").await;
        assert_eq!(models["data"][0]["reasoning_parser"], "qwen3", "{models}");
        let body = chat("What is the capital of France?", replay(recording));
        // Twice: the second time the drafter knows the output, so deltas carry runs of
        // tokens and `</think>` arrives inside one.
        for _ in 0..2 {
            let v = post_ok(&s, &body).await;
            let m = &v["choices"][0]["message"];
            assert_eq!(
                m["reasoning_content"], "\nThe user asks for France's capital.\n",
                "{v}"
            );
            assert_eq!(m["reasoning"], m["reasoning_content"]);
            assert_eq!(m["content"], "\n\nParis.");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
            let st = stream(&s, &body).await;
            same_as_stream(&v, &st);
            assert_eq!(st.order, "rc", "thinking first, then the answer: {st:?}");
        }
        // The response message goes back as history (vLLM's shape, both names).
        let v = post_ok(&s, &body).await;
        let mut messages = body["messages"].as_array().unwrap().clone();
        messages.push(v["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": "And of Spain?"}));
        let again =
            json!({"model": "smol", "messages": messages, "max_tokens": 4, "temperature": 0});
        post_ok(&s, &again).await;
        drop(s);
    }
}

#[tokio::test]
async fn a_tag_split_across_tokens_and_deltas_splits_as_one_token_does() {
    let s = serve_tiny(0, tiny_config(), None).await;
    let tok = &engines()[0].1.tokenizer;
    let enc = |t: &str| tok.encode(t).unwrap();
    // `</think>` is one token of this vocabulary; spelled in pieces it is several, each
    // its own delta without speculation.
    assert_eq!(enc("</think>").len(), 1);
    let mut pieces = enc("<think>\nweigh it");
    let before = pieces.len();
    for part in ["</", "thi", "nk", ">"] {
        pieces.extend(enc(part));
    }
    assert!(pieces.len() >= before + 4);
    pieces.extend(enc("\n\nRome"));
    let one_token = chat(
        "Capital of Italy?",
        replay("<think>\nweigh it</think>\n\nRome"),
    );
    let spelled = chat("Capital of Italy?", json!({"replay_output": pieces}));
    let want = post_ok(&s, &one_token).await;
    assert_eq!(
        want["choices"][0]["message"]["reasoning_content"],
        "\nweigh it"
    );
    assert_eq!(want["choices"][0]["message"]["content"], "\n\nRome");
    let got = post_ok(&s, &spelled).await;
    assert_eq!(
        got["choices"][0]["message"], want["choices"][0]["message"],
        "a spelled-out tag splits as the token does"
    );
    let st = stream(&s, &spelled).await;
    same_as_stream(&want, &st);
    assert!(
        !st.content.contains('<') && !st.reasoning.contains('<'),
        "{st:?}"
    );
    drop(s);
}

#[tokio::test]
async fn a_block_that_never_closes_is_all_reasoning() {
    for which in [0, 1] {
        let s = serve_tiny(which, tiny_config(), None).await;
        let mut body = chat(
            "Think hard.",
            replay("<think>\nFirst, consider the question carefully, then the answer."),
        );
        body["max_tokens"] = json!(12);
        let v = post_ok(&s, &body).await;
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "length", "{v}");
        assert!(c["message"]["content"].is_null(), "no answer: {v}");
        let r = c["message"]["reasoning_content"].as_str().unwrap();
        assert!(r.len() > 6, "{v}");
        assert!(
            "\nFirst, consider the question carefully, then the answer.".starts_with(r),
            "{v}"
        );
        assert_eq!(v["usage"]["completion_tokens"], 12);
        let st = stream(&s, &body).await;
        same_as_stream(&v, &st);
        assert_eq!(st.order, "r");
        drop(s);
    }
}

#[tokio::test]
async fn enable_thinking_false_makes_everything_content() {
    let s = serve_tiny(0, tiny_config(), None).await;
    let tokenize = |kwargs: Value| {
        let body = json!({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": kwargs});
        let s = &s;
        async move {
            let v: Value = s.post_json("/tokenize", &body).await;
            v["tokens"].as_array().unwrap().clone()
        }
    };
    // `<think>` and `</think>` are ids 3 and 4 of the tiny vocabulary.
    let on = tokenize(json!({})).await;
    let off = tokenize(json!({"enable_thinking": false})).await;
    assert!(!on.contains(&json!(3)) && !on.contains(&json!(4)), "{on:?}");
    let tail: Vec<Value> = off[on.len()..].to_vec();
    assert_eq!(off[..on.len()], on[..]);
    assert_eq!(tail.first(), Some(&json!(3)), "{off:?}");
    assert!(
        tail.contains(&json!(4)),
        "Qwen3's template writes an empty block: {off:?}"
    );
    // The model answers without thinking; a `</think>` of the answer would be text.
    let answer = "Paris, no </think> here.";
    for extra in [
        json!({"chat_template_kwargs": {"enable_thinking": false}}),
        json!({"reasoning_effort": "none"}),
    ] {
        let mut body = chat("Capital of France?", replay(answer));
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert_eq!(m["content"], answer, "{extra}: {v}");
        assert!(m.get("reasoning_content").is_none(), "{extra}: {v}");
        let st = stream(&s, &body).await;
        same_as_stream(&v, &st);
        assert_eq!(st.order, "c");
    }
    drop(s);

    // The server's defaults turn thinking off; a request's own kwargs (or effort) win.
    let mut cfg = tiny_config();
    cfg.default_chat_template_kwargs = json!({"enable_thinking": false})
        .as_object()
        .unwrap()
        .clone();
    let s = serve_tiny(0, cfg, None).await;
    let recording = "<think>\nhm\n</think>\n\nOK";
    let v = post_ok(&s, &chat("Hi", replay("OK"))).await;
    assert_eq!(v["choices"][0]["message"]["content"], "OK");
    assert!(v["choices"][0]["message"].get("reasoning").is_none());
    for extra in [
        json!({"chat_template_kwargs": {"enable_thinking": true}}),
        json!({"reasoning_effort": "high"}),
    ] {
        let mut body = chat("Hi", replay(recording));
        for (k, val) in extra.as_object().unwrap() {
            body[k] = val.clone();
        }
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert_eq!(m["reasoning_content"], "\nhm\n", "{extra}: {v}");
        assert_eq!(m["content"], "\n\nOK");
    }
    // include_reasoning: false leaves the thinking out, the answer as it is.
    let mut body = chat("Hi", replay(recording));
    body["chat_template_kwargs"] = json!({"enable_thinking": true});
    body["include_reasoning"] = json!(false);
    let v = post_ok(&s, &body).await;
    assert!(
        v["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{v}"
    );
    assert_eq!(v["choices"][0]["message"]["content"], "\n\nOK");
    let st = stream(&s, &body).await;
    assert_eq!((st.order.as_str(), st.content.as_str()), ("c", "\n\nOK"));
    drop(s);
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}])
}

#[tokio::test]
async fn tool_calls_are_parsed_from_the_answer_only() {
    for which in [0, 1] {
        let s = serve_tiny(which, tiny_config(), None).await;
        let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let mut body = chat(
            "Weather in Paris?",
            replay(&format!(
                "<think>\nI should look it up.\n</think>\n\n{call}"
            )),
        );
        body["tools"] = weather_tool();
        body["max_tokens"] = json!(300);
        let v = post_ok(&s, &body).await;
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{v}");
        assert_eq!(
            c["message"]["reasoning_content"],
            "\nI should look it up.\n"
        );
        assert!(c["message"]["content"].is_null(), "{v}");
        let f = &c["message"]["tool_calls"][0]["function"];
        assert_eq!(f["name"], "get_weather");
        assert_eq!(
            serde_json::from_str::<Value>(f["arguments"].as_str().unwrap()).unwrap(),
            json!({"city": "Paris"})
        );
        let st = stream(&s, &body).await;
        assert_eq!(st.order, "rt", "{st:?}");
        assert_eq!(st.reasoning, "\nI should look it up.\n");
        assert_eq!(st.calls.len(), 1);
        assert_eq!(st.calls[0].0, "get_weather");
        assert_eq!(st.finish.as_deref(), Some("tool_calls"));

        // A call written inside the thinking is part of the thinking, not a call.
        let mut body = chat(
            "Weather in Paris?",
            replay(&format!("<think>\nMaybe {call}?\n</think>\n\nIt is sunny.")),
        );
        body["tools"] = weather_tool();
        body["max_tokens"] = json!(300);
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert!(m.get("tool_calls").is_none(), "{v}");
        assert_eq!(m["reasoning_content"], format!("\nMaybe {call}?\n"));
        assert_eq!(m["content"], "\n\nIt is sunny.");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let st = stream(&s, &body).await;
        same_as_stream(&v, &st);
        assert!(st.calls.is_empty());
        drop(s);
    }
}

#[tokio::test]
async fn the_r1_style_starts_inside_the_block() {
    // auto reads the template: it opens `<think>` in the prompt and has no switch, so
    // deepseek_r1; the output carries no opening tag. Named explicitly, the same.
    for (choice, name) in [
        (ParserChoice::Auto, "deepseek_r1"),
        (ParserChoice::parse("deepseek_r1").unwrap(), "deepseek_r1"),
        (ParserChoice::parse("qwen3").unwrap(), "qwen3"),
    ] {
        let cfg = ServerConfig {
            reasoning_parser: choice,
            ..tiny_config()
        };
        let s = serve_tiny(0, cfg, Some(R1_TEMPLATE)).await;
        let models: Value = s.get_json("/v1/models").await;
        assert_eq!(models["data"][0]["reasoning_parser"], name);
        let body = chat("2+2?", replay("Two and two.\n</think>\n\n4"));
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert_eq!(m["reasoning_content"], "Two and two.\n", "{name}: {v}");
        assert_eq!(m["content"], "\n\n4");
        let st = stream(&s, &body).await;
        same_as_stream(&v, &st);
        // Cut off inside the block: all reasoning.
        let mut body = chat("2+2?", replay("Two and two make four, and"));
        body["max_tokens"] = json!(5);
        let v = post_ok(&s, &body).await;
        assert!(v["choices"][0]["message"]["content"].is_null(), "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        drop(s);
    }
    // Off: the text is the content, tags and all.
    let cfg = ServerConfig {
        reasoning_parser: ParserChoice::None,
        ..tiny_config()
    };
    let s = serve_tiny(0, cfg, Some(R1_TEMPLATE)).await;
    let v = post_ok(&s, &chat("2+2?", replay("Two.\n</think>\n\n4"))).await;
    assert_eq!(v["choices"][0]["message"]["content"], "Two.\n</think>\n\n4");
    assert!(v["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    drop(s);
}

#[tokio::test]
async fn auto_takes_an_answer_without_an_opening_tag_as_content() {
    // Qwen3's own template does not open the block: with auto an output that does not
    // open it is an answer (a model that does not think keeps its content), while the
    // named parser takes everything before `</think>` as thinking, as vLLM's does.
    let s = serve_tiny(0, tiny_config(), None).await;
    let v = post_ok(&s, &chat("Hi", replay("Hello! </think> x"))).await;
    assert_eq!(v["choices"][0]["message"]["content"], "Hello! </think> x");
    assert!(v["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    drop(s);
    let cfg = ServerConfig {
        reasoning_parser: ParserChoice::parse("qwen3").unwrap(),
        ..tiny_config()
    };
    let s = serve_tiny(0, cfg, None).await;
    let v = post_ok(&s, &chat("Hi", replay("Hello! </think> x"))).await;
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], "Hello! ");
    assert_eq!(v["choices"][0]["message"]["content"], " x");
    drop(s);
}

fn person() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "p", "schema": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
        "required": ["name"], "additionalProperties": false}}})
}

#[tokio::test]
async fn a_grammar_binds_only_the_answer_after_the_thinking() {
    for which in [0, 1] {
        // R1 style: the output starts inside the block, the grammar waits for `</think>`.
        let s = serve_tiny(which, tiny_config(), Some(R1_TEMPLATE)).await;
        let free = post_ok(&s, &chat("Name a person.", json!({"max_tokens": 16}))).await;
        let free_text = free["choices"][0]["message"]["reasoning_content"]
            .as_str()
            .unwrap()
            .to_string();
        let mut body = chat(
            "Name a person.",
            json!({"max_tokens": 16, "response_format": person()}),
        );
        let v = post_ok(&s, &body).await;
        assert_eq!(
            v["choices"][0]["message"]["reasoning_content"], free_text,
            "the thinking is the model's own, unconstrained: {v}"
        );
        assert_eq!(
            v["choices"][0]["finish_reason"],
            free["choices"][0]["finish_reason"]
        );
        // Steered to close the block at once: the answer follows the schema.
        body["logit_bias"] = json!({"4": 100});
        body["max_tokens"] = json!(300);
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert_eq!(m["reasoning_content"], "", "{v}");
        let answer: Value = serde_json::from_str(m["content"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {v}"));
        assert!(answer["name"].is_string(), "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let st = stream(&s, &body).await;
        same_as_stream(&v, &st);

        // A forced call after the thinking: the grammar writes the whole call.
        let mut body = chat(
            "Weather in Oslo?",
            json!({"max_tokens": 300, "logit_bias": {"4": 100}, "tools": weather_tool(),
                   "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
        );
        let v = post_ok(&s, &body).await;
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{v}");
        let args: Value = serde_json::from_str(
            c["message"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(args["city"].is_string(), "{v}");
        body["tool_choice"] = json!("required");
        let v = post_ok(&s, &body).await;
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
        drop(s);

        // Without a reasoning parser the same grammar binds from the first token.
        let cfg = ServerConfig {
            reasoning_parser: ParserChoice::None,
            ..tiny_config()
        };
        let s = serve_tiny(which, cfg, Some(R1_TEMPLATE)).await;
        let body = chat(
            "Name a person.",
            json!({"max_tokens": 16, "response_format": person()}),
        );
        let v = post_ok(&s, &body).await;
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(content.starts_with('{'), "{v}");
        assert_ne!(content, free_text);
        drop(s);

        // Qwen3's template, auto: the first token is the grammar's unless it opens the
        // block. Kept from opening it, the answer follows the schema from the start.
        let s = serve_tiny(which, tiny_config(), None).await;
        let body = chat(
            "Name a person.",
            json!({"max_tokens": 300, "response_format": person(), "logit_bias": {"3": -100}}),
        );
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert!(m.get("reasoning_content").is_none(), "{v}");
        let answer: Value = serde_json::from_str(m["content"].as_str().unwrap()).unwrap();
        assert!(answer["name"].is_string());
        // Opening it: the thinking is free (the model's own tokens: `<think>` again, as
        // the bias has it), and never closed, nothing is bound.
        let body = chat(
            "Name a person.",
            json!({"max_tokens": 6, "response_format": person(), "logit_bias": {"3": 100}}),
        );
        let v = post_ok(&s, &body).await;
        let m = &v["choices"][0]["message"];
        assert_eq!(
            m["reasoning_content"], "<think><think><think><think><think>",
            "{v}"
        );
        assert!(m["content"].is_null());
        // With thinking off the prompt closes the block: the grammar binds at once.
        let body = chat(
            "Name a person.",
            json!({"max_tokens": 300, "response_format": person(),
                   "chat_template_kwargs": {"enable_thinking": false}}),
        );
        let v = post_ok(&s, &body).await;
        let answer: Value =
            serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap())
                .unwrap_or_else(|e| panic!("{e}: {v}"));
        assert!(answer["name"].is_string());
        drop(s);
    }
}

#[tokio::test]
async fn bad_template_kwargs_and_effort_are_400s_naming_the_field() {
    let s = serve_tiny(0, tiny_config(), None).await;
    for (extra, param) in [
        (
            json!({"chat_template_kwargs": "enable_thinking=false"}),
            "chat_template_kwargs",
        ),
        (json!({"chat_template_kwargs": [1]}), "chat_template_kwargs"),
        (
            json!({"chat_template_kwargs": {"enable_thinking": "false"}}),
            "chat_template_kwargs.enable_thinking",
        ),
        (
            json!({"chat_template_kwargs": {"add_generation_prompt": false}}),
            "chat_template_kwargs.add_generation_prompt",
        ),
        (json!({"reasoning_effort": "maximal"}), "reasoning_effort"),
        (json!({"include_reasoning": "no"}), "include_reasoning"),
    ] {
        let e = post_err(&s, &chat("Hi", extra.clone())).await;
        assert_eq!(e["error"]["param"], param, "{extra}: {e}");
    }
    let e = s
        .post(
            "/tokenize",
            &json!({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(e.status(), 400);
    drop(s);
}

#[tokio::test]
async fn structured_output_needs_single_token_tags() {
    // The default model has no `<think>` token: a parser named for it splits text, but a
    // grammar that must wait for `</think>` cannot, so the request is refused.
    let (engine, mut info) = shared_engine();
    info.chat_template = Some(Arc::new(ChatTemplate::new(R1_TEMPLATE, "", "").unwrap()));
    let cfg = ServerConfig {
        reasoning_parser: ParserChoice::parse("deepseek_r1").unwrap(),
        ..config()
    };
    let s = serve((engine, info), cfg).await;
    let mut body = chat_body("Name a person.", 8);
    body["response_format"] = person();
    let e = post_err(&s, &body).await;
    assert_eq!(e["error"]["param"], "response_format", "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("</think>"),
        "{e}"
    );
    let v = post_ok(&s, &chat_body("Hi", 4)).await;
    assert!(v["choices"][0]["message"]["reasoning_content"].is_string());
    drop(s);
}
