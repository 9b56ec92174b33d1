//! The drafter's host cost per serving step at concurrency 32, immediate vs deferred mode.
//!
//! Replays the fixed llama.cpp greedy trace (`$WRING_SHARED/traces`, real SmolLM2 outputs)
//! as a server would: 32 requests in flight, each step drafts K tokens for every request,
//! accepts the draft's prefix that matches the recorded output plus one token, appends them,
//! and replaces finished requests. Reports, per step, the time on the engine's critical path
//! (drafts, appends, request starts/stops) and, in deferred mode, the global-tree work the
//! engine runs beside the model. `cargo run --release -p wring-suffix --example serving_steps [ROUNDS [GAP_US]]`
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wring_suffix::replay::{load_trace, TraceRequest};
use wring_suffix::{SuffixConfig, SuffixDrafter};

const CONCURRENCY: usize = 32;
const K: usize = 4;

struct Stream<'a> {
    id: u64,
    req: &'a TraceRequest,
    emitted: usize,
}

#[derive(Default)]
struct Tally {
    steps: usize,
    tokens: usize,
    critical: Duration,
    background: Duration,
    starts: Duration,
    drafts: Duration,
}

fn run(trace: &[TraceRequest], deferred: bool, gap: Duration) -> Tally {
    let cfg = SuffixConfig {
        max_tree_depth: 64,
        ..SuffixConfig::default()
    };
    let mut d = SuffixDrafter::new(cfg);
    if deferred {
        d.enable_deferred_global();
    }
    let mut next = 0usize;
    let mut live: Vec<Stream> = Vec::new();
    let mut t = Tally::default();
    loop {
        let start = Instant::now();
        while live.len() < CONCURRENCY && next < trace.len() {
            let req = &trace[next];
            d.start_request(next as u64, &req.prompt_ids).unwrap();
            live.push(Stream {
                id: next as u64,
                req,
                emitted: 0,
            });
            next += 1;
        }
        if live.is_empty() {
            break;
        }
        t.starts += start.elapsed();
        let step = Instant::now();
        let asks: Vec<(u64, usize)> = live.iter().map(|s| (s.id, K)).collect();
        let drafts = d.speculate_batch(&asks);
        let mut critical = step.elapsed();
        t.drafts += critical;
        // Deferred mode: the engine runs this beside the model's step.
        if let Some(work) = d.take_global_work() {
            let w = Instant::now();
            work.run();
            t.background += w.elapsed();
        }
        // The model's step: the drafting pool goes idle meanwhile, as in serving.
        std::thread::sleep(gap);
        let emit = Instant::now();
        live.retain_mut(|s| {
            let out = &s.req.output_ids[s.emitted..];
            let draft = drafts[asks.iter().position(|a| a.0 == s.id).unwrap()]
                .as_ref()
                .map(|dr| dr.tokens.clone())
                .unwrap_or_default();
            let accepted = draft.iter().zip(out).take_while(|(a, b)| a == b).count();
            let n = (accepted + 1).min(out.len());
            d.append(s.id, &out[..n]).unwrap();
            s.emitted += n;
            t.tokens += n;
            if s.emitted == s.req.output_ids.len() {
                d.stop_request(s.id).unwrap();
                false
            } else {
                true
            }
        });
        critical += emit.elapsed();
        t.critical += critical;
        t.steps += 1;
    }
    t
}

fn main() {
    let shared = std::env::var_os("WRING_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let trace = load_trace(&shared.join("traces/smollm2_llamacpp_greedy_96.jsonl"))
        .expect("the trace under $WRING_SHARED/traces");
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let rounds = arg(1, 5) as usize;
    // Microseconds between a step's drafts and its emit (the model's forward).
    let gap = Duration::from_micros(arg(2, 0));
    println!("rounds {rounds}, model step emulated by a {gap:?} sleep");
    println!("| mode | steps | tokens/step | critical path µs/step | of which drafts | beside the model µs/step | request starts µs/step |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for deferred in [false, true, false, true] {
        let mut best: Option<Tally> = None;
        for _ in 0..rounds {
            let t = run(&trace, deferred, gap);
            if best.as_ref().is_none_or(|b| t.critical < b.critical) {
                best = Some(t);
            }
        }
        let t = best.unwrap();
        let per = |x: Duration| x.as_secs_f64() * 1e6 / t.steps as f64;
        println!(
            "| {} | {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} |",
            if deferred { "deferred" } else { "immediate" },
            t.steps,
            t.tokens as f64 / t.steps as f64,
            per(t.critical),
            per(t.drafts),
            per(t.background),
            per(t.starts)
        );
    }
}
