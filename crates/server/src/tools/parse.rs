//! Tool calls out of the model's text, incrementally: text is pushed as it is
//! generated and comes back as content or as complete calls. Text that could still
//! open a call is held back (like a stop string), so streamed content never shows
//! call markup, and so is a run of blanks until what follows it is known: blanks before,
//! between and after calls are layout, not an answer (a reasoning model writes
//! `</think>\n\n<tool_call>`). A call that does not parse, or names a function the
//! request did not offer, is given back as content, unchanged.

use serde_json::Value;

use super::ToolFormat;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Content(String),
    /// A complete call; `arguments` is JSON text.
    Call {
        name: String,
        arguments: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Llama JSON: nothing but whitespace yet; a `{` starts calls.
    Undecided,
    Content,
    /// Inside `<tool_call>` (Hermes) or a run of JSON calls (Llama).
    InCall,
}

pub struct ToolCallParser {
    format: ToolFormat,
    mode: Mode,
    /// Text received and not yet given out.
    buf: String,
    calls: usize,
    /// The functions the request offers.
    names: Vec<String>,
}

impl ToolCallParser {
    /// `forced_prefix` is the call opening the prompt already wrote; the output
    /// continues it.
    pub fn new(format: ToolFormat, forced_prefix: &str, names: Vec<String>) -> Self {
        let mut p = Self {
            format,
            mode: match format {
                ToolFormat::Hermes => Mode::Content,
                ToolFormat::Llama3Json => Mode::Undecided,
            },
            buf: String::new(),
            calls: 0,
            names,
        };
        let early = p.push(forced_prefix);
        debug_assert!(early.is_empty(), "a call opening yields nothing by itself");
        p
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        match self.format {
            ToolFormat::Hermes => self.hermes(&mut out),
            ToolFormat::Llama3Json => self.llama(&mut out),
        }
        out
    }

    /// The end of the output: whatever is held is content, or a last call whose
    /// closing tag was cut off by a stop string.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.buf);
        let mut out = Vec::new();
        match self.mode {
            Mode::InCall if self.format == ToolFormat::Hermes => match self.call(&rest) {
                Some(c) => out.push(c),
                None => self.content(&mut out, format!("{OPEN}{rest}")),
            },
            _ => self.content(&mut out, rest),
        }
        self.mode = Mode::Content;
        out
    }

    fn content(&self, out: &mut Vec<Piece>, text: String) {
        // Whitespace between and after calls is layout, not an answer.
        if text.is_empty() || (self.calls > 0 && text.trim().is_empty()) {
            return;
        }
        out.push(Piece::Content(text));
    }

    fn hermes(&mut self, out: &mut Vec<Piece>) {
        loop {
            match self.mode {
                Mode::InCall => {
                    let Some(end) = self.buf.find(CLOSE) else {
                        return;
                    };
                    let body = self.buf[..end].to_string();
                    self.buf.drain(..end + CLOSE.len());
                    self.mode = Mode::Content;
                    match self.call(&body) {
                        Some(c) => {
                            self.calls += 1;
                            out.push(c);
                        }
                        None => self.content(out, format!("{OPEN}{body}{CLOSE}")),
                    }
                }
                _ => {
                    if let Some(start) = self.buf.find(OPEN) {
                        let before = self.buf[..start].to_string();
                        self.buf.drain(..start + OPEN.len());
                        // Blanks right before a call are layout.
                        if !before.trim().is_empty() {
                            self.content(out, before);
                        }
                        self.mode = Mode::InCall;
                        continue;
                    }
                    let keep = held_prefix_len(&self.buf, OPEN);
                    let release = self.buf.len() - keep;
                    // Blanks wait for what follows them (text, a call, or the end).
                    if self.buf[..release].trim().is_empty() {
                        return;
                    }
                    let text: String = self.buf.drain(..release).collect();
                    self.content(out, text);
                    return;
                }
            }
        }
    }

    fn llama(&mut self, out: &mut Vec<Piece>) {
        if self.mode == Mode::Undecided {
            match self.buf.trim_start().chars().next() {
                None => return,
                Some('{') => self.mode = Mode::InCall,
                Some(_) => self.mode = Mode::Content,
            }
        }
        if self.mode == Mode::Content {
            let text = std::mem::take(&mut self.buf);
            self.content(out, text);
            return;
        }
        // One or more JSON objects separated by `;` and whitespace.
        loop {
            let skip = self.buf.len()
                - self
                    .buf
                    .trim_start_matches(|c: char| c.is_whitespace() || c == ';')
                    .len();
            let rest = &self.buf[skip..];
            if rest.is_empty() {
                return;
            }
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            match values.next() {
                Some(Ok(v)) => {
                    let used = skip + values.byte_offset();
                    match self.call_from_value(&v) {
                        Some(c) => {
                            self.calls += 1;
                            out.push(c);
                            self.buf.drain(..used);
                        }
                        None => return self.give_up(out),
                    }
                }
                Some(Err(e)) if e.is_eof() => return,
                _ => return self.give_up(out),
            }
        }
    }

    /// Not a call after all: the rest of the output is plain content.
    fn give_up(&mut self, out: &mut Vec<Piece>) {
        self.mode = Mode::Content;
        let text = std::mem::take(&mut self.buf);
        self.content(out, text);
    }
}

/// Byte length of the longest suffix of `text` that is a proper prefix of `tag`: what a
/// stream holds back while a tag may still be arriving (tool calls, think blocks).
pub(crate) fn held_prefix_len(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

impl ToolCallParser {
    fn call(&self, body: &str) -> Option<Piece> {
        self.call_from_value(&serde_json::from_str(body.trim()).ok()?)
    }

    fn call_from_value(&self, v: &Value) -> Option<Piece> {
        let name = v.get("name")?.as_str()?;
        if !self.names.iter().any(|n| n == name) {
            return None;
        }
        call_from_value(name, v)
    }
}

fn call_from_value(name: &str, v: &Value) -> Option<Piece> {
    let name = name.to_string();
    let args = v.get("arguments").or_else(|| v.get("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => "{}".to_string(),
        // Some models write the arguments as a JSON string already.
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Some(Piece::Call { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(format: ToolFormat, prefix: &str, pieces: &[&str]) -> Vec<Piece> {
        let names = ["f", "g", "get_weather", "get_time"]
            .map(String::from)
            .to_vec();
        let mut p = ToolCallParser::new(format, prefix, names);
        let mut out: Vec<Piece> = pieces.iter().flat_map(|s| p.push(s)).collect();
        out.extend(p.finish());
        // Merge adjacent content for comparison.
        let mut merged: Vec<Piece> = Vec::new();
        for piece in out {
            match (merged.last_mut(), piece) {
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
                (_, p) => merged.push(p),
            }
        }
        merged
    }

    fn c(s: &str) -> Piece {
        Piece::Content(s.into())
    }

    fn call_of(name: &str, args: &str) -> Piece {
        Piece::Call {
            name: name.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn hermes_calls_split_anywhere_are_found_and_never_leak_as_content() {
        let text = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
        let want = vec![
            c("Let me check."),
            call_of("get_weather", "{\"city\":\"Paris\"}"),
            call_of("get_time", "{}"),
        ];
        for split in 1..text.len() {
            if !text.is_char_boundary(split) {
                continue;
            }
            let (a, b) = text.split_at(split);
            assert_eq!(
                run(ToolFormat::Hermes, "", &[a, b]),
                want,
                "split at {split}"
            );
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(ToolFormat::Hermes, "", &refs), want);
    }

    #[test]
    fn hermes_plain_text_bad_calls_and_a_forced_cut_off_call() {
        assert_eq!(
            run(ToolFormat::Hermes, "", &["a < b <tool", "s>"]),
            vec![c("a < b <tools>")]
        );
        assert_eq!(
            run(ToolFormat::Hermes, "", &["<tool_call>not json</tool_call>"]),
            vec![c("<tool_call>not json</tool_call>")]
        );
        // The prompt opened the call and a stop string removed `</tool_call>`.
        assert_eq!(
            run(
                ToolFormat::Hermes,
                "<tool_call>\n{\"name\": \"",
                &["f\", \"arguments\": {\"x\": 1}}\n"]
            ),
            vec![call_of("f", "{\"x\":1}")]
        );
        assert_eq!(
            run(
                ToolFormat::Hermes,
                "<tool_call>\n{\"name\": \"",
                &["f\", \"argu"]
            ),
            vec![c("<tool_call>\n{\"name\": \"f\", \"argu")]
        );
    }

    #[test]
    fn blanks_around_calls_are_layout_and_blanks_in_text_are_kept() {
        let call = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
        for pieces in [
            vec!["\n\n", call],
            vec!["\n", "\n", call, "\n"],
            vec!["\n\n<tool", &call[5..]],
        ] {
            assert_eq!(
                run(ToolFormat::Hermes, "", &pieces),
                vec![call_of("f", "{}")],
                "{pieces:?}"
            );
        }
        assert_eq!(
            run(ToolFormat::Hermes, "", &["Hello", " ", "\n", "world", " "]),
            vec![c("Hello \nworld ")]
        );
        assert_eq!(run(ToolFormat::Hermes, "", &["\n\n"]), vec![c("\n\n")]);
    }

    #[test]
    fn llama_json_calls_and_plain_answers() {
        assert_eq!(
            run(
                ToolFormat::Llama3Json,
                "",
                &[
                    " {\"name\": \"f\", \"param",
                    "eters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": {}}"
                ]
            ),
            vec![call_of("f", "{\"a\":1}"), call_of("g", "{}")]
        );
        assert_eq!(
            run(ToolFormat::Llama3Json, "", &["The answer", " is {x}"]),
            vec![c("The answer is {x}")]
        );
        assert_eq!(
            run(ToolFormat::Llama3Json, "", &["{\"answer\": 42}"]),
            vec![c("{\"answer\": 42}")]
        );
        assert_eq!(
            run(
                ToolFormat::Llama3Json,
                "{\"name\": \"",
                &["f\", \"parameters\": {\"q\": \"x\"}}"]
            ),
            vec![call_of("f", "{\"q\":\"x\"}")]
        );
        assert_eq!(
            run(ToolFormat::Llama3Json, "", &["{\"name\": \"f\""]),
            vec![c("{\"name\": \"f\"")]
        );
        // A function the request did not offer is not a call.
        let unknown = "<tool_call>{\"name\": \"Paris\", \"arguments\": {}}</tool_call>";
        assert_eq!(run(ToolFormat::Hermes, "", &[unknown]), vec![c(unknown)]);
    }
}
