//! Replayed outputs (`EngineConfig::replay_outputs`, the benchmark mode behind
//! `wring serve --replay-outputs`) on the real default model: a request emits its
//! recording while every step still runs the model, drafts are accepted as far as they
//! match the recording, and replaying the model's own greedy outputs reproduces the live
//! run token for token and step for step (the CPU backend is batch-invariant).

mod common;

use common::*;
use wring_engine::{
    FinishReason, GenerateRequest, KPolicy, ProposerKind, SpecConfig, SpecOverrides, SuffixParams,
};

const MAX_TOKENS: u32 = 40;

fn spec(pad: bool) -> SpecConfig {
    SpecConfig {
        method: ProposerKind::Suffix,
        pad,
        k_policy: KPolicy::Fixed(4),
        suffix: SuffixParams::for_padding(pad),
        ..SpecConfig::default()
    }
}

fn replay_config(spec: SpecConfig) -> wring_engine::EngineConfig {
    wring_engine::EngineConfig {
        replay_outputs: true,
        ..config(8, spec)
    }
}

fn reqs(ps: &[TracePrompt], k_policy: &str, replay: Option<&[Vec<u32>]>) -> Vec<GenerateRequest> {
    ps.iter()
        .enumerate()
        .map(|(i, p)| GenerateRequest {
            spec: SpecOverrides {
                k_policy: Some(k_policy.into()),
                workload: Some(p.corpus.clone()),
            },
            replay_output: replay.map(|r| r[i].clone()),
            ..greedy(&p.prompt_ids, MAX_TOKENS)
        })
        .collect()
}

#[test]
fn replaying_the_models_own_greedy_outputs_reproduces_the_live_run() {
    let ps = short_prompts_per_corpus(1, 160);
    for (pad, policy) in [(true, "fixed:4"), (false, "fixed:6")] {
        let (engine, _) = start(replay_config(spec(pad)));
        let live = run_with_concurrency(&engine, reqs(&ps, policy, None), ps.len());
        let recorded: Vec<Vec<u32>> = live.iter().map(|o| o.ids.clone()).collect();
        engine.reset_suffix_cache();
        let replayed = run_with_concurrency(&engine, reqs(&ps, policy, Some(&recorded)), ps.len());
        let mut accepted = 0;
        for (i, (l, r)) in live.iter().zip(&replayed).enumerate() {
            let what = format!("pad {pad} {policy} request {i}");
            assert_eq!(l.error, None, "{what}");
            assert_eq!(r.error, None, "{what}");
            assert_eq!(r.ids, l.ids, "{what}: replay emitted other tokens");
            assert_eq!(r.reason, l.reason, "{what}: finish reason");
            assert_eq!(
                r.usage.spec_steps, l.usage.spec_steps,
                "{what}: verify steps"
            );
            assert_eq!(r.usage.draft_tokens, l.usage.draft_tokens, "{what}: drafts");
            assert_eq!(
                r.usage.accepted_tokens, l.usage.accepted_tokens,
                "{what}: accepted tokens"
            );
            accepted += l.usage.accepted_tokens;
        }
        assert!(
            accepted > 0,
            "pad {pad}: nothing was accepted, nothing compared"
        );
        assert_eq!(wait_idle(&engine).kv_blocks_used, 0, "blocks leaked");
        stop(engine);
    }
}

#[test]
fn a_request_emits_its_recording_and_drafts_are_accepted_against_it() {
    let ps = short_prompts_per_corpus(1, 160);
    let (engine, _) = start(replay_config(spec(true)));
    // Not what the model would say: a phrase repeated, so the request's own suffix tree
    // drafts it after its first occurrence.
    let phrase = [791u32, 4320, 28, 2470, 30, 4137, 281, 1069];
    let recording: Vec<u32> = phrase.iter().cycle().take(32).copied().collect();
    let mut req = reqs(&ps[..1], "fixed:4", Some(std::slice::from_ref(&recording)))
        .pop()
        .unwrap();
    req.ignore_eos = true;
    let out = collect(engine.submit(req.clone()).expect("accepted"));
    assert_eq!(out.error, None);
    assert_eq!(out.ids, recording, "the recording is what comes out");
    assert_eq!(
        out.reason,
        Some(FinishReason::Stop),
        "ends where the recording ends"
    );
    assert!(
        out.usage.accepted_tokens >= 16,
        "the repeats should be drafted and accepted: {:?}",
        out.usage
    );
    // max_tokens still caps it.
    req.max_tokens = 10;
    let out = collect(engine.submit(req).expect("accepted"));
    assert_eq!(out.ids, &recording[..10]);
    assert_eq!(out.reason, Some(FinishReason::Length));
    stop(engine);
}

#[test]
fn replay_is_refused_unless_the_engine_allows_it_and_bad_recordings_fail_alone() {
    let ps = short_prompts_per_corpus(1, 160);
    let (engine, info) = start(config(4, SpecConfig::default()));
    let with = |rec: Vec<u32>| GenerateRequest {
        replay_output: Some(rec),
        ..greedy(&ps[0].prompt_ids, 8)
    };
    let out = collect(engine.submit(with(vec![1, 2, 3])).expect("queued"));
    let err = out.error.expect("refused");
    assert!(err.contains("--replay-outputs"), "{err}");
    stop(engine);

    let (engine, _) = start(replay_config(SpecConfig::default()));
    let out = collect(
        engine
            .submit(with(vec![1, info.tokenizer.vocab_size() as u32 + 100_000]))
            .expect("queued"),
    );
    assert!(out.error.expect("refused").contains("vocabulary"));
    let out = collect(engine.submit(with(vec![])).expect("queued"));
    assert!(out.error.is_some(), "an empty recording is refused");
    // A plain request beside them is untouched.
    let out = collect(engine.submit(greedy(&ps[0].prompt_ids, 8)).expect("queued"));
    assert_eq!(out.error, None);
    assert_eq!(out.ids.len(), 8);
    stop(engine);
}
