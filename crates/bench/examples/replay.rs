//! Minimal driver of the replay client without the `wring` binary (handy while other crates are
//! being rebuilt): `cargo run -p wring-bench --example replay -- URL CORPUS CONCURRENCY PROMPTS MAX_TOKENS [OUT.json]`.

use std::time::Duration;

use wring_bench::bench::{run_bench, summary_table, BenchConfig};
use wring_bench::corpus::{parse_corpus_list, CorpusSource};
use wring_bench::replay::RequestConfig;
use wring_bench::tune::discover_model;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        anyhow::bail!("usage: replay URL CORPUS CONCURRENCY PROMPTS MAX_TOKENS [OUT.json]");
    }
    let base_url = args[0].clone();
    let model = discover_model(&base_url).unwrap_or_else(|| "default".into());
    let shared = std::env::var("WRING_SHARED").unwrap_or_else(|_| "../shared".into());
    let config = BenchConfig {
        request: RequestConfig {
            base_url,
            model,
            api_key: None,
            max_tokens: args[4].parse()?,
            temperature: 0.0,
            ignore_eos: false,
            continuous_usage: false,
            request_timeout: Duration::from_secs(600),
            k_policy: None,
        },
        corpora: parse_corpus_list(&args[1])?,
        source: CorpusSource::new(format!("{shared}/corpora")),
        concurrency: args[2].parse()?,
        num_prompts: args[3].parse()?,
        runs: 1,
        warmup: 1,
        warm_cache: false,
        max_spread: 0.05,
        max_reruns: 0,
        seed: 0,
        max_prompt_chars: 2000,
        label: "replay-example".into(),
        k: None,
        device: "cpu".into(),
        server_args: Vec::new(),
        show_progress: false,
        replay: None,
    };
    let file = run_bench(&config)?;
    println!("{}", summary_table(&file));
    if let Some(out) = args.get(5) {
        file.write(std::path::Path::new(out))?;
    }
    Ok(())
}
