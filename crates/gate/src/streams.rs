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

/// `all` means the six file-backed corpora (`mix` is their shuffle and would repeat prompts).
pub fn corpora(spec: &str) -> Result<Vec<Corpus>> {
    if spec.trim().eq_ignore_ascii_case("all") {
        return Ok(Corpus::SOURCES.to_vec());
    }
    parse_corpus_list(spec)
}

/// Up to `per_corpus` prompts of each corpus, in file order (mix: seeded shuffle, seed 0).
pub fn load_prompts(
    corpus_dir: &Path,
    corpora: &[Corpus],
    per_corpus: usize,
) -> Result<Vec<(Corpus, String, String)>> {
    let source = CorpusSource::new(corpus_dir);
    let mut out = vec![];
    for &c in corpora {
        let loaded = source
            .load(c, Some(per_corpus), 0)
            .with_context(|| format!("loading corpus {c} from {}", corpus_dir.display()))?;
        out.extend(loaded.prompts.into_iter().map(|p| (c, p.id, p.text)));
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
