//! Engine behaviour on the real default model: stop rules, limits, seeds,
//! logprobs, abort, validation, preemption, prefix caching, overload.

mod common;

use std::time::Duration;

use common::*;
use wring_engine::{
    EngineConfig, EngineEvent, FinishReason, GenerateRequest, ProposerKind, SamplingParams,
    SpecConfig, SubmitError,
};

fn france(engine_info: &wring_engine::EngineInfo) -> Vec<u32> {
    engine_info
        .tokenizer
        .encode(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        )
        .unwrap()
}

#[test]
fn stop_strings_eos_max_tokens_logprobs_and_seeds() {
    let (engine, info) = start(config(8, SpecConfig::default()));
    let p = france(&info);

    // EOS (<|im_end|>) ends the request; it is the last id, its text is not shown.
    let o = collect(engine.submit(greedy(&p, 40)).unwrap());
    assert_eq!(o.reason, Some(FinishReason::Stop));
    assert_eq!(o.text, "The capital of France is Paris.");
    assert!(info.eos_token_ids.contains(o.ids.last().unwrap()));

    // A stop string cuts the text exactly where it starts.
    let mut r = greedy(&p, 40);
    r.stop_strings = vec![" Par".into()];
    let s = collect(engine.submit(r).unwrap());
    assert_eq!(s.reason, Some(FinishReason::Stop));
    assert_eq!(s.text, "The capital of France is");
    assert!(s.ids.len() < o.ids.len());

    // max_tokens.
    let m = collect(engine.submit(greedy(&p, 3)).unwrap());
    assert_eq!((m.reason, m.ids.len()), (Some(FinishReason::Length), 3));
    assert_eq!(m.ids, o.ids[..3]);

    // ignore_eos keeps going to max_tokens.
    let mut r = greedy(&p, 12);
    r.ignore_eos = true;
    let g = collect(engine.submit(r).unwrap());
    assert_eq!((g.reason, g.ids.len()), (Some(FinishReason::Length), 12));

    // Logprobs: the greedy token is the top alternative.
    let mut r = greedy(&p, 4);
    r.sampling.logprobs = Some(3);
    let mut h = engine.submit(r).unwrap();
    let mut n = 0;
    while let Some(ev) = h.events.blocking_recv() {
        match ev {
            EngineEvent::Tokens { ids, logprobs, .. } => {
                let lps = logprobs.expect("logprobs requested");
                assert_eq!(lps.len(), ids.len());
                for (lp, id) in lps.iter().zip(&ids) {
                    assert_eq!(lp.token_id, *id);
                    assert_eq!(lp.top.len(), 3);
                    assert_eq!(lp.top[0].0, *id);
                    assert!(lp.logprob <= 0.0 && (lp.logprob - lp.top[0].1).abs() < 1e-6);
                }
                n += ids.len();
            }
            _ => break,
        }
    }
    assert_eq!(n, 4);

    // Seeds: same seed, same output; sampling with penalties stays valid.
    let sampled = |seed: u64| {
        let mut r = greedy(&p, 16);
        r.ignore_eos = true;
        r.sampling = SamplingParams {
            temperature: 1.0,
            top_p: 0.9,
            top_k: 50,
            min_p: 0.01,
            seed: Some(seed),
            presence_penalty: 0.5,
            frequency_penalty: 0.5,
            repetition_penalty: 1.1,
            ..Default::default()
        };
        collect(engine.submit(r).unwrap()).ids
    };
    let a = sampled(42);
    assert_eq!(a, sampled(42));
    assert_ne!(a, sampled(43));
    stop(engine);
}

#[test]
fn abort_by_drop_and_by_id_frees_everything_at_once() {
    let (engine, info) = start(config(
        8,
        SpecConfig {
            method: ProposerKind::Suffix,
            ..SpecConfig::default()
        },
    ));
    let p = france(&info);
    let mut long = greedy(&p, 500);
    long.ignore_eos = true;
    let mut h = engine.submit(long.clone()).unwrap();
    assert!(matches!(
        h.events.blocking_recv(),
        Some(EngineEvent::Tokens { .. })
    ));
    drop(h);
    let m = wait_idle(&engine);
    assert_eq!((m.kv_blocks_used, m.finished_abort), (0, 1));

    let mut h = engine.submit(long).unwrap();
    assert!(matches!(
        h.events.blocking_recv(),
        Some(EngineEvent::Tokens { .. })
    ));
    engine.abort(h.id);
    let o = collect(h);
    assert_eq!(o.reason, Some(FinishReason::Abort));
    let m = wait_idle(&engine);
    assert_eq!((m.kv_blocks_used, m.finished_abort), (0, 2));
    stop(engine);
}

#[test]
fn bad_requests_get_precise_errors_and_overload_is_refused() {
    let mut cfg = config(1, SpecConfig::default());
    cfg.max_waiting = 1;
    let (engine, info) = start(cfg);
    let p = france(&info);
    let err = |r: GenerateRequest| engine.submit(r).err().expect("must be refused");
    assert!(matches!(err(greedy(&[], 5)), SubmitError::EmptyPrompt));
    assert!(matches!(err(greedy(&p, 5000)), SubmitError::TooLong { .. }));
    assert!(err(greedy(&[1, 999_999], 5)).to_string().contains("999999"));
    let mut r = greedy(&p, 5);
    r.sampling.temperature = -0.5;
    assert!(err(r).to_string().contains("temperature"));
    let mut r = greedy(&p, 5);
    r.sampling.top_k = 0;
    r.sampling.min_p = 1.5;
    assert!(err(r).to_string().contains("min_p"));

    // One running (max_num_seqs 1) and one waiting fill the engine.
    let mut long = greedy(&p, 300);
    long.ignore_eos = true;
    let a = engine.submit(long.clone()).unwrap();
    let b = engine.submit(long.clone());
    let c = engine.submit(long.clone());
    let refused = [b.as_ref().err(), c.as_ref().err()]
        .into_iter()
        .flatten()
        .filter(|e| matches!(e, SubmitError::QueueFull(1)))
        .count();
    assert!(refused >= 1, "a full queue must refuse");
    drop((a, b, c));
    wait_idle(&engine);
    engine.shutdown(Duration::from_secs(1));
    assert!(matches!(
        engine.submit(greedy(&p, 5)),
        Err(SubmitError::ShuttingDown)
    ));
}

#[test]
fn preemption_and_prefix_caching_keep_outputs_identical() {
    let ps: Vec<Vec<u32>> = short_prompts_per_corpus(2, 120)
        .into_iter()
        .map(|p| p.prompt_ids)
        .collect();
    let reqs = || -> Vec<GenerateRequest> {
        ps.iter()
            .map(|p| {
                let mut r = greedy(p, 32);
                r.ignore_eos = true;
                r
            })
            .collect()
    };
    let (engine, _) = start(config(16, SpecConfig::default()));
    let want: Vec<Vec<u32>> = run_all(&engine, reqs())
        .into_iter()
        .map(|o| o.ids)
        .collect();
    // Same prompts again: prompt blocks come from the prefix cache.
    let again = run_all(&engine, reqs());
    assert!(again.iter().all(|o| o.usage.cached_tokens > 0));
    assert_eq!(
        again.iter().map(|o| o.ids.clone()).collect::<Vec<_>>(),
        want
    );
    let m = wait_idle(&engine);
    assert!(
        m.prefix_cache_hit_tokens > 0 && m.prefix_cache_hit_tokens <= m.prefix_cache_queried_tokens
    );
    stop(engine);

    // A pool of 24 blocks (384 tokens) cannot hold 12 sequences of ~150 tokens:
    // sequences get preempted and recomputed, and outputs do not change.
    let blocks = 24;
    let model = load_default();
    let block_bytes = model.kv_block_bytes(wring_model::Device::Cpu, 16);
    let mut opts = runner_opts(0, 256);
    opts.kv_cache_bytes = blocks * block_bytes;
    let mut cfg = config(16, SpecConfig::default());
    cfg.max_model_len = 256;
    let (engine, _) = wring_engine::Engine::start(model, opts, cfg).unwrap();
    let outs = run_all(&engine, reqs());
    assert_eq!(outs.iter().map(|o| o.ids.clone()).collect::<Vec<_>>(), want);
    let m = wait_idle(&engine);
    assert!(
        m.preemptions > 0,
        "the small pool should have forced preemption"
    );
    assert_eq!(m.kv_blocks_used, 0);
    stop(engine);
}

/// `trace_out` writes every completed request, with its exact ids and workload tag, in the
/// format the offline drafter evaluator replays.
#[test]
fn trace_out_records_completed_requests_for_drafter_eval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let (engine, info) = start(EngineConfig {
        trace_out: Some(path.clone()),
        ..config(4, SpecConfig::default())
    });
    let prompt = france(&info);
    let reqs: Vec<GenerateRequest> = [("humaneval", 12), ("mbpp", 5)]
        .iter()
        .map(|&(tag, n)| {
            let mut r = greedy(&prompt, n);
            r.request_id = format!("req-{tag}");
            r.spec.workload = Some(tag.to_string());
            r
        })
        .collect();
    let outs = run_all(&engine, reqs);
    wait_idle(&engine);
    let text = std::fs::read_to_string(&path).unwrap();
    let trace = wring_suffix::replay::parse_trace(&text).expect("a valid drafter-eval trace");
    assert_eq!(trace.len(), 2);
    // Lines come in finishing order; match them to requests by tag.
    for (tag, o) in ["humaneval", "mbpp"].iter().zip(&outs) {
        let t = trace
            .iter()
            .find(|t| t.corpus == *tag)
            .expect("every tag traced");
        assert_eq!(t.prompt_ids, prompt);
        assert_eq!(t.output_ids, o.ids);
    }
    assert!(text.contains("\"source_id\":\"req-mbpp\""));
    assert!(text.contains("\"finish_reason\":\"length\""));
}
