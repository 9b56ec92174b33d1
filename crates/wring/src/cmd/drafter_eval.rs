//! `wring drafter-eval`: replay token traces through the suffix drafter offline.

use std::path::PathBuf;

use anyhow::Context;
use wring_suffix::eval::{evaluate, format_table, Order, Row};
use wring_suffix::replay::load_trace;
use wring_suffix::{DraftMode, SuffixConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Trace JSONL files (one request per line: corpus, prompt_ids, output_ids).
    /// Default: the fixed llama.cpp trace in $WRING_SHARED/traces, else tests/data/traces.
    #[arg(long = "trace")]
    traces: Vec<PathBuf>,
    /// Draft lengths K to evaluate.
    #[arg(long, value_delimiter = ',', default_value = "4,6,8,12,16")]
    k: Vec<usize>,
    /// Orders / cache states: corpus (warm), shuffled (warm), cold (fresh per corpus).
    #[arg(long, value_delimiter = ',', default_value = "corpus,shuffled,cold")]
    orders: Vec<OrderArg>,
    /// Draft shapes: path (one chain) and/or tree (best-first token tree).
    #[arg(long, value_delimiter = ',', default_value = "path")]
    modes: Vec<ModeArg>,
    /// Longest indexed suffix (64 = the reference runs' setting).
    #[arg(long, default_value_t = 64)]
    max_tree_depth: usize,
    /// Draft length cap per matched context token (100 = no cap below K; see
    /// `SuffixConfig::for_padded_k`).
    #[arg(long, default_value_t = 1.0)]
    max_spec_factor: f32,
    /// Added to the draft length cap.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    max_spec_offset: f32,
    /// Stop drafting when the running probability falls below this.
    #[arg(long, default_value_t = 0.1)]
    min_token_prob: f32,
    /// Keep at most this many responses in the global tree (default: unlimited).
    #[arg(long)]
    max_cached_requests: Option<usize>,
    /// Keep at most this many response tokens in the global tree (default: unlimited).
    #[arg(long)]
    max_cached_tokens: Option<usize>,
    /// Print only the all-corpora rows.
    #[arg(long)]
    summary: bool,
    /// Also write every row (with parameters) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OrderArg {
    Corpus,
    Shuffled,
    Cold,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    Path,
    Tree,
}

/// `$WRING_SHARED`, else `<workspace root>/../shared`.
fn shared_dir() -> PathBuf {
    match std::env::var_os("WRING_SHARED") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = SuffixConfig {
        max_tree_depth: args.max_tree_depth,
        max_spec_factor: args.max_spec_factor,
        max_spec_offset: args.max_spec_offset,
        min_token_prob: args.min_token_prob,
        max_cached_requests: args.max_cached_requests,
        max_cached_tokens: args.max_cached_tokens,
        vocab_size: None,
    };
    cfg.validate()?;
    anyhow::ensure!(!args.k.is_empty(), "--k needs at least one value");
    let traces = if args.traces.is_empty() {
        // The llama.cpp trace when ../shared is there, else the repository's own test trace.
        let shared = shared_dir().join("traces/smollm2_llamacpp_greedy_96.jsonl");
        let own = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/data/traces/smollm2_f32_greedy_24.jsonl");
        vec![if shared.is_file() { shared } else { own }]
    } else {
        args.traces.clone()
    };
    let mut trace = Vec::new();
    for path in &traces {
        trace.extend(load_trace(path).with_context(|| format!("loading {}", path.display()))?);
    }
    let mut rows: Vec<Row> = Vec::new();
    for &order in &args.orders {
        let order = match order {
            OrderArg::Corpus => Order::Corpus,
            OrderArg::Shuffled => Order::Shuffled,
            OrderArg::Cold => Order::Cold,
        };
        for &mode in &args.modes {
            let mode = match mode {
                ModeArg::Path => DraftMode::Path,
                ModeArg::Tree => DraftMode::Tree,
            };
            for &k in &args.k {
                let mut r = evaluate(&trace, &cfg, k, mode, order)?;
                if args.summary {
                    r.retain(|row| row.corpus == "all");
                }
                rows.extend(r);
            }
        }
    }
    println!(
        "trace: {} requests from {}; depth {} factor {} offset {} min_prob {}",
        trace.len(),
        traces
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        cfg.max_tree_depth,
        cfg.max_spec_factor,
        cfg.max_spec_offset,
        cfg.min_token_prob
    );
    print!("{}", format_table(&rows));
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "traces": traces,
            "config": cfg,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
