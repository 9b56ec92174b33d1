//! `--warm-up` runs the shapes the runner names three times each before serving, skips
//! a shape the KV pool cannot hold, and leaves no trace: the same greedy request gives the
//! same tokens with and without it. The real CPU runner, naming shapes as CUDA would (the
//! CPU itself has none to warm: `ObservedRunner`).

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use wring_engine::{Engine, EngineConfig, KPolicy, ProposerKind, ServedModel, SpecConfig};
use wring_model::runner::WarmUpStep;

const SHAPES: [WarmUpStep; 3] = [
    WarmUpStep {
        rows: 2,
        query_len: 5,
        chunk: 40,
    },
    WarmUpStep {
        rows: 0,
        query_len: 0,
        chunk: 64,
    },
    // More tokens than the pool holds: skipped.
    WarmUpStep {
        rows: 1,
        query_len: 1,
        chunk: 1 << 20,
    },
];

/// The request's tokens, the steps run before serving, the query lengths asked for, and
/// the KV blocks in use after the request.
fn answer(warm_up: bool) -> (Vec<u32>, Vec<Vec<usize>>, Vec<usize>, usize) {
    let model = load_default();
    let opts = runner_opts(256, 2048);
    let served = ServedModel::of(&model, opts.max_model_len);
    let tokenizer = model.tokenizer.clone();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let seen = steps.clone();
    let mut runner = ObservedRunner::new(model.into_runner(&opts).unwrap(), move |step| {
        let lens: Vec<usize> = step.seqs.iter().map(|s| s.query_len).collect();
        seen.lock().unwrap().push(lens)
    });
    runner.warm_up = SHAPES.to_vec();
    let asked = runner.asked.clone();
    let spec = SpecConfig {
        method: ProposerKind::Suffix,
        k_policy: KPolicy::Fixed(4),
        ..SpecConfig::default()
    };
    let cfg = EngineConfig {
        warm_up,
        ..config(4, spec)
    };
    let (engine, _) = Engine::start_with_runner(served, Box::new(runner), cfg).unwrap();
    let before_serving = std::mem::take(&mut *steps.lock().unwrap());
    let prompt = tokenizer
        .encode("Name three colours of the rainbow.")
        .unwrap();
    let out = collect(engine.submit(greedy(&prompt, 24)).unwrap());
    let asked = asked.lock().unwrap().clone();
    let used = engine.metrics().kv_blocks_used;
    (out.ids, before_serving, asked, used)
}

#[test]
fn warm_up_runs_each_shape_three_times_skips_what_does_not_fit_and_changes_no_token() {
    let (cold, none, _, cold_used) = answer(false);
    assert!(
        none.is_empty(),
        "no steps before serving without --warm-up: {none:?}"
    );
    let (warm, ran, asked, warm_used) = answer(true);
    assert_eq!(
        asked,
        vec![1, 5],
        "rows of a fixed padded K = 4: 1 and 1 + K tokens"
    );
    let expected: Vec<Vec<usize>> = [vec![5, 5, 40], vec![64]]
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.clone(), 3))
        .collect();
    assert_eq!(ran, expected);
    assert!(!cold.is_empty());
    assert_eq!(
        warm, cold,
        "the warm-up leaves no trace in what the server answers"
    );
    assert_eq!(
        warm_used, cold_used,
        "the warm-up's blocks all went back to the pool"
    );
}
