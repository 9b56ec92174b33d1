//! Token streams: corpus prompts rendered with the reference model's chat template and
//! tokenized as the server does (`/v1/chat/completions`), cut to a maximum length.

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;
use wring_bench::corpus::{parse_corpus_list, Corpus, CorpusSource};
use wring_model::{ChatMessage, ChatTemplate, Tokenizer};

/// One prompt ready to run.
#[derive(Debug, Clone, Serialize)]
pub struct PromptStream {
    /// `<corpus>:<record id>`.
    pub id: String,
    pub corpus: String,
    pub prompt_ids: Vec<u32>,
    /// The user turn was cut so the rendered prompt fits `max_prompt_tokens`.
    pub truncated: bool,
}

/// Short everyday questions (written for this project, one per line): the first thing a
/// chat user asks, where a quantized model's greedy answer can loop although its next-token
/// distributions stay close to the reference's.
pub const EVERYDAY_QUESTIONS: &str = include_str!("../data/everyday_questions.txt");

/// Where a stream's prompt comes from: a benchmark corpus or the everyday questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptSource {
    Corpus(Corpus),
    Everyday,
}

impl PromptSource {
    pub fn tag(self) -> &'static str {
        match self {
            Self::Corpus(c) => c.tag(),
            Self::Everyday => "everyday",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Self::Corpus(c) => c.label(),
            Self::Everyday => "everyday questions (built in)",
        }
    }
}

/// `all` means the six file-backed corpora (`mix` is their shuffle and would repeat prompts)
/// and the everyday questions; otherwise a comma-separated list of corpus names and `everyday`.
pub fn corpora(spec: &str) -> Result<Vec<PromptSource>> {
    if spec.trim().eq_ignore_ascii_case("all") {
        let mut v: Vec<PromptSource> = Corpus::SOURCES.map(PromptSource::Corpus).to_vec();
        v.push(PromptSource::Everyday);
        return Ok(v);
    }
    let names: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let everyday = names.iter().any(|n| n.eq_ignore_ascii_case("everyday"));
    let rest: Vec<&str> = names
        .into_iter()
        .filter(|n| !n.eq_ignore_ascii_case("everyday"))
        .collect();
    let mut v: Vec<PromptSource> = if rest.is_empty() {
        vec![]
    } else {
        parse_corpus_list(&rest.join(","))?
            .into_iter()
            .map(PromptSource::Corpus)
            .collect()
    };
    if everyday {
        v.push(PromptSource::Everyday);
    }
    anyhow::ensure!(!v.is_empty(), "no corpus given");
    Ok(v)
}

/// Up to `per_corpus` prompts of each corpus, in file order (mix: seeded shuffle, seed 0), and
/// every everyday question.
pub fn load_prompts(
    corpus_dir: &Path,
    sources: &[PromptSource],
    per_corpus: usize,
) -> Result<Vec<(PromptSource, String, String)>> {
    let files = CorpusSource::new(corpus_dir);
    let mut out = vec![];
    for &src in sources {
        match src {
            PromptSource::Corpus(c) => {
                let loaded = files
                    .load(c, Some(per_corpus), 0)
                    .with_context(|| format!("loading corpus {c} from {}", corpus_dir.display()))?;
                out.extend(loaded.prompts.into_iter().map(|p| (src, p.id, p.text)));
            }
            // All of them whatever `per_corpus` says: a dozen short prompts.
            PromptSource::Everyday => out.extend(
                EVERYDAY_QUESTIONS
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .enumerate()
                    .map(|(i, q)| (src, i.to_string(), q.trim().to_string())),
            ),
        }
    }
    Ok(out)
}

/// The chat text of one user message with the generation prompt (the text itself without a
/// template).
pub fn render_chat(template: Option<&ChatTemplate>, user: &str) -> Result<String> {
    Ok(match template {
        Some(t) => t.render(&[ChatMessage::new("user", user)], true)?,
        None => user.to_string(),
    })
}

/// Tokenizes rendered text as the server does: BOS added when the model wants it and the
/// template did not write it.
pub fn encode_text(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let mut ids = tok.encode(text)?;
    if let (true, Some(bos)) = (tok.add_bos(), tok.bos_token_id()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    Ok(ids)
}

/// The server's chat encoding (`/v1/chat/completions`) of one user message.
pub fn encode_chat(
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    user: &str,
) -> Result<Vec<u32>> {
    encode_text(tok, &render_chat(template, user)?)
}

/// Encodes `user` as a chat prompt of at most `max_tokens` tokens: a longer user turn is cut
/// to its first tokens (the template's head and generation prompt are always kept).
/// Returns the ids, the rendered text they encode, and whether the user turn was cut.
pub fn encode_truncated(
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    user: &str,
    max_tokens: usize,
) -> Result<(Vec<u32>, String, bool)> {
    let text = render_chat(template, user)?;
    let ids = encode_text(tok, &text)?;
    if ids.len() <= max_tokens {
        return Ok((ids, text, false));
    }
    let content = tok.encode(user)?;
    let overhead = encode_chat(tok, template, "")?.len();
    anyhow::ensure!(
        overhead < max_tokens,
        "the chat template alone takes {overhead} tokens, more than --max-prompt-tokens {max_tokens}"
    );
    // Re-tokenising decoded text can merge differently at the cut, so shrink until it fits.
    let mut keep = (max_tokens - overhead).min(content.len());
    loop {
        let text = render_chat(template, &tok.decode(&content[..keep], false)?)?;
        let ids = encode_text(tok, &text)?;
        if ids.len() <= max_tokens || keep == 0 {
            return Ok((ids, text, true));
        }
        keep -= (ids.len() - max_tokens).min(keep);
    }
}
