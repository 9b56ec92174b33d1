//! Turning messages and offered tools into the prompt text.
//!
//! A template that knows tools (its source uses `tools` and `tool_calls`: Llama
//! 3.1, Qwen2.5, Hermes) gets them as Hugging Face passes them: the `tools`
//! variable and messages with `tool_calls` (arguments as objects) and `tool` roles.
//! A template that does not (SmolLM2's ChatML, say) would silently drop them, so
//! then the tools go into a system block that teaches the Hermes format, an
//! assistant's earlier calls are written out in that format and tool results
//! become user turns wrapped in `<tool_response>`.

use anyhow::Result;
use serde_json::{json, Map, Value};
use wring_model::ChatTemplate;

use super::{ToolChoice, ToolFormat, ToolPlan};

/// The prompt of a chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedChat {
    /// The prompt text, ending with `forced_prefix`.
    pub text: String,
    /// The opening of a tool call written into the prompt for `required` or a
    /// named function ([`RenderedChat::write_forced_opening`]); the model's output
    /// continues it.
    pub forced_prefix: String,
    /// A stop string that closes a forced call (only one call is forced).
    pub stop: Option<String>,
    /// What the template writes for the assistant's turn (the text past the same
    /// conversation rendered without the generation prompt), when asked for and the
    /// template renders the conversation the same way both times.
    pub generation_prompt: Option<String>,
    /// The opening of the forced call (`required`, a named function) and its stop string,
    /// not yet written: into the prompt by `write_forced_opening`, or (a reasoning model,
    /// which thinks first) into the call's grammar.
    pub forced_opening: Option<(String, Option<String>)>,
}

impl RenderedChat {
    /// Writes the forced call's opening into the prompt: the output continues inside the
    /// call.
    pub fn write_forced_opening(&mut self) {
        if let Some((prefix, stop)) = self.forced_opening.take() {
            self.text.push_str(&prefix);
            self.forced_prefix = prefix;
            self.stop = stop;
        }
    }
}

/// Renders OpenAI-shaped `messages` (content already a string, tool-call
/// arguments already objects) with the tools `plan` offers and the template variables
/// `kwargs`; `generation_prompt`: find what the template writes for the assistant's turn.
/// A forced call's opening is left for the caller ([`RenderedChat::forced_opening`]).
pub fn render_chat(
    template: &ChatTemplate,
    messages: Vec<Value>,
    plan: &ToolPlan,
    format: ToolFormat,
    kwargs: &Map<String, Value>,
    generation_prompt: bool,
) -> Result<RenderedChat> {
    let offered: Vec<Value> = match &plan.choice {
        ToolChoice::None => Vec::new(),
        ToolChoice::Named(name) => plan
            .tools
            .iter()
            .filter(|t| &t.name == name)
            .map(|t| t.raw.clone())
            .collect(),
        ToolChoice::Auto | ToolChoice::Required => {
            plan.tools.iter().map(|t| t.raw.clone()).collect()
        }
    };
    let native = template.source().contains("tools") && template.source().contains("tool_call");
    let (messages, tools) = if native {
        let tools = (!offered.is_empty()).then(|| Value::Array(offered));
        (messages, tools)
    } else {
        let mut messages: Vec<Value> = messages
            .into_iter()
            .map(|m| inline_tool_turns(m, format))
            .collect();
        if !offered.is_empty() {
            add_tools_block(&mut messages, &offered, format);
        }
        (messages, None)
    };
    let messages = Value::Array(messages);
    let text = template.render_json_with(&messages, tools.as_ref(), true, kwargs)?;
    let generation_prompt = if generation_prompt {
        let bare = template.render_json_with(&messages, tools.as_ref(), false, kwargs)?;
        text.strip_prefix(bare.as_str()).map(str::to_string)
    } else {
        None
    };
    // `required` with a single tool can only mean that one.
    let choice = match (&plan.choice, plan.tools.as_slice()) {
        (ToolChoice::Required, [only]) => ToolChoice::Named(only.name.clone()),
        (c, _) => c.clone(),
    };
    Ok(RenderedChat {
        text,
        forced_prefix: String::new(),
        stop: None,
        generation_prompt,
        forced_opening: forced_opening(&choice, format),
    })
}

/// The opening of a forced call and the stop string that closes it; None when no call
/// is forced.
pub fn forced_opening(choice: &ToolChoice, format: ToolFormat) -> Option<(String, Option<String>)> {
    let name = match choice {
        ToolChoice::None | ToolChoice::Auto => return None,
        ToolChoice::Required => None,
        ToolChoice::Named(n) => Some(n),
    };
    let (open, args_key, stop) = match format {
        ToolFormat::Hermes => (
            "<tool_call>\n",
            "arguments",
            Some("</tool_call>".to_string()),
        ),
        ToolFormat::Llama3Json => ("", "parameters", None),
    };
    let prefix = match name {
        None => format!("{open}{{\"name\": \""),
        Some(n) => format!("{open}{{\"name\": \"{n}\", \"{args_key}\": "),
    };
    Some((prefix, stop))
}

/// A message for a template without tool support: calls written into the content,
/// tool results as user turns.
fn inline_tool_turns(mut m: Value, format: ToolFormat) -> Value {
    let role = m["role"].as_str().unwrap_or_default().to_string();
    if role == "tool" {
        let content = m["content"].as_str().unwrap_or_default();
        return json!({"role": "user", "content": format!("<tool_response>\n{content}\n</tool_response>")});
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array).cloned() {
        let mut content = m["content"].as_str().unwrap_or_default().to_string();
        for call in calls {
            let f = &call["function"];
            let text = match format {
                ToolFormat::Hermes => format!(
                    "<tool_call>\n{}\n</tool_call>",
                    json!({"name": f["name"], "arguments": f["arguments"]})
                ),
                ToolFormat::Llama3Json => {
                    json!({"name": f["name"], "parameters": f["arguments"]}).to_string()
                }
            };
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&text);
        }
        if let Some(o) = m.as_object_mut() {
            o.remove("tool_calls");
            o.insert("content".into(), Value::String(content));
        }
    }
    m
}

/// Puts the tool descriptions and the call format into the first system message.
fn add_tools_block(messages: &mut Vec<Value>, tools: &[Value], format: ToolFormat) {
    let listing: Vec<String> = tools.iter().map(Value::to_string).collect();
    let how = match format {
        ToolFormat::Hermes => "To call a function, reply with one JSON object per call, each inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": \"<function name>\", \"arguments\": <JSON object of arguments>}\n</tool_call>",
        ToolFormat::Llama3Json => "To call a function, reply with only a JSON object of the form {\"name\": \"<function name>\", \"parameters\": <JSON object of arguments>}.",
    };
    let block = format!(
        "# Tools\n\nYou may call functions to help with the user's request. They are described in JSON inside <tools></tools>:\n<tools>\n{}\n</tools>\n\n{how}",
        listing.join("\n")
    );
    match messages.first_mut() {
        Some(first) if first["role"] == "system" => {
            let content = first["content"].as_str().unwrap_or_default();
            let merged = if content.is_empty() {
                block
            } else {
                format!("{content}\n\n{block}")
            };
            first["content"] = Value::String(merged);
        }
        _ => messages.insert(0, json!({"role": "system", "content": block})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tool_plan;

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    /// A Qwen2.5-like template (abridged) that uses `tools` and `tool_calls`.
    const NATIVE: &str = "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}{% for m in messages %}[{{ m.role }}]{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.name }}:{{ c.function.arguments.city }}</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

    fn plan(choice: Value) -> ToolPlan {
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "get_time"}}
        ]);
        tool_plan(Some(&tools), Some(&choice)).unwrap()
    }

    /// Renders as the server does for a model that does not think: a forced call's
    /// opening goes into the prompt.
    fn render(t: &ChatTemplate, messages: Vec<Value>, plan: &ToolPlan) -> RenderedChat {
        let mut r = render_chat(t, messages, plan, ToolFormat::Hermes, &Map::new(), false).unwrap();
        r.write_forced_opening();
        r
    }

    fn history() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "Weather in Paris?"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}),
            json!({"role": "tool", "content": "22C", "tool_call_id": "c1"}),
        ]
    }

    #[test]
    fn native_templates_get_the_tools_variable_and_structured_calls() {
        let t = ChatTemplate::new(NATIVE, "", "").unwrap();
        let r = render(&t, history(), &plan(json!("auto")));
        assert_eq!(
            r.text,
            "<tools>get_weather;get_time;</tools>[user]Weather in Paris?[assistant]<tool_call>get_weather:Paris</tool_call>[tool]22C[assistant]"
        );
        assert_eq!((r.forced_prefix.as_str(), r.stop), ("", None));
        let named = json!({"type": "function", "function": {"name": "get_time"}});
        let r = render(&t, history(), &plan(named));
        assert!(r.text.starts_with("<tools>get_time;</tools>"), "{}", r.text);
        assert!(r
            .text
            .ends_with("[assistant]<tool_call>\n{\"name\": \"get_time\", \"arguments\": "));
        assert_eq!(r.stop.as_deref(), Some("</tool_call>"));
        let r = render(&t, history(), &plan(json!("none")));
        assert!(
            r.text.starts_with("[user]"),
            "none offers no tools: {}",
            r.text
        );
    }

    #[test]
    fn templates_without_tools_get_a_system_block_and_inlined_turns() {
        let t = ChatTemplate::new(CHATML, "", "").unwrap();
        let r = render(&t, history(), &plan(json!("required")));
        assert!(
            r.text.starts_with("<|im_start|>system\n# Tools"),
            "{}",
            r.text
        );
        assert!(r.text.contains("\"name\":\"get_weather\""), "{}", r.text);
        assert!(r.text.contains("<|im_start|>assistant\n<tool_call>\n{\"arguments\":{\"city\":\"Paris\"},\"name\":\"get_weather\"}\n</tool_call><|im_end|>")
            || r.text.contains("<|im_start|>assistant\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call><|im_end|>"), "{}", r.text);
        assert!(r
            .text
            .contains("<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>"));
        assert!(r
            .text
            .ends_with("<|im_start|>assistant\n<tool_call>\n{\"name\": \""));
        // An existing system message keeps its text, followed by the block.
        let mut msgs = history();
        msgs.insert(0, json!({"role": "system", "content": "Be brief."}));
        let r = render(&t, msgs, &plan(json!("auto")));
        assert!(
            r.text
                .starts_with("<|im_start|>system\nBe brief.\n\n# Tools"),
            "{}",
            r.text
        );
        assert_eq!(r.forced_prefix, "");
    }
}
