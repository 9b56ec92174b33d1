//! GGUF vocabularies tokenise as llama.cpp does. tests/data/gguf_vocab holds llama.cpp's
//! own tokenizer test sets for the Llama 2 SentencePiece vocabulary (`ggml-vocab-llama-spm`)
//! and DeepSeek Coder's byte-level BPE (`ggml-vocab-deepseek-coder`), each with its `.inp` texts and the ids llama.cpp gives them in `.out`, from the llama.cpp
//! sources in the llama-cpp-python sdist): spaces, tabs, newlines, digits, accents, emoji,
//! CJK, byte fallback. Every text must give llama.cpp's ids and decode back to itself.

#[allow(dead_code)]
mod support;

use std::io::Read;
use support::test_data_dir;
use wring_model::gguf::GgufFile;
use wring_model::tokenizer::Tokenizer;

/// The vocabulary `name`, unpacked into a temporary directory, and its test cases.
fn vocab_case(name: &str) -> (tempfile::TempDir, Tokenizer, Vec<(String, Vec<u32>)>) {
    let dir = test_data_dir().join("gguf_vocab");
    let mut gguf = vec![];
    flate2::read::GzDecoder::new(std::fs::File::open(dir.join(format!("{name}.gguf.gz"))).unwrap())
        .read_to_end(&mut gguf)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(format!("{name}.gguf"));
    std::fs::write(&path, gguf).unwrap();
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let inp = std::fs::read_to_string(dir.join(format!("{name}.inp"))).unwrap();
    let out = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap();
    let texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    let (last, texts) = texts.split_last().unwrap();
    assert!(last.is_empty(), "the .inp file ends with its separator");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "one line of ids per text");
    let cases = texts.iter().map(|t| t.to_string()).zip(ids).collect();
    (tmp, tok, cases)
}

/// Every text decodes back to itself.
fn assert_round_trips(tok: &Tokenizer, cases: &[(String, Vec<u32>)]) {
    for (text, _) in cases {
        let got = tok.encode(text).unwrap();
        assert_eq!(
            &tok.decode(&got, false).unwrap(),
            text,
            "round trip of {text:?}"
        );
    }
}

/// Every text gives llama.cpp's ids (else the texts that differ, in the panic).
fn assert_same_ids(tok: &Tokenizer, cases: &[(String, Vec<u32>)]) {
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(text, want)| {
            let got = tok.encode(text).unwrap();
            (&got != want).then(|| format!("{text:?}: got {got:?}, llama.cpp {want:?}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} texts differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_llama_sentencepiece_vocabulary_tokenises_as_llama_cpp_does() {
    let (_tmp, tok, cases) = vocab_case("llama-spm");
    assert_eq!(tok.vocab_size(), 32000);
    assert_eq!(tok.bos_token_id(), Some(1));
    assert!(tok.add_bos(), "SentencePiece prompts begin with BOS");
    assert_round_trips(&tok, &cases);
    assert_same_ids(&tok, &cases);
    // Control tokens written in a prompt match whole; byte fallback spells what the vocabulary lacks.
    assert_eq!(tok.encode("</s>").unwrap(), vec![2]);
    assert_eq!(tok.decode(&[1, 15043, 2], true).unwrap(), "Hello");
}

/// DeepSeek Coder's byte-level BPE: five splits applied one after another (newlines, letters,
/// punctuation, CJK, single digits) before the byte mapping, as its `tokenizer.ggml.pre` says.
#[test]
fn the_deepseek_coder_vocabulary_tokenises_as_llama_cpp_does() {
    let (_tmp, tok, cases) = vocab_case("deepseek-coder");
    assert_round_trips(&tok, &cases);
    assert_same_ids(&tok, &cases);
}

/// The other byte-level BPE vocabularies wring reads, against the same test set: the
/// repository keeps only llama-spm's and deepseek-coder's (the others are 0.6-2.5 MB each), so
/// this runs by hand after `scripts/reference/gguf_vocab.sh gpt-2 llama-bpe qwen2 starcoder
/// refact deepseek-llm`:
/// `cargo test -p wring-model --test gguf_vocab -- --ignored`.
#[test]
#[ignore = "needs vocabularies fetched by scripts/reference/gguf_vocab.sh"]
fn fetched_vocabularies_tokenise_as_llama_cpp_does() {
    let dir = test_data_dir().join("gguf_vocab");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.strip_suffix(".gguf.gz").map(str::to_string)
        })
        .filter(|n| n != "llama-spm" && n != "deepseek-coder")
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "no vocabulary fetched into {}",
        dir.display()
    );
    for name in names {
        let (_tmp, tok, cases) = vocab_case(&name);
        println!("{name}: {} texts", cases.len());
        assert_same_ids(&tok, &cases);
    }
}
