//! The byte-level stream (each token's bytes) gives exactly the text the window scheme
//! (two decodes of a window of ids per token) gives, token by token, on the default
//! model's tokenizer: real outputs, text that splits characters across tokens, special
//! tokens, and random ids (most of them byte fragments).

#[allow(dead_code)] // this test uses the golden records only
mod support;

use std::sync::Arc;
use wring_model::{load_model, IncrementalDecoder, ModelSpec, Tokenizer};

fn streams_agree(tok: &Arc<Tokenizer>, prompt: &[u32], ids: &[u32], skip_special: bool) {
    let mut fast = IncrementalDecoder::new(tok.clone(), prompt, skip_special);
    let mut slow = IncrementalDecoder::windowed(tok.clone(), prompt, skip_special);
    assert!(
        fast.is_byte_stream(),
        "prompt {prompt:?} should start a byte stream"
    );
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(fast.push(id), slow.push(id), "token {i} ({id}) of {ids:?}");
    }
    assert_eq!(fast.flush(), slow.flush(), "flush after {ids:?}");
}

#[test]
fn byte_stream_matches_the_window_scheme() {
    let model = load_model(&ModelSpec::default()).expect("default model (run `wring pull`)");
    let tok = model.tokenizer.clone();
    assert!(
        tok.byte_table().is_some(),
        "the default tokenizer is byte-level"
    );
    // Real greedy outputs after their prompts.
    for rec in support::golden() {
        let prompt = support::ids(&rec["prompt_ids"]);
        let out = support::ids(&rec["greedy_ids"]);
        for skip in [true, false] {
            streams_agree(&tok, &prompt, &out, skip);
        }
    }
    // Characters of two to four bytes, which byte-level BPE splits across tokens.
    let prompt = tok
        .encode("<|im_start|>user\nSay it<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    for text in [
        "héllo wörld — naïve café, Ünïcödé ½ ¾",
        "日本語のテキストと中文文本，한국어 텍스트",
        "emoji 🎉👍🏽🇫🇷 family 👨‍👩‍👧 and a replacement char \u{FFFD} mid-text",
        "def f(x):\n    return x ** 2  # ≈ square\n<|im_end|>",
    ] {
        let ids = tok.encode(text).unwrap();
        for skip in [true, false] {
            streams_agree(&tok, &prompt, &ids, skip);
        }
    }
    // Prompts whose last tokens begin inside a character (the decoder's context window
    // starts mid-character) and end on a whole one.
    let table = tok.byte_table().unwrap();
    let mut began_inside = 0;
    for text in [
        "日本語のテキストと中文文本",
        "한국어 텍스트 🎉👍🏽",
        "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
    ] {
        let prompt = tok.encode(text).unwrap();
        let window: Vec<u8> = prompt[prompt.len().saturating_sub(4)..]
            .iter()
            .flat_map(|&id| table.token(id, true))
            .copied()
            .collect();
        began_inside += usize::from(std::str::from_utf8(&window).is_err());
        let ids = tok.encode("続きの文章、そして😀").unwrap();
        for skip in [true, false] {
            streams_agree(&tok, &prompt, &ids, skip);
        }
    }
    assert!(
        began_inside > 0,
        "no context window began inside a character"
    );
    // Random ids: byte fragments, invalid sequences and special tokens in any order.
    let vocab = tok.vocab_size() as u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200 {
        let ids: Vec<u32> = (0..24)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // One in eight from the first ids (the special tokens of this vocabulary).
                (if x.is_multiple_of(8) {
                    (x >> 8) % 20
                } else {
                    (x >> 8) % vocab
                }) as u32
            })
            .collect();
        for skip in [true, false] {
            streams_agree(&tok, &prompt, &ids, skip);
        }
    }
}

#[test]
fn a_prompt_ending_inside_a_character_keeps_the_window_scheme() {
    let model = load_model(&ModelSpec::default()).expect("default model (run `wring pull`)");
    let tok = model.tokenizer.clone();
    let ids = tok.encode("🎉").unwrap();
    assert!(ids.len() > 1, "the emoji is split across tokens: {ids:?}");
    let cut = &ids[..1];
    let d = IncrementalDecoder::new(tok.clone(), cut, true);
    assert!(!d.is_byte_stream());
    let mut fast = IncrementalDecoder::new(tok.clone(), cut, true);
    let mut slow = IncrementalDecoder::windowed(tok, cut, true);
    for &id in &ids[1..] {
        assert_eq!(fast.push(id), slow.push(id));
    }
}
