//! Tokenizers: the BPE vocabulary embedded in a GGUF file (rebuilt as a `tokenizers`
//! pipeline) or a Hugging Face `tokenizer.json`, plus incremental detokenisation.

use crate::byte_level::{ByteStream, ByteTable};
use crate::gguf::GgufFile;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, OnceLock};

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<u32>,
    add_bos: bool,
    /// Each token's bytes, where the decoder is plain byte-level and the table was
    /// checked against it token by token (built on first use: see [`Tokenizer::byte_table`]).
    byte_table: OnceLock<Option<ByteTable>>,
}

/// Pre-tokenizer regexes by GGUF `tokenizer.ggml.pre` (the published split patterns
/// of each model family).
fn pre_tokenizer_for(pre: &str) -> Result<Value> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
    let splits = |patterns: &[&str]| {
        let mut seq: Vec<Value> = patterns.iter().map(|p| split(p)).collect();
        seq.push(byte_level(false));
        json!({"type": "Sequence", "pretokenizers": seq})
    };
    Ok(match pre {
        "smollm" | "starcoder" | "refact" => json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        "gpt2" | "gpt-2" | "default" => byte_level(true),
        "llama-bpe" | "llama3" | "llama-v3" => json!({"type": "Sequence", "pretokenizers": [
            split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
            byte_level(false)]}),
        "qwen2" | "deepseek-r1-qwen" => json!({"type": "Sequence", "pretokenizers": [
            split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
            byte_level(false)]}),
        // DeepSeek's splits run one after another, each isolating its matches.
        "deepseek-llm" => splits(&[
            r"[\r\n]",
            // Latin, Greek, Cyrillic and the other cased scripts, as DeepSeek lists them.
            concat!(
                r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}",
                r"\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}",
                r"\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}",
                r"\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}",
                r"\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}",
                r"\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}",
                r"\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}",
                r"\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}",
                r"\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}",
                r"\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}",
                r"\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}",
                r"\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}",
                r"\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}",
                r"\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}",
                r"\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}",
                r"\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}",
                r"\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
            ),
            r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
            r"\s+$",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}+",
        ]),
        "deepseek-coder" => splits(&[
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}",
        ]),
        "deepseek-v3" => splits(&[
            r"\p{N}{1,3}",
            r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
            r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
        ]),
        other => bail!(
            "GGUF pre-tokenizer type {other:?} is not supported (supported: smollm, gpt2, llama-bpe, qwen2, deepseek-llm, deepseek-coder, deepseek-v3)"
        ),
    })
}

/// The GGUF vocabulary as `tokenizers`' BPE vocab, plus the tokens matched whole in text
/// (3 = control, 4 = user-defined; 2 = unknown for SentencePiece) as added tokens.
struct GgufVocab<'a> {
    tokens: Vec<&'a str>,
    /// `tokenizer.ggml.token_type` per token (1 = normal where the file has none).
    types: Vec<u64>,
}

impl<'a> GgufVocab<'a> {
    fn read(g: &'a GgufFile) -> Result<Self> {
        let tokens = g
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .ok_or_else(|| anyhow!("tokenizer.ggml.tokens is missing"))?
            .iter()
            .enumerate()
            .map(|(id, t)| {
                t.as_str()
                    .ok_or_else(|| anyhow!("token {id} is not a string"))
            })
            .collect::<Result<Vec<_>>>()?;
        let types = g
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array());
        let types = (0..tokens.len())
            .map(|id| {
                types
                    .and_then(|ts| ts.get(id))
                    .and_then(|v| v.as_u64())
                    .unwrap_or(1)
            })
            .collect();
        Ok(Self { tokens, types })
    }

    fn vocab(&self) -> serde_json::Map<String, Value> {
        let mut vocab = serde_json::Map::with_capacity(self.tokens.len());
        for (id, t) in self.tokens.iter().enumerate() {
            // A repeated string keeps its first id, as llama.cpp's lookup does.
            vocab.entry(t.to_string()).or_insert(json!(id));
        }
        vocab
    }

    /// Tokens of the given types as `added_tokens` entries; control and unknown ones special.
    fn added(&self, whole: &[u64]) -> Vec<Value> {
        self.tokens
            .iter()
            .zip(&self.types)
            .enumerate()
            .filter(|(_, (_, ty))| whole.contains(ty))
            .map(|(id, (s, ty))| {
                json!({"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
                       "normalized": false, "special": *ty != 4})
            })
            .collect()
    }
}

/// Byte-level BPE (`tokenizer.ggml.model` "gpt2": Llama 3, Qwen, SmolLM): merges from the file,
/// the family's split regex from `tokenizer.ggml.pre`.
fn byte_level_bpe_spec(g: &GgufFile) -> Result<Value> {
    let pre = g.get_str("tokenizer.ggml.pre").unwrap_or("default");
    let v = GgufVocab::read(g)?;
    let merges: Vec<Value> = g
        .get("tokenizer.ggml.merges")
        .and_then(|v| v.as_array())
        .ok_or_else(|| anyhow!("tokenizer.ggml.merges is missing"))?
        .iter()
        .filter_map(|m| m.as_str().map(|s| json!(s)))
        .collect();
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": v.added(&[3, 4]),
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer_for(pre)?,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": pre.starts_with("llama"), "vocab": v.vocab(), "merges": merges}
    }))
}

/// SentencePiece BPE (`tokenizer.ggml.model` "llama": Llama 2, Mistral, Mixtral): spaces
/// become "▁", a "▁" goes in front of each run of text (unless `add_space_prefix` is false),
/// characters outside the vocabulary fall back to `<0xNN>` byte tokens, and pieces merge
/// best-score first. The file carries scores, not merges: every split of a normal token
/// into two normal tokens is a merge, ranked by the merged token's score (what
/// SentencePiece's own BPE encoder and llama.cpp's do).
fn sentencepiece_bpe_spec(g: &GgufFile) -> Result<Value> {
    let v = GgufVocab::read(g)?;
    let scores: Vec<f64> = g
        .get("tokenizer.ggml.scores")
        .and_then(|v| v.as_array())
        .ok_or_else(|| {
            anyhow!("tokenizer.ggml.scores is missing (a SentencePiece vocabulary needs it)")
        })?
        .iter()
        .map(|s| s.as_f64().unwrap_or(f64::NEG_INFINITY))
        .collect();
    if scores.len() != v.tokens.len() {
        bail!(
            "tokenizer.ggml.scores has {} entries for {} tokens",
            scores.len(),
            v.tokens.len()
        );
    }
    let normal = |id: usize| v.types[id] == 1;
    let ids: std::collections::HashMap<&str, usize> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|&(id, _)| normal(id))
        .map(|(id, t)| (*t, id))
        .collect();
    // (merged score, merged id, left id): best score first, then the shorter left piece.
    let mut merges: Vec<(f64, usize, usize, usize)> = vec![];
    for (id, t) in v.tokens.iter().enumerate().filter(|&(id, _)| normal(id)) {
        for (cut, _) in t.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (ids.get(&t[..cut]), ids.get(&t[cut..])) {
                merges.push((scores[id], id, l, r));
            }
        }
    }
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let merges: Vec<Value> = merges
        .iter()
        .map(|&(_, _, l, r)| json!([v.tokens[l], v.tokens[r]]))
        .collect();
    let space_prefix = g
        .get("tokenizer.ggml.add_space_prefix")
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    let mut normalizers = vec![];
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "▁"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if space_prefix {
        normalizers.push(json!({"type": "Prepend", "prepend": "▁"}));
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    normalizers.push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"}));
    let unk = g
        .get_u64("tokenizer.ggml.unknown_token_id")
        .map(|id| id as usize)
        .or_else(|| v.types.iter().position(|&ty| ty == 2))
        .and_then(|id| v.tokens.get(id).copied());
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": v.added(&[2, 3, 4]),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": null, "unk_token": unk, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false, "vocab": v.vocab(), "merges": merges}
    }))
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's `tokenizer.ggml.*` keys.
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let spec = match g.get_str("tokenizer.ggml.model").unwrap_or("") {
            "gpt2" => byte_level_bpe_spec(g)?,
            "llama" => sentencepiece_bpe_spec(g)?,
            other => bail!("GGUF tokenizer model {other:?} is not supported (supported: byte-level BPE \"gpt2\", SentencePiece BPE \"llama\"); use a Hugging Face directory with tokenizer.json instead"),
        };
        let inner = tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&spec)?)
            .map_err(|e| anyhow!("building the GGUF tokenizer: {e}"))?;
        let bos = g.get_u64("tokenizer.ggml.bos_token_id").map(|v| v as u32);
        let add_bos = g
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.as_bool())
            // SentencePiece vocabularies (Llama 2, Mistral) begin prompts with BOS unless told not to.
            .unwrap_or(g.get_str("tokenizer.ggml.model") == Some("llama"));
        Ok(Self {
            inner,
            bos,
            add_bos,
            byte_table: OnceLock::new(),
        })
    }

    /// Loads `tokenizer.json`; BOS handling from `tokenizer_config.json` when given.
    pub fn from_file(path: &Path, tokenizer_config: Option<&Value>) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("cannot load {}: {e}", path.display()))?;
        let bos_str = tokenizer_config.and_then(|c| token_string(c.get("bos_token")?));
        let bos = bos_str.as_deref().and_then(|s| inner.token_to_id(s));
        let add_bos = tokenizer_config
            .and_then(|c| c.get("add_bos_token")?.as_bool())
            .unwrap_or_else(|| {
                // Llama 3 adds BOS through its post-processor; the engine adds it explicitly instead.
                bos_str.as_deref() == Some("<|begin_of_text|>")
            });
        Ok(Self {
            inner,
            bos,
            add_bos,
            byte_table: OnceLock::new(),
        })
    }

    /// Token ids of `text`. Special tokens written in the text match whole. No BOS
    /// is added here (see [`Tokenizer::add_bos`]).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("tokenizer failed: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| anyhow!("detokenizer failed: {e}"))
    }

    /// The pipeline as Hugging Face `tokenizer.json` text (what [`Tokenizer::from_file`] reads).
    pub fn to_json(&self) -> Result<String> {
        self.inner
            .to_string(false)
            .map_err(|e| anyhow!("cannot serialise the tokenizer: {e}"))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
    pub fn token_to_id(&self, tok: &str) -> Option<u32> {
        self.inner.token_to_id(tok)
    }
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos
    }
    /// Whether prompts should begin with BOS (the model's own setting).
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Each token's bytes, when this tokenizer's decoding is exactly "concatenate the
    /// tokens' bytes, read as UTF-8" (a plain byte-level decoder, checked here for every
    /// token against `decode`); None otherwise, and streams decode windows of ids.
    /// Built once (~0.05 s for a 49k vocabulary, `detok_bench`); the engine builds it at start-up.
    pub fn byte_table(&self) -> Option<&ByteTable> {
        self.byte_table
            .get_or_init(|| {
                let byte_level = matches!(
                    self.inner.get_decoder(),
                    Some(tokenizers::DecoderWrapper::ByteLevel(_))
                );
                if !byte_level {
                    return None;
                }
                let n = self.vocab_size() as u32;
                let special: std::collections::HashSet<u32> = self
                    .inner
                    .get_added_tokens_decoder()
                    .into_iter()
                    .filter(|(_, t)| t.special)
                    .map(|(id, _)| id)
                    .collect();
                let tokens: Vec<Option<String>> = (0..n).map(|id| self.id_to_token(id)).collect();
                let table = ByteTable::new(
                    tokens
                        .iter()
                        .enumerate()
                        .map(|(id, t)| (t.as_deref(), special.contains(&(id as u32)))),
                );
                let agrees = (0..n).all(|id| {
                    let ours = String::from_utf8_lossy(table.token(id, false));
                    self.decode(&[id], false).is_ok_and(|theirs| theirs == ours)
                        && (table.token(id, true).is_empty()
                            == self.decode(&[id], true).is_ok_and(|t| t.is_empty()))
                });
                agrees.then_some(table)
            })
            .as_ref()
    }
}

/// `"<s>"` or `{"content": "<s>", ...}` in tokenizer_config.json.
pub(crate) fn token_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Streams text for a growing token sequence without ever splitting a UTF-8 character:
/// text is released only once the decoded suffix no longer ends in a replacement
/// character (the standard prefix/read-offset scheme). With a byte-level tokenizer
/// ([`Tokenizer::byte_table`]) the same text comes from each token's bytes instead of
/// two decodes of a window of ids per token.
pub struct IncrementalDecoder {
    tokenizer: Arc<Tokenizer>,
    skip_special: bool,
    stream: Stream,
}

enum Stream {
    Bytes(ByteStream),
    Window(WindowStream),
}

/// The window scheme: decode `ids[prefix_offset..read_offset]` (text already given out)
/// and `ids[prefix_offset..]`; what the second adds is new.
struct WindowStream {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl WindowStream {
    fn new(ctx: &[u32]) -> Self {
        Self {
            ids: ctx.to_vec(),
            prefix_offset: 0,
            read_offset: ctx.len(),
        }
    }

    /// The text past what was given out, if `complete` accepts it; then it counts as given.
    fn release(&mut self, tok: &Tokenizer, skip: bool, complete: fn(&str) -> bool) -> String {
        let text = |ids: &[u32]| tok.decode(ids, skip).unwrap_or_default();
        let prefix = text(&self.ids[self.prefix_offset..self.read_offset]);
        let full = text(&self.ids[self.prefix_offset..]);
        if full.len() > prefix.len() && full.is_char_boundary(prefix.len()) && complete(&full) {
            self.advance();
            full[prefix.len()..].to_string()
        } else {
            String::new()
        }
    }

    /// Everything decoded so far counts as given out.
    fn advance(&mut self) {
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
    }
}

/// A few prompt tokens give the decoder context (e.g. for leading spaces).
fn decoder_context(prompt_ids: &[u32]) -> &[u32] {
    &prompt_ids[prompt_ids.len().saturating_sub(4)..]
}

impl IncrementalDecoder {
    pub fn new(tokenizer: Arc<Tokenizer>, prompt_ids: &[u32], skip_special: bool) -> Self {
        let ctx = decoder_context(prompt_ids);
        // The byte stream gives the window scheme's text only where the context ends on a
        // whole character (always, for a prompt that was text; its first token may still
        // begin inside one); else the window scheme, as before.
        let whole = |t: &ByteTable| {
            let bytes: Vec<u8> = ctx
                .iter()
                .flat_map(|&id| t.token(id, skip_special))
                .copied()
                .collect();
            !String::from_utf8_lossy(&bytes).ends_with('\u{FFFD}')
        };
        let stream = match tokenizer.byte_table() {
            Some(t) if whole(t) => Stream::Bytes(ByteStream::default()),
            _ => Stream::Window(WindowStream::new(ctx)),
        };
        Self {
            tokenizer,
            skip_special,
            stream,
        }
    }

    /// The window scheme on the same tokenizer, whatever it supports (tests compare the
    /// two streams).
    pub fn windowed(tokenizer: Arc<Tokenizer>, prompt_ids: &[u32], skip_special: bool) -> Self {
        Self {
            tokenizer,
            skip_special,
            stream: Stream::Window(WindowStream::new(decoder_context(prompt_ids))),
        }
    }

    /// Newly completed text after appending `id` ("" while a character is incomplete).
    pub fn push(&mut self, id: u32) -> String {
        match &mut self.stream {
            // A byte stream is only made where the table exists (it is built once, never dropped).
            Stream::Bytes(s) => s.push(
                self.tokenizer
                    .byte_table()
                    .map_or(&[][..], |t| t.token(id, self.skip_special)),
            ),
            Stream::Window(w) => {
                w.ids.push(id);
                w.release(&self.tokenizer, self.skip_special, |full| {
                    !full.ends_with('\u{FFFD}')
                })
            }
        }
    }

    /// Whatever text is still held back (at the end of a request).
    pub fn flush(&mut self) -> String {
        match &mut self.stream {
            Stream::Bytes(s) => s.flush(),
            Stream::Window(w) => {
                let out = w.release(&self.tokenizer, self.skip_special, |_| true);
                if out.is_empty() {
                    w.advance(); // given out or not, the request is over
                }
                out
            }
        }
    }

    /// Whether this stream reads token bytes (true) or decodes windows of ids.
    pub fn is_byte_stream(&self) -> bool {
        matches!(self.stream, Stream::Bytes(_))
    }
}

/// Reads a JSON file with a useful error.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let s =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&s).with_context(|| format!("{} is not valid JSON", path.display()))
}

#[cfg(test)]
mod tests {
    /// Every named pre-tokenizer builds (a reversed range in a character class, say, would
    /// only fail when a user loads that family's GGUF).
    #[test]
    fn every_supported_pre_tokenizer_compiles() {
        for pre in [
            "smollm",
            "gpt2",
            "llama-bpe",
            "qwen2",
            "deepseek-llm",
            "deepseek-coder",
            "deepseek-v3",
        ] {
            let spec = super::pre_tokenizer_for(pre).unwrap();
            let built: Result<tokenizers::PreTokenizerWrapper, _> = serde_json::from_value(spec);
            assert!(built.is_ok(), "{pre}: {:?}", built.err());
        }
        assert!(super::pre_tokenizer_for("tekken").is_err());
    }
}
