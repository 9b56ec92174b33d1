//! The adaptive K policy picks only the K whose verify shape (1 + K query rows) the
//! runner has captured: here the real CPU runner, reporting the captured query
//! lengths {1, 2, 5, 9} a CUDA runner would (`WRING_CUDA_GRAPH_K`), so K ∈ {0, 1, 4, 8}.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use wring_engine::{Engine, KPolicy, ProposerKind, ServedModel, SpecConfig};
use wring_model::runner::StepInput;

const CAPTURED: [usize; 4] = [1, 2, 5, 9];
const LARGEST_K: usize = 8;

/// A sequence's rows that all came back as logits: a decode or verify step.
#[derive(Debug, Clone, Copy)]
struct VerifyRow {
    first_position: u32,
    query_len: usize,
}

/// The decode or verify rows of a step: sequences whose every row came back as logits.
fn verify_rows(step: &StepInput) -> impl Iterator<Item = VerifyRow> + '_ {
    step.seqs.iter().filter_map(|s| {
        let span = s.query_start..s.query_start + s.query_len;
        let with_logits = step.logit_rows.iter().filter(|r| span.contains(r)).count();
        (with_logits == s.query_len).then(|| VerifyRow {
            first_position: step.positions[s.query_start],
            query_len: s.query_len,
        })
    })
}

#[test]
fn adaptive_k_comes_from_the_runners_captured_shapes() {
    let model = load_default();
    let opts = runner_opts(256, 2048);
    let served = ServedModel::of(&model, opts.max_model_len);
    let tokenizer = model.tokenizer.clone();
    let rows = Arc::new(Mutex::new(Vec::new()));
    let seen = rows.clone();
    let mut runner = ObservedRunner::new(model.into_runner(&opts).unwrap(), move |step| {
        seen.lock().unwrap().extend(verify_rows(step))
    });
    runner.captured = Some(CAPTURED.to_vec());
    let spec = SpecConfig {
        method: ProposerKind::Suffix,
        k_policy: KPolicy::Adaptive,
        ..SpecConfig::default()
    };
    let (engine, _) = Engine::start_with_runner(served, Box::new(runner), config(4, spec)).unwrap();
    let in_captured = |q: usize| CAPTURED.contains(&q);

    // Start-up calibration timed captured shapes only.
    let calibration = std::mem::take(&mut *rows.lock().unwrap());
    assert!(!calibration.is_empty());
    assert!(
        calibration.iter().all(|r| in_captured(r.query_len)),
        "{calibration:?}"
    );

    // The same prompt three times, one request at a time: from the second on, the
    // global suffix tree knows the whole answer, so long drafts are worth verifying.
    let prompt = tokenizer
        .encode("List the numbers from one to forty in words, separated by commas.")
        .unwrap();
    let max_tokens = 96;
    let mut ks_used = Vec::new();
    for _ in 0..3 {
        let mut req = greedy(&prompt, max_tokens);
        req.ignore_eos = true;
        let out = collect(engine.submit(req).unwrap());
        assert_eq!(out.ids.len(), max_tokens as usize, "{out:?}");
        for r in std::mem::take(&mut *rows.lock().unwrap()) {
            // Near max_tokens a sequence may carry fewer slots than the step's K.
            let emitted = r.first_position as usize + 1 - prompt.len();
            let cap = max_tokens as usize - emitted - 1;
            let k = r.query_len - 1;
            assert!(
                in_captured(r.query_len) || (cap < LARGEST_K && k <= cap),
                "verify row of K = {k} is not a captured shape: {r:?}"
            );
            ks_used.push(k);
        }
    }
    assert!(
        ks_used.iter().any(|&k| k >= 4),
        "the adaptive policy never speculated: {ks_used:?}"
    );
    stop(engine);
}
