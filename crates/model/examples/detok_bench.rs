//! Host cost of incremental detokenisation per token (the engine's emit path), on the
//! default model's tokenizer: `cargo run --release -p wring-model --example detok_bench`
use std::time::Instant;
use wring_model::{load_model, IncrementalDecoder, ModelSpec};

fn main() -> anyhow::Result<()> {
    let m = load_model(&ModelSpec::default())?;
    // Code and prose, as the corpora mix them.
    let text = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\nThe history of the printing press begins in the fifteenth century, when movable metal type made it possible. ".repeat(40);
    let t0 = Instant::now();
    let byte_level = m.tokenizer.byte_table().is_some();
    println!(
        "byte table (built and checked against decode, every token): {byte_level}, {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    let ids = m.tokenizer.encode(&text)?;
    let mut d = IncrementalDecoder::new(m.tokenizer.clone(), &ids[..8], true);
    let t0 = Instant::now();
    let mut bytes = 0usize;
    for &id in &ids[8..] {
        bytes += d.push(id).len();
    }
    let n = ids.len() - 8;
    println!(
        "{n} tokens, {:.2} µs per push ({bytes} bytes of text)",
        1e6 * t0.elapsed().as_secs_f64() / n as f64
    );
    Ok(())
}
