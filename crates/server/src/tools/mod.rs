//! Tool calling: the request's `tools` and `tool_choice` (validated here), the
//! prompt they turn into (`render.rs`: the chat template's own `tools` variable, or
//! a Hermes-style system block for templates without one), and the calls parsed
//! back out of the model's text, streamed or whole (`parse.rs`).
//!
//! `required` and a named function write the opening of the call into the prompt
//! (the model continues inside the call) and constrain the rest of it with a
//! grammar (`grammar.rs`: the function name, then arguments valid under its
//! `parameters` schema), so a forced call always parses.

mod grammar;
mod parse;
mod render;

pub use grammar::forced_call_grammar;
pub(crate) use parse::held_prefix_len;
pub use parse::{Piece, ToolCallParser};
pub use render::{render_chat, RenderedChat};

use serde_json::Value;

use crate::body::json_kind;
use crate::error::ApiError;

/// Most tools one request may declare.
pub const MAX_TOOLS: usize = 128;

/// One function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    /// The tool object as the client sent it (`{"type": "function", "function": {...}}`),
    /// which is what chat templates expect in `tools`.
    pub raw: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// Tools are not offered to the model and no call is parsed.
    None,
    /// The model decides; calls are parsed from its output.
    Auto,
    /// The model must call one of the tools.
    Required,
    /// The model must call this function.
    Named(String),
}

/// The validated `tools` / `tool_choice` of a chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPlan {
    pub tools: Vec<ToolDef>,
    pub choice: ToolChoice,
}

impl ToolPlan {
    /// Whether the output is scanned for tool calls.
    pub fn parses_calls(&self) -> bool {
        self.choice != ToolChoice::None && !self.tools.is_empty()
    }
}

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen2.5,
    /// and the fallback block for templates without tool support).
    Hermes,
    /// A bare `{"name": ..., "parameters": {...}}` object, several separated by `;`
    /// (Llama 3.1/3.2 JSON tool calling).
    Llama3Json,
}

impl ToolFormat {
    pub fn parse(name: &str) -> Result<Option<Self>, String> {
        match name {
            "auto" => Ok(None),
            "hermes" => Ok(Some(ToolFormat::Hermes)),
            "llama3_json" => Ok(Some(ToolFormat::Llama3Json)),
            other => Err(format!(
                "unknown tool-call format {other:?}; expected auto, hermes or llama3_json"
            )),
        }
    }

    /// The format a chat template teaches its model (Hermes when it teaches none:
    /// then our own fallback block, which uses it, goes into the prompt).
    pub fn detect(template_source: &str) -> Self {
        if template_source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if template_source.contains("<|python_tag|>") || template_source.contains("ipython")
        {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Hermes
        }
    }
}

/// Validates `tools`, `tool_choice` and `parallel_tool_calls`.
pub fn tool_plan(tools: Option<&Value>, tool_choice: Option<&Value>) -> Result<ToolPlan, ApiError> {
    let tools = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            if items.len() > MAX_TOOLS {
                return Err(ApiError::invalid_param(
                    "tools",
                    format!(
                        "At most {MAX_TOOLS} tools are allowed; got {}.",
                        items.len()
                    ),
                ));
            }
            let mut defs: Vec<ToolDef> = Vec::with_capacity(items.len());
            for (i, t) in items.iter().enumerate() {
                let def = tool_def(i, t)?;
                if defs.iter().any(|d| d.name == def.name) {
                    return Err(ApiError::invalid_param(
                        format!("tools[{i}].function.name"),
                        format!("Duplicate function name `{}` in `tools`.", def.name),
                    ));
                }
                defs.push(def);
            }
            defs
        }
        Some(other) => {
            return Err(ApiError::invalid_param(
                "tools",
                format!(
                    "`tools` must be an array of tools; got {}.",
                    json_kind(other)
                ),
            ))
        }
    };
    let choice = match tool_choice {
        None | Some(Value::Null) => {
            if tools.is_empty() {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            }
        }
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    format!(
                        "`tool_choice` must be \"none\", \"auto\", \"required\" or a named function; got {other:?}."
                    ),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = (o.get("type").and_then(Value::as_str) == Some("function"))
                .then(|| o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str))
                .flatten()
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "tool_choice",
                        "A named `tool_choice` must be {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                    )
                })?;
            ToolChoice::Named(name.to_string())
        }
        Some(other) => {
            return Err(ApiError::invalid_param(
                "tool_choice",
                format!("`tool_choice` must be a string or an object; got {}.", json_kind(other)),
            ))
        }
    };
    if tools.is_empty() && choice != ToolChoice::None {
        return Err(ApiError::invalid_param(
            "tool_choice",
            "`tool_choice` is only allowed when `tools` are specified.",
        ));
    }
    if let ToolChoice::Named(name) = &choice {
        if !tools.iter().any(|t| &t.name == name) {
            return Err(ApiError::invalid_param(
                "tool_choice",
                format!("`tool_choice` names the function `{name}`, which is not in `tools`."),
            ));
        }
    }
    Ok(ToolPlan { tools, choice })
}

fn tool_def(i: usize, t: &Value) -> Result<ToolDef, ApiError> {
    let param = |p: &str| format!("tools[{i}]{p}");
    let Some(obj) = t.as_object() else {
        return Err(ApiError::invalid_param(
            param(""),
            format!("Each tool must be an object; got {}.", json_kind(t)),
        ));
    };
    if obj.get("type").and_then(Value::as_str) != Some("function") {
        return Err(ApiError::invalid_param(
            param(".type"),
            "Only tools of type `function` are supported.",
        ));
    }
    let Some(function) = obj.get("function").and_then(Value::as_object) else {
        return Err(ApiError::invalid_param(
            param(".function"),
            "A function tool needs a `function` object.",
        ));
    };
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ApiError::invalid_param(param(".function.name"), "A function needs a string `name`.")
        })?;
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(ApiError::invalid_param(
            param(".function.name"),
            format!(
                "Function names must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes; got {name:?}."
            ),
        ));
    }
    match function.get("parameters") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(other) => {
            return Err(ApiError::invalid_param(
                param(".function.parameters"),
                format!(
                    "`parameters` must be a JSON schema object; got {}.",
                    json_kind(other)
                ),
            ))
        }
    }
    Ok(ToolDef {
        name: name.to_string(),
        raw: t.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
    }

    #[test]
    fn choices_default_and_parse() {
        let p = tool_plan(Some(&weather()), None).unwrap();
        assert_eq!(p.choice, ToolChoice::Auto);
        assert!(p.parses_calls());
        assert_eq!(tool_plan(None, None).unwrap().choice, ToolChoice::None);
        assert_eq!(
            tool_plan(None, Some(&json!("none"))).unwrap().choice,
            ToolChoice::None
        );
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        assert_eq!(
            tool_plan(Some(&weather()), Some(&named)).unwrap().choice,
            ToolChoice::Named("get_weather".into())
        );
        let p = tool_plan(Some(&weather()), Some(&json!("none"))).unwrap();
        assert!(!p.parses_calls());
    }

    #[test]
    fn every_bad_tool_field_is_named() {
        let cases = [
            (None, Some(json!("auto")), "tool_choice"),
            (None, Some(json!("required")), "tool_choice"),
            (Some(weather()), Some(json!("sometimes")), "tool_choice"),
            (
                Some(weather()),
                Some(json!({"type": "function", "function": {"name": "nope"}})),
                "tool_choice",
            ),
            (
                Some(weather()),
                Some(json!({"type": "function"})),
                "tool_choice",
            ),
            (Some(json!({"a": 1})), None, "tools"),
            (Some(json!([1])), None, "tools[0]"),
            (Some(json!([{"type": "retrieval"}])), None, "tools[0].type"),
            (
                Some(json!([{"type": "function"}])),
                None,
                "tools[0].function",
            ),
            (
                Some(json!([{"type": "function", "function": {"name": "a b"}}])),
                None,
                "tools[0].function.name",
            ),
            (
                Some(json!([{"type": "function", "function": {"name": "f", "parameters": "x"}}])),
                None,
                "tools[0].function.parameters",
            ),
            (
                Some(
                    json!([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]),
                ),
                None,
                "tools[1].function.name",
            ),
        ];
        for (tools, choice, param) in cases {
            let e = tool_plan(tools.as_ref(), choice.as_ref()).unwrap_err();
            assert_eq!(e.status, 400);
            assert_eq!(
                e.param.as_deref(),
                Some(param),
                "{tools:?} {choice:?}: {}",
                e.message
            );
        }
    }

    #[test]
    fn format_detection() {
        assert_eq!(
            ToolFormat::detect("{{ '<tool_call>' }}"),
            ToolFormat::Hermes
        );
        assert_eq!(
            ToolFormat::detect("{{- '<|python_tag|>' }} ipython"),
            ToolFormat::Llama3Json
        );
        assert_eq!(ToolFormat::detect("<|im_start|>"), ToolFormat::Hermes);
    }
}
