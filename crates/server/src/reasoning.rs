//! Reasoning models (Qwen3, DeepSeek-R1 and their distills), the way vLLM's OpenAI server
//! serves them: the model thinks between `<think>` and `</think>`, and a chat response
//! gives that text as `reasoning_content` (and `reasoning`, vLLM's newer name) and the
//! rest as `content`, whole or streamed.
//!
//! - Which parser runs (`--reasoning-parser`, [`resolve`]): `qwen3` or `deepseek_r1` by
//!   name, or `auto` (the default): on when the chat template writes `<think>` or the
//!   tokenizer has `<think>`/`</think>` tokens, `qwen3` when the template has Qwen3's
//!   `enable_thinking` switch, else `deepseek_r1`.
//! - Where a request's output starts ([`PromptThink`]): the template's generation prompt
//!   (what it writes for the assistant's turn) may open the block (DeepSeek-R1's and
//!   Qwen3-Thinking's templates: the output starts inside it, with no opening tag), close
//!   it (Qwen3 with `enable_thinking: false` writes an empty block: everything is
//!   content), or neither (Qwen3's own template: the model writes `<think>` itself).
//! - The split ([`ReasoningSplitter`]): text up to the first `</think>` is reasoning
//!   (a `<think>` tag in it is dropped), the rest content; an output that never closes
//!   the block (cut by `max_tokens`) is all reasoning, and its content null. Tags are
//!   found in the text, so a tag split across deltas, or inside one token's text, splits
//!   the same way as the whole output does. With `qwen3`, `enable_thinking: false` makes
//!   the whole output content, as vLLM's parser does.
//!
//! Where this differs from vLLM, on purpose: the prompt's state comes from the generation
//! prompt alone, not from the last tag anywhere in the prompt (a `</think>` of an earlier
//! turn, kept by Qwen3's template in a tool-calling loop, would otherwise turn the new
//! turn's thinking into content); and `auto` on a template that does not open the block
//! takes an output as thinking only when it opens with `<think>` (so a model that never
//! thinks, Qwen3-Instruct-2507 say, whose template and vocabulary have the tags, keeps
//! its answers as content), where the parsers named explicitly take everything before a
//! `</think>` as reasoning, as vLLM's do.

use serde_json::{Map, Value};
use wring_engine::api::GrammarStart;
use wring_model::Tokenizer;

use crate::error::ApiError;
use crate::tools::held_prefix_len;

pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// `--reasoning-parser`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParserChoice {
    Auto,
    None,
    Named(ParserKind),
}

impl ParserChoice {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "auto" => Ok(Self::Auto),
            "none" => Ok(Self::None),
            "qwen3" => Ok(Self::Named(ParserKind::Qwen3)),
            "deepseek_r1" => Ok(Self::Named(ParserKind::DeepSeekR1)),
            other => Err(format!(
                "unknown reasoning parser {other:?}; expected auto, none, qwen3 or deepseek_r1"
            )),
        }
    }
}

/// vLLM's two `<think>` parsers. They split alike; `qwen3` also reads the request's
/// `enable_thinking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParserKind {
    Qwen3,
    DeepSeekR1,
}

impl ParserKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen3 => "qwen3",
            Self::DeepSeekR1 => "deepseek_r1",
        }
    }
}

/// The server's reasoning parser, resolved at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reasoning {
    pub kind: ParserKind,
    /// Chosen by `auto` (then an output the prompt did not start inside the block is
    /// thinking only when it opens with `<think>`).
    pub auto: bool,
    /// `<think>`'s token id, where it is one token whose text the detokenizer keeps.
    pub open_id: Option<u32>,
    /// `</think>`'s token id, likewise (a grammar waits for it: [`GrammarStart`]).
    pub close_id: Option<u32>,
}

/// How a tag is in the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagToken {
    /// One token, whose text the detokenizer writes.
    Kept(u32),
    /// One special token: the detokenizer leaves it out of the text.
    Dropped(u32),
    /// Several tokens (or none of its own).
    Absent,
}

fn tag_token(tokenizer: &Tokenizer, tag: &str) -> TagToken {
    match tokenizer.encode(tag).ok().as_deref() {
        Some(&[id]) => match tokenizer.decode(&[id], true) {
            Ok(text) if text == tag => TagToken::Kept(id),
            _ => TagToken::Dropped(id),
        },
        _ => TagToken::Absent,
    }
}

/// The parser `choice` gives for this tokenizer and template, and why, for the start-up
/// log. None when off: asked for, or `auto` found no sign of thinking, or the tags are
/// special tokens the detokenizer drops from the text (then nothing could be split).
pub fn resolve(
    choice: ParserChoice,
    tokenizer: &Tokenizer,
    template: Option<&str>,
) -> (Option<Reasoning>, String) {
    let (open, close) = (
        tag_token(tokenizer, THINK_OPEN),
        tag_token(tokenizer, THINK_CLOSE),
    );
    let writes_think = template.is_some_and(|t| t.contains(THINK_OPEN));
    let has_switch = template.is_some_and(|t| t.contains("enable_thinking"));
    let dropped = matches!(open, TagToken::Dropped(_)) || matches!(close, TagToken::Dropped(_));
    let id = |t: TagToken| match t {
        TagToken::Kept(id) => Some(id),
        _ => None,
    };
    let (kind, auto) = match choice {
        ParserChoice::None => return (None, "off (--reasoning-parser none)".into()),
        ParserChoice::Named(kind) => (kind, false),
        ParserChoice::Auto => {
            let has_tokens = open != TagToken::Absent && close != TagToken::Absent;
            if !writes_think && !has_tokens {
                return (
                    None,
                    "off (auto: the chat template writes no <think> and the tokenizer has no <think>/</think> tokens)".into(),
                );
            }
            let kind = if has_switch {
                ParserKind::Qwen3
            } else {
                ParserKind::DeepSeekR1
            };
            (kind, true)
        }
    };
    if dropped {
        return (
            None,
            format!(
                "off: <think>/</think> are special tokens of this tokenizer, which the detokenizer leaves out of the text, so {} could not split the output",
                kind.name()
            ),
        );
    }
    let why = match (auto, writes_think, has_switch) {
        (false, ..) => format!("{} (--reasoning-parser {})", kind.name(), kind.name()),
        (true, true, true) => format!(
            "{} (auto: the chat template writes <think> and has Qwen3's enable_thinking switch)",
            kind.name()
        ),
        (true, true, false) => format!("{} (auto: the chat template writes <think>)", kind.name()),
        (true, false, _) => format!(
            "{} (auto: the tokenizer has <think>/</think> tokens)",
            kind.name()
        ),
    };
    (
        Some(Reasoning {
            kind,
            auto,
            open_id: id(open),
            close_id: id(close),
        }),
        why,
    )
}

/// What the template's generation prompt does with the thinking block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptThink {
    /// It opens the block: the output starts inside it (DeepSeek-R1's template).
    Open,
    /// It writes a whole block (Qwen3 with thinking off): the output is the answer.
    Closed,
    /// Neither: the model opens the block itself, or does not think.
    Absent,
}

impl PromptThink {
    /// From the generation prompt's text: its last tag decides.
    pub fn of(generation_prompt: &str) -> Self {
        match (
            generation_prompt.rfind(THINK_OPEN),
            generation_prompt.rfind(THINK_CLOSE),
        ) {
            (Some(o), Some(c)) if o > c => Self::Open,
            (_, Some(_)) => Self::Closed,
            (Some(_), None) => Self::Open,
            (None, None) => Self::Absent,
        }
    }
}

/// Where a request's output starts for the splitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitStart {
    /// Inside the thinking: reasoning until `</think>`.
    Thinking,
    /// Thinking only if the output opens with `<think>` (after blanks); else content.
    MaybeThinking,
}

/// The `enable_thinking` template variable, where it is a boolean.
pub fn enable_thinking(kwargs: &Map<String, Value>) -> Option<bool> {
    kwargs.get("enable_thinking").and_then(Value::as_bool)
}

impl Reasoning {
    /// Where a request's output starts, from its generation prompt and its template
    /// variables; None when the whole output is content.
    pub fn split_start(
        &self,
        prompt: PromptThink,
        kwargs: &Map<String, Value>,
    ) -> Option<SplitStart> {
        if self.kind == ParserKind::Qwen3 && enable_thinking(kwargs) == Some(false) {
            return None;
        }
        match prompt {
            PromptThink::Closed => None,
            PromptThink::Open => Some(SplitStart::Thinking),
            PromptThink::Absent if self.auto => Some(SplitStart::MaybeThinking),
            PromptThink::Absent => Some(SplitStart::Thinking),
        }
    }

    /// Where a constrained request's grammar starts: after `</think>` (or at the first
    /// token, which may instead open the thinking); a 400 naming `param` when the tags
    /// this needs are not single tokens (the engine follows tokens, not text).
    pub fn grammar_start(
        &self,
        split: Option<SplitStart>,
        param: &str,
    ) -> Result<GrammarStart, ApiError> {
        let refuse = || {
            ApiError::invalid_param(
                param,
                format!(
                    "Structured output with the {} reasoning parser binds the answer after `</think>`, which needs `<think>` and `</think>` to be single tokens of this model's vocabulary; they are not.",
                    self.kind.name()
                ),
            )
        };
        match split {
            None => Ok(GrammarStart::First),
            Some(SplitStart::Thinking) => Ok(GrammarStart::After {
                close: self.close_id.ok_or_else(refuse)?,
            }),
            Some(SplitStart::MaybeThinking) => Ok(GrammarStart::FirstOr {
                open: self.open_id.ok_or_else(refuse)?,
                close: self.close_id.ok_or_else(refuse)?,
            }),
        }
    }
}

/// A piece of a chat output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before anything but blanks: does the output open with `<think>`?
    Leading,
    /// Inside the thinking; `strip_open`: a `<think>` tag is still to be dropped.
    Thinking {
        strip_open: bool,
    },
    Answer,
}

/// One output's split into reasoning and content as its text arrives: text that could
/// still be the start of a tag is held back (like a stop string), so a tag split
/// across deltas splits where the whole output would.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    phase: Phase,
    buf: String,
    reasoned: bool,
}

impl ReasoningSplitter {
    pub fn new(start: SplitStart) -> Self {
        let phase = match start {
            SplitStart::Thinking => Phase::Thinking { strip_open: true },
            SplitStart::MaybeThinking => Phase::Leading,
        };
        Self {
            phase,
            buf: String::new(),
            reasoned: start == SplitStart::Thinking,
        }
    }

    /// Whether the output had a thinking part (its reasoning is then a string, maybe
    /// empty; otherwise null).
    pub fn reasoned(&self) -> bool {
        self.reasoned
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.phase {
                Phase::Leading => {
                    let rest = self.buf.trim_start();
                    if rest.starts_with(THINK_OPEN) {
                        let drop = self.buf.len() - rest.len() + THINK_OPEN.len();
                        self.buf.drain(..drop);
                        self.phase = Phase::Thinking { strip_open: false };
                        self.reasoned = true;
                        continue;
                    }
                    if THINK_OPEN.starts_with(rest) {
                        return out;
                    }
                    self.phase = Phase::Answer;
                }
                Phase::Thinking { strip_open } => {
                    let close = self.buf.find(THINK_CLOSE);
                    let open = strip_open.then(|| self.buf.find(THINK_OPEN)).flatten();
                    match (open, close) {
                        (Some(o), c) if c.is_none_or(|c| o < c) => {
                            self.emit_reasoning(&mut out, o);
                            self.buf.drain(..THINK_OPEN.len());
                            self.phase = Phase::Thinking { strip_open: false };
                        }
                        (_, Some(c)) => {
                            self.emit_reasoning(&mut out, c);
                            self.buf.drain(..THINK_CLOSE.len());
                            self.phase = Phase::Answer;
                        }
                        _ => {
                            let mut keep = held_prefix_len(&self.buf, THINK_CLOSE);
                            if strip_open {
                                keep = keep.max(held_prefix_len(&self.buf, THINK_OPEN));
                            }
                            self.emit_reasoning(&mut out, self.buf.len() - keep);
                            return out;
                        }
                    }
                }
                Phase::Answer => {
                    if !self.buf.is_empty() {
                        out.push(Piece::Content(std::mem::take(&mut self.buf)));
                    }
                    return out;
                }
            }
        }
    }

    /// The end of the output: what was held back is released in its phase's kind.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.buf);
        if rest.is_empty() {
            return Vec::new();
        }
        match self.phase {
            Phase::Thinking { .. } => vec![Piece::Reasoning(rest)],
            Phase::Leading | Phase::Answer => vec![Piece::Content(rest)],
        }
    }

    /// Gives out `buf[..end]` as reasoning.
    fn emit_reasoning(&mut self, out: &mut Vec<Piece>, end: usize) {
        if end > 0 {
            out.push(Piece::Reasoning(self.buf.drain(..end).collect()));
        }
    }
}

/// `reasoning_effort`'s values (vLLM's; `none` turns thinking off).
pub const REASONING_EFFORTS: &[&str] =
    &["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/// Template variables the renderer sets itself, or that vLLM refuses in
/// `chat_template_kwargs`: each has a request field of its own, or none that applies.
const RESERVED_KWARGS: &[&str] = &[
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "chat_template",
    "tokenize",
];

/// Checks a `chat_template_kwargs` object (a request's, or the server's defaults):
/// an error names the field (`{param}.{key}`) and says why.
pub fn check_template_kwargs(
    kwargs: &Map<String, Value>,
    param: &str,
) -> Result<(), (String, String)> {
    for (key, value) in kwargs {
        if RESERVED_KWARGS.contains(&key.as_str()) {
            return Err((
                format!("{param}.{key}"),
                format!(
                    "`{key}` cannot be set through `{param}`: the server sets it from the request."
                ),
            ));
        }
        if matches!(key.as_str(), "enable_thinking" | "thinking") && !value.is_boolean() {
            return Err((
                format!("{param}.{key}"),
                format!(
                    "`{param}.{key}` must be a boolean; got {}.",
                    crate::body::json_kind(value)
                ),
            ));
        }
    }
    Ok(())
}

/// A chat request's template variables: the server's defaults, the request's
/// `chat_template_kwargs` over them, then vLLM's `reasoning_effort` shorthand (the
/// `reasoning_effort` variable, and `enable_thinking` = effort is not `none` unless the
/// request's own kwargs set `enable_thinking`).
pub fn template_kwargs(
    defaults: &Map<String, Value>,
    request: &Map<String, Value>,
    reasoning_effort: Option<&str>,
) -> Map<String, Value> {
    let mut kwargs = defaults.clone();
    kwargs.extend(request.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(effort) = reasoning_effort {
        kwargs.insert("reasoning_effort".into(), Value::String(effort.into()));
        if !request.contains_key("enable_thinking") {
            kwargs.insert("enable_thinking".into(), Value::Bool(effort != "none"));
        }
    }
    kwargs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(start: SplitStart, pieces: &[&str]) -> (Option<String>, String) {
        let mut s = ReasoningSplitter::new(start);
        let mut out: Vec<Piece> = pieces.iter().flat_map(|p| s.push(p)).collect();
        out.extend(s.finish());
        let (mut r, mut c) = (String::new(), String::new());
        for p in out {
            match p {
                Piece::Reasoning(t) => {
                    assert!(!t.is_empty());
                    r.push_str(&t)
                }
                Piece::Content(t) => {
                    assert!(!t.is_empty());
                    c.push_str(&t)
                }
            }
        }
        (s.reasoned().then_some(r), c)
    }

    fn whole(start: SplitStart, text: &str) -> (Option<String>, String) {
        split_all(start, &[text])
    }

    #[test]
    fn whole_outputs_split_as_vllms_parsers_do() {
        use SplitStart::*;
        let r = |s: &str| Some(s.to_string());
        // Qwen3's own template: the model opens the block.
        assert_eq!(
            whole(Thinking, "<think>\nhmm\n</think>\n\nParis."),
            (r("\nhmm\n"), "\n\nParis.".into())
        );
        // DeepSeek-R1's template opened it in the prompt: no opening tag in the output.
        assert_eq!(
            whole(Thinking, "hmm\n</think>\n\nParis."),
            (r("hmm\n"), "\n\nParis.".into())
        );
        // Never closed (max_tokens): all reasoning, no content.
        assert_eq!(
            whole(Thinking, "<think>\nhmm, let me"),
            (r("\nhmm, let me"), "".into())
        );
        assert_eq!(whole(Thinking, "hmm <thi"), (r("hmm <thi"), "".into()));
        // Closed at once.
        assert_eq!(whole(Thinking, "</think>Paris."), (r(""), "Paris.".into()));
        // Tags after the first `</think>` are the answer's text.
        assert_eq!(
            whole(Thinking, "a</think>b</think><think>c"),
            (r("a"), "b</think><think>c".into())
        );
        // `auto` on a template that does not open the block: thinking only when the
        // output opens it.
        assert_eq!(
            whole(MaybeThinking, " \n<think>x</think>y"),
            (r("x"), "y".into())
        );
        assert_eq!(whole(MaybeThinking, "Paris."), (None, "Paris.".into()));
        assert_eq!(whole(MaybeThinking, "  <thin"), (None, "  <thin".into()));
        assert_eq!(
            whole(MaybeThinking, "a</think>b"),
            (None, "a</think>b".into())
        );
    }

    #[test]
    fn every_split_of_the_text_gives_the_whole_outputs_split() {
        let texts = [
            "<think>\nWe need <the> capital </thinking> of </th France.\n</think>\n\nParis. </think> <think>",
            "plan: a<b, b</think>answer",
            "<think></think>",
            "  <think>é</think>ü",
            "Paris <think> is",
        ];
        for start in [SplitStart::Thinking, SplitStart::MaybeThinking] {
            for text in texts {
                let want = whole(start, text);
                let bounds: Vec<usize> = (0..=text.len())
                    .filter(|&i| text.is_char_boundary(i))
                    .collect();
                for &a in &bounds {
                    for &b in bounds.iter().filter(|&&b| b >= a) {
                        let got = split_all(start, &[&text[..a], &text[a..b], &text[b..]]);
                        assert_eq!(got, want, "{start:?} {text:?} split at {a}, {b}");
                    }
                }
                let chars: Vec<String> = text.chars().map(String::from).collect();
                let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
                assert_eq!(split_all(start, &refs), want, "{start:?} {text:?} by char");
            }
        }
    }

    #[test]
    fn the_generation_prompt_says_where_the_output_starts() {
        assert_eq!(
            PromptThink::of("<|im_start|>assistant\n"),
            PromptThink::Absent
        );
        assert_eq!(
            PromptThink::of("<｜Assistant｜><think>\n"),
            PromptThink::Open
        );
        assert_eq!(
            PromptThink::of("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            PromptThink::Closed
        );
        assert_eq!(PromptThink::of("</think>x<think>\n"), PromptThink::Open);
    }

    #[test]
    fn qwen3_reads_enable_thinking_and_auto_waits_for_an_opening_tag() {
        let qwen3 = Reasoning {
            kind: ParserKind::Qwen3,
            auto: false,
            open_id: Some(3),
            close_id: Some(4),
        };
        let off: Map<String, Value> =
            serde_json::from_str(r#"{"enable_thinking": false}"#).unwrap();
        let none = Map::new();
        assert_eq!(qwen3.split_start(PromptThink::Absent, &off), None);
        assert_eq!(
            qwen3.split_start(PromptThink::Absent, &none),
            Some(SplitStart::Thinking)
        );
        assert_eq!(qwen3.split_start(PromptThink::Closed, &none), None);
        let r1 = Reasoning {
            kind: ParserKind::DeepSeekR1,
            ..qwen3.clone()
        };
        assert_eq!(
            r1.split_start(PromptThink::Open, &off),
            Some(SplitStart::Thinking),
            "deepseek_r1 has no switch"
        );
        let auto = Reasoning {
            auto: true,
            ..qwen3.clone()
        };
        assert_eq!(
            auto.split_start(PromptThink::Absent, &none),
            Some(SplitStart::MaybeThinking)
        );
        assert_eq!(
            auto.split_start(PromptThink::Open, &none),
            Some(SplitStart::Thinking)
        );
        assert_eq!(
            qwen3
                .grammar_start(Some(SplitStart::Thinking), "response_format")
                .unwrap(),
            GrammarStart::After { close: 4 }
        );
        assert_eq!(
            auto.grammar_start(Some(SplitStart::MaybeThinking), "x")
                .unwrap(),
            GrammarStart::FirstOr { open: 3, close: 4 }
        );
        let no_tokens = Reasoning {
            close_id: None,
            ..qwen3
        };
        let e = no_tokens
            .grammar_start(Some(SplitStart::Thinking), "response_format")
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("response_format"));
    }

    #[test]
    fn template_kwargs_merge_and_the_reasoning_effort_shorthand() {
        let obj = |s: &str| -> Map<String, Value> { serde_json::from_str(s).unwrap() };
        let d = obj(r#"{"enable_thinking": false, "x": 1}"#);
        assert_eq!(
            Value::Object(template_kwargs(&d, &obj(r#"{"x": 2}"#), None)),
            serde_json::json!({"enable_thinking": false, "x": 2})
        );
        assert_eq!(
            Value::Object(template_kwargs(&d, &Map::new(), Some("high"))),
            serde_json::json!({"enable_thinking": true, "x": 1, "reasoning_effort": "high"}),
            "a request's effort wins over the server's default switch"
        );
        assert_eq!(
            Value::Object(template_kwargs(
                &Map::new(),
                &obj(r#"{"enable_thinking": true}"#),
                Some("none")
            )),
            serde_json::json!({"enable_thinking": true, "reasoning_effort": "none"}),
            "the request's own enable_thinking wins over its effort"
        );
        assert!(check_template_kwargs(&obj(r#"{"enable_thinking": true, "y": [1]}"#), "k").is_ok());
        assert_eq!(
            check_template_kwargs(&obj(r#"{"enable_thinking": "no"}"#), "chat_template_kwargs")
                .unwrap_err()
                .0,
            "chat_template_kwargs.enable_thinking"
        );
        assert_eq!(
            check_template_kwargs(&obj(r#"{"messages": []}"#), "k")
                .unwrap_err()
                .0,
            "k.messages"
        );
    }
}
