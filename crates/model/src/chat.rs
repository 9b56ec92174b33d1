//! Chat templates: the model's own Jinja template rendered with minijinja, configured
//! like Hugging Face's (`trim_blocks`, `lstrip_blocks`, `raise_exception`, Python
//! string methods).

use anyhow::{anyhow, Result};
use minijinja::{context, Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            // Templates use it for "today's date"; a fixed, honest value needs a clock.
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let days = secs / 86400;
            let (y, m, d) = civil_from_days(days as i64);
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            fmt.replace("%Y", &y.to_string())
                .replace("%m", &format!("{m:02}"))
                .replace("%d", &format!("{d:02}"))
                .replace("%b", MONTHS[(m - 1) as usize])
        });
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| anyhow!("the model's chat template does not parse: {e}"))?;
        Ok(Self {
            env,
            source: source.to_string(),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The Jinja source (what `tokenizer_config.json`'s `chat_template` holds).
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Renders OpenAI-shaped messages (any JSON: `tool_calls`, `tool_call_id`, `name`,
    /// ...) with the `tools` variable, as Hugging Face's
    /// `apply_chat_template(messages, tools=...)` does; `tools: None` leaves it none.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.render_json_with(
            messages,
            tools,
            add_generation_prompt,
            &serde_json::Map::new(),
        )
    }

    /// [`ChatTemplate::render_json`] with extra template variables, as the keyword
    /// arguments of `apply_chat_template(messages, tools=..., **kwargs)` (Qwen3's
    /// `enable_thinking`, say). The variables this method sets itself (`messages`,
    /// `tools`, `add_generation_prompt`, `bos_token`, `eos_token`) win over `extra`.
    pub fn render_json_with(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .expect("added at construction");
        let own = context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        };
        let ctx = if extra.is_empty() {
            own
        } else {
            // `context!`'s spread: the first value that has a key wins.
            let extra = minijinja::Value::from_serialize(extra);
            context! { ..own, ..extra }
        };
        tmpl.render(ctx)
            .map_err(|e| anyhow!("chat template failed: {e}"))
    }

    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .expect("added at construction");
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| anyhow!("chat template failed: {e}"))
    }
}

/// Gregorian date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_template_with_default_system() {
        let src = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nDefault<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = t.render(&[ChatMessage::new("user", "hi")], true).unwrap();
        assert_eq!(out, "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn json_messages_and_tools_reach_the_template() {
        let src = "{% if tools %}{% for t in tools %}{{ t.function.name }}|{% endfor %}{% endif %}{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.x }}{% else %}{{ m.content }}{% endif %};{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let msgs = serde_json::json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 7}}}]}
        ]);
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(
            t.render_json(&msgs, Some(&tools), false).unwrap(),
            "f|user:hi;assistant:7;"
        );
        assert_eq!(
            t.render_json(&msgs, None, false).unwrap(),
            "user:hi;assistant:7;"
        );
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t = ChatTemplate::new("{{ raise_exception('no system allowed') }}", "", "").unwrap();
        let e = t.render(&[], false).unwrap_err().to_string();
        assert!(e.contains("no system allowed"), "{e}");
    }

    #[test]
    fn python_string_methods_work() {
        let t = ChatTemplate::new("{{ messages[0]['content'].strip() }}", "", "").unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "  x  ")], false)
                .unwrap(),
            "x"
        );
    }

    #[test]
    fn extra_variables_reach_the_template_and_never_replace_its_own() {
        // Qwen3's switch, as the tiny Qwen3 of tests/data/hf_tiny writes it.
        let src = "{%- for m in messages %}{{ m.role }}:{{ m.content }};{%- endfor %}{%- if add_generation_prompt %}A:{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let msgs = serde_json::json!([{"role": "user", "content": "hi"}]);
        let with = |extra: serde_json::Value| {
            t.render_json_with(&msgs, None, true, extra.as_object().unwrap())
                .unwrap()
        };
        assert_eq!(with(serde_json::json!({})), "user:hi;A:");
        assert_eq!(
            with(serde_json::json!({"enable_thinking": false})),
            "user:hi;A:<think>\n\n</think>\n\n"
        );
        assert_eq!(
            with(serde_json::json!({"enable_thinking": true})),
            "user:hi;A:"
        );
        assert_eq!(
            with(serde_json::json!({"add_generation_prompt": false, "messages": []})),
            "user:hi;A:",
            "the renderer's own variables win"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20786), (2026, 11, 29));
    }
}
