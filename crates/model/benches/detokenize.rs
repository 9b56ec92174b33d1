//! Criterion bench of streaming detokenization (`IncrementalDecoder::push`), the per-token
//! host work of every emitted token: the default model's tokenizer on the text of the
//! corpus fixtures in tests/data (code, English, non-ASCII), one token at a time.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use wring_model::tokenizer::IncrementalDecoder;
use wring_model::{load_model, ModelSpec};

fn corpus_ids(tok: &wring_model::tokenizer::Tokenizer) -> Vec<u32> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpora");
    let mut text = String::new();
    for e in std::fs::read_dir(&dir).expect("tests/data/corpora") {
        text.push_str(&std::fs::read_to_string(e.expect("entry").path()).expect("corpus file"));
    }
    // Some multi-byte characters too (tokens that end inside a character).
    text.push_str("Grüße aus Köln — 東京で会いましょう 🙂 ");
    tok.encode(&text).expect("encode")
}

fn benches(c: &mut Criterion) {
    let model = load_model(&ModelSpec::default()).expect("default model");
    let tok = model.tokenizer.clone();
    let ids = corpus_ids(&tok);
    let mut g = c.benchmark_group("detokenize");
    g.throughput(Throughput::Elements(ids.len() as u64));
    g.bench_function(format!("push ({} tokens)", ids.len()), |b| {
        b.iter(|| {
            let mut d = IncrementalDecoder::new(Arc::clone(&tok), &ids[..4], true);
            let mut n = 0;
            for &id in &ids {
                n += d.push(id).len();
            }
            n + d.flush().len()
        })
    });
    g.finish();
}

criterion_group!(detokenize, benches);
criterion_main!(detokenize);
