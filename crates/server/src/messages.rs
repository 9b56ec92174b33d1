//! Chat `messages` → the JSON messages a chat template renders: roles checked,
//! content parts joined, `content: null` only where OpenAI allows it (an assistant
//! turn that is only tool calls), and tool-call arguments parsed from their JSON
//! text into objects (templates index into them, as Hugging Face's do).

use serde_json::{json, Map, Value};

use crate::body::json_kind;
use crate::error::ApiError;
use crate::protocol::ChatMessageIn;

pub fn chat_messages(messages: &[ChatMessageIn]) -> Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "`messages` must contain at least one message.",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect()
}

fn message(i: usize, m: &ChatMessageIn) -> Result<Value, ApiError> {
    let role = match m.role.as_str() {
        "system" | "user" | "assistant" | "tool" => m.role.as_str(),
        // OpenAI's newer name for the system role; templates know "system".
        "developer" => "system",
        other => {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].role"),
                format!(
                    "Unknown role `{other}`; expected system, developer, user, assistant or tool."
                ),
            ))
        }
    };
    if m.function_call.as_ref().is_some_and(|f| !f.is_null()) {
        return Err(ApiError::invalid_param(
            format!("messages[{i}].function_call"),
            "The deprecated `function_call` is not supported; use `tool_calls`.",
        ));
    }
    let tool_calls = match m.tool_calls.as_ref().filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(_) if role != "assistant" => {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].tool_calls"),
                "Only assistant messages may have `tool_calls`.",
            ))
        }
        Some(v) => tool_calls(i, v)?,
    };
    let reasoning = reasoning(i, role, m)?;
    let content = match m.content.as_ref().filter(|v| !v.is_null()) {
        Some(c) => message_text(i, c)?,
        None if !tool_calls.is_empty() || reasoning.is_some() => String::new(),
        None => {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].content"),
                "`content` must be a string or an array of text parts; only an assistant message with `tool_calls` or reasoning may leave it null.",
            ))
        }
    };
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert("content".into(), json!(content));
    if let Some(name) = &m.name {
        out.insert("name".into(), json!(name));
    }
    if !tool_calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    if let Some(r) = reasoning {
        // Under both names: Qwen3's template reads `reasoning_content`.
        out.insert("reasoning_content".into(), json!(r));
        out.insert("reasoning".into(), json!(r));
    }
    Ok(Value::Object(out))
}

/// An assistant's earlier thinking, sent back as a response gave it: `reasoning_content`
/// or `reasoning` (vLLM's two names; the first wins), a string.
fn reasoning(i: usize, role: &str, m: &ChatMessageIn) -> Result<Option<String>, ApiError> {
    let mut found = None;
    for (name, v) in [
        ("reasoning_content", &m.reasoning_content),
        ("reasoning", &m.reasoning),
    ] {
        let Some(v) = v.as_ref().filter(|v| !v.is_null()) else {
            continue;
        };
        let param = format!("messages[{i}].{name}");
        if role != "assistant" {
            return Err(ApiError::invalid_param(
                param,
                format!("Only assistant messages may have `{name}`."),
            ));
        }
        let Some(text) = v.as_str() else {
            return Err(ApiError::invalid_param(
                param,
                format!("`{name}` must be a string; got {}.", json_kind(v)),
            ));
        };
        found.get_or_insert_with(|| text.to_string());
    }
    Ok(found)
}

/// An assistant's earlier calls, with `arguments` parsed into JSON values.
fn tool_calls(i: usize, v: &Value) -> Result<Vec<Value>, ApiError> {
    let Some(items) = v.as_array() else {
        return Err(ApiError::invalid_param(
            format!("messages[{i}].tool_calls"),
            format!("`tool_calls` must be an array; got {}.", json_kind(v)),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(j, call)| {
            let param = |p: &str| format!("messages[{i}].tool_calls[{j}]{p}");
            let f = call
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        param(".function"),
                        "A tool call needs a `function` object.",
                    )
                })?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid_param(
                    param(".function.name"),
                    "A tool call needs a string `name`.",
                )
            })?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => json!({}),
                Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| {
                    ApiError::invalid_param(
                        param(".function.arguments"),
                        format!("`arguments` must be JSON text: {e}."),
                    )
                })?,
                Some(other) => other.clone(),
            };
            Ok(json!({
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }))
        })
        .collect()
}

/// A message's text: a string or text parts joined by newlines.
fn message_text(i: usize, content: &Value) -> Result<String, ApiError> {
    let param = || format!("messages[{i}].content");
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => texts.push(t),
                    (Some("text"), None) => {
                        return Err(ApiError::invalid_param(
                            param(),
                            "A text content part needs a string `text`.",
                        ))
                    }
                    (Some(kind), _) => {
                        return Err(ApiError::invalid_param(
                            param(),
                            format!(
                                "Content parts of type `{kind}` are not supported; only `text`."
                            ),
                        ))
                    }
                    (None, _) => {
                        return Err(ApiError::invalid_param(
                            param(),
                            "Each content part needs a `type`.",
                        ))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        other => Err(ApiError::invalid_param(
            param(),
            format!(
                "Message content must be a string or an array of content parts; got {}.",
                json_kind(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<Vec<Value>, ApiError> {
        let msgs: Vec<ChatMessageIn> = serde_json::from_value(v).unwrap();
        chat_messages(&msgs)
    }

    #[test]
    fn tool_turns_are_accepted_with_parsed_arguments() {
        let out = parse(json!([
            {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "22C"}
        ]))
        .unwrap();
        assert_eq!(out[0], json!({"role": "system", "content": "a\nb"}));
        assert_eq!(out[2]["content"], "");
        assert_eq!(
            out[2]["tool_calls"][0]["function"]["arguments"]["city"],
            "Paris"
        );
        assert_eq!(out[3]["tool_call_id"], "c1");
    }

    #[test]
    fn a_reasoning_models_response_message_can_be_sent_back() {
        // What a response with a reasoning parser gives: thinking, no content (the
        // output never closed its block), or both.
        let out = parse(json!([
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": null, "reasoning_content": "hmm", "reasoning": "hmm"},
            {"role": "user", "content": "And?"},
            {"role": "assistant", "content": "Paris.", "reasoning": "think"}
        ]))
        .unwrap();
        assert_eq!(
            out[1],
            json!({"role": "assistant", "content": "", "reasoning_content": "hmm", "reasoning": "hmm"})
        );
        assert_eq!(out[3]["reasoning_content"], "think");
        assert_eq!(out[3]["content"], "Paris.");
    }

    #[test]
    fn bad_messages_are_named() {
        let cases = [
            (json!([]), "messages"),
            (
                json!([{"role": "wizard", "content": "x"}]),
                "messages[0].role",
            ),
            (
                json!([{"role": "user", "content": null}]),
                "messages[0].content",
            ),
            (json!([{"role": "user"}]), "messages[0].content"),
            (
                json!([{"role": "assistant", "content": null}]),
                "messages[0].content",
            ),
            (
                json!([{"role": "user", "content": 3}]),
                "messages[0].content",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image_url"}]}]),
                "messages[0].content",
            ),
            (
                json!([{"role": "user", "content": "x", "tool_calls": []}]),
                "messages[0].tool_calls",
            ),
            (
                json!([{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]),
                "messages[0].tool_calls[0].function.arguments",
            ),
            (
                json!([{"role": "assistant", "content": "x", "function_call": {"name": "f"}}]),
                "messages[0].function_call",
            ),
            (
                json!([{"role": "user", "content": "x", "reasoning_content": "y"}]),
                "messages[0].reasoning_content",
            ),
            (
                json!([{"role": "assistant", "content": null, "reasoning": 7}]),
                "messages[0].reasoning",
            ),
        ];
        for (body, param) in cases {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.status, 400);
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }
}
