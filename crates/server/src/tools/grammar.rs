//! The grammar of a forced tool call (`tool_choice: "required"` or a named
//! function). The prompt already ends with the call's opening (`render.rs`:
//! `<tool_call>\n{"name": "` for Hermes, `{"name": "` for Llama 3.1 JSON, and the
//! name and arguments key too when one function is forced), so the grammar covers
//! the rest of exactly one call: the function name when several are offered, the
//! arguments as JSON valid under that function's `parameters` schema (objects
//! closed to their declared properties unless the schema allows more), and the
//! closing brace. The grammar is then complete, the request ends there, and the
//! call always parses.
//!
//! A reasoning model thinks before it calls, so its prompt cannot end inside the call:
//! then (`with_opening`) the grammar writes the opening too, after up to a few blanks,
//! and binds only once the thinking has ended (the engine's `GrammarStart`).

use serde_json::Value;
use wring_grammar::GrammarSpec;

use super::render::forced_opening;
use super::{ToolChoice, ToolFormat, ToolPlan};

/// The Lark grammar for the forced call's continuation (`with_opening`: the whole call,
/// its opening included); None when no call is forced.
pub fn forced_call_grammar(
    plan: &ToolPlan,
    format: ToolFormat,
    with_opening: bool,
) -> Option<GrammarSpec> {
    let body = forced_call_body(plan, format)?;
    if !with_opening {
        return Some(GrammarSpec::Grammar(body));
    }
    let choice = match (&plan.choice, plan.tools.as_slice()) {
        (ToolChoice::Required, [only]) => ToolChoice::Named(only.name.clone()),
        (c, _) => c.clone(),
    };
    let (opening, _) = forced_opening(&choice, format)?;
    // The body's `start` becomes `call`; the new start writes the opening first.
    let body = body.replacen("start:", "call:", 1);
    Some(GrammarSpec::Grammar(format!(
        "start: LEAD? {} call\nLEAD: /[ \\t\\r\\n]{{1,4}}/\n{body}",
        lark_string(&opening)
    )))
}

/// The grammar of the call after the opening the prompt would end with.
fn forced_call_body(plan: &ToolPlan, format: ToolFormat) -> Option<String> {
    let args_key = match format {
        ToolFormat::Hermes => "arguments",
        ToolFormat::Llama3Json => "parameters",
    };
    let params = |name: &str| -> String {
        let schema = plan
            .tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.raw["function"].get("parameters"))
            .filter(|p| p.is_object())
            .cloned()
            // No `parameters`: the function takes no arguments.
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        let mut schema = schema;
        // Arguments are the declared parameters only, unless the schema says
        // otherwise (a model left free keeps inventing keys).
        crate::structured::close_objects(&mut schema);
        schema_text(&schema)
    };
    let forced = match (&plan.choice, plan.tools.as_slice()) {
        (ToolChoice::Required, [only]) => Some(only.name.as_str()),
        (ToolChoice::Required, _) => None,
        (ToolChoice::Named(name), _) => Some(name.as_str()),
        (ToolChoice::None | ToolChoice::Auto, _) => return None,
    };
    let lark = match forced {
        // The prompt ends with `{"name": "NAME", "ARGS": `.
        Some(name) => format!("start: args \"}}\"\nargs: %json {}", params(name)),
        // The prompt ends with `{"name": "`: one alternative per function.
        None => {
            let mut rules = vec![format!(
                "start: {}",
                (0..plan.tools.len())
                    .map(|i| format!("call_{i}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            )];
            for (i, t) in plan.tools.iter().enumerate() {
                let head = format!("{}\", \"{args_key}\": ", t.name);
                rules.push(format!("call_{i}: {} args_{i} \"}}\"", lark_string(&head)));
                rules.push(format!("args_{i}: %json {}", params(&t.name)));
            }
            rules.join("\n")
        }
    };
    Some(lark)
}

/// A Lark string literal (llguidance reads them as JSON strings).
fn lark_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A `parameters` schema for `%json`, with the bounded whitespace of every JSON
/// constraint (`wring_grammar::with_json_layout`).
fn schema_text(schema: &Value) -> String {
    wring_grammar::with_json_layout(schema).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tool_plan;
    use serde_json::json;

    fn tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "get_time"}}
        ])
    }

    #[test]
    fn grammars_follow_the_forced_choice() {
        let auto = tool_plan(Some(&tools()), Some(&json!("auto"))).unwrap();
        assert_eq!(forced_call_grammar(&auto, ToolFormat::Hermes, false), None);
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let plan = tool_plan(Some(&tools()), Some(&named)).unwrap();
        let Some(GrammarSpec::Grammar(g)) = forced_call_grammar(&plan, ToolFormat::Hermes, false)
        else {
            panic!("a grammar")
        };
        assert!(g.starts_with("start: args \"}\"\nargs: %json {"), "{g}");
        assert!(g.contains("\"city\""), "{g}");
        let plan = tool_plan(Some(&tools()), Some(&json!("required"))).unwrap();
        let Some(GrammarSpec::Grammar(g)) =
            forced_call_grammar(&plan, ToolFormat::Llama3Json, false)
        else {
            panic!("a grammar")
        };
        assert!(g.starts_with("start: call_0 | call_1\n"), "{g}");
        assert!(
            g.contains(r#"call_1: "get_time\", \"parameters\": " args_1 "}""#),
            "{g}"
        );
        assert!(
            g.contains(
                r#"args_1: %json {"type":"object","properties":{},"additionalProperties":false,"#
            ),
            "{g}"
        );
        assert!(
            g.contains(r#""required":["city"],"additionalProperties":false,"x-guidance""#),
            "{g}"
        );
        // A reasoning model's call: the grammar writes the opening after its thinking.
        let named = json!({"type": "function", "function": {"name": "get_time"}});
        let plan = tool_plan(Some(&tools()), Some(&named)).unwrap();
        let Some(GrammarSpec::Grammar(g)) = forced_call_grammar(&plan, ToolFormat::Hermes, true)
        else {
            panic!("a grammar")
        };
        assert!(
            g.starts_with(
                r#"start: LEAD? "<tool_call>\n{\"name\": \"get_time\", \"arguments\": " call"#
            ),
            "{g}"
        );
        assert!(g.contains("\ncall: args \"}\"\n"), "{g}");
    }
}
