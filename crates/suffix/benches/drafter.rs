//! Criterion benches of speculate and append on a realistic stream: the fixed llama.cpp
//! trace ($WRING_SHARED/traces), with the global tree warmed by the other requests.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use wring_suffix::replay::{load_trace, replay_request, TraceRequest};
use wring_suffix::{DraftMode, SuffixConfig, SuffixDrafter};

fn trace() -> Vec<TraceRequest> {
    let shared = std::env::var_os("WRING_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    load_trace(&shared.join("traces/smollm2_llamacpp_greedy_96.jsonl")).expect("trace")
}

/// A drafter that has seen every request but the last, as in the middle of a real run.
fn warmed(trace: &[TraceRequest], cfg: &SuffixConfig) -> SuffixDrafter {
    let mut d = SuffixDrafter::new(cfg.clone());
    for (i, r) in trace[..trace.len() - 1].iter().enumerate() {
        replay_request(&mut d, i as u64, r, 8, DraftMode::Path, |_| {}).unwrap();
    }
    d
}

fn benches(c: &mut Criterion) {
    let trace = trace();
    let cfg = SuffixConfig {
        max_tree_depth: 64,
        ..SuffixConfig::default()
    };
    let mut d = warmed(&trace, &cfg);
    // Several requests, each at every point of its output, so the bench covers real contexts.
    let probes: Vec<&TraceRequest> = trace.iter().step_by(12).collect();
    let mut ids = Vec::new();
    for (j, r) in probes.iter().enumerate() {
        let id = 1000 + j as u64;
        d.start_request(id, &r.prompt_ids).unwrap();
        d.append(id, &r.output_ids[..r.output_ids.len() / 2])
            .unwrap();
        ids.push(id);
    }
    let mut group = c.benchmark_group("drafter");
    for (name, mode) in [
        ("speculate_path_k8", DraftMode::Path),
        ("speculate_tree_k8", DraftMode::Tree),
    ] {
        group.bench_function(name, |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % ids.len();
                d.speculate_mode(ids[i], 8, mode).unwrap()
            })
        });
    }
    group.bench_function("speculate_batch_8_k8", |b| {
        let reqs: Vec<(u64, usize)> = ids.iter().map(|&id| (id, 8)).collect();
        b.iter(|| d.speculate_batch(&reqs))
    });
    // Appends the last request's output one token at a time, restarting it when done; the
    // stream state lives outside the closure, which criterion calls more than once.
    let stream = &trace[trace.len() - 1];
    let (mut id, mut pos) = (5000u64, 0usize);
    d.start_request(id, &stream.prompt_ids).unwrap();
    group.bench_function("append_1_token", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                if pos == stream.output_ids.len() {
                    d.abort_request(id).unwrap();
                    id += 1;
                    pos = 0;
                    d.start_request(id, &stream.prompt_ids).unwrap();
                }
                let t = Instant::now();
                d.append(id, &stream.output_ids[pos..pos + 1]).unwrap();
                spent += t.elapsed();
                pos += 1;
            }
            spent
        })
    });
    group.finish();
}

criterion_group! {
    name = drafter;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(drafter);
