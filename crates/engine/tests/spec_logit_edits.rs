//! `logit_bias` and `min_tokens` change the target distribution, so they turn off
//! the ids-only greedy path and the verifier judges drafts against the edited rows:
//! greedy output with suffix speculation (cold and warm tree, padded K) equals
//! greedy output without it, on the real default model. The edits must also
//! really change the output (otherwise this test could not fail).

mod common;

use common::*;
use wring_engine::{
    FinishReason, GenerateRequest, KPolicy, ProposerKind, SamplingParams, SpecConfig, SpecOverrides,
};
use wring_model::ChatMessage;

const MAX_TOKENS: u32 = 24;

fn chat_prompt(info: &wring_engine::EngineInfo, question: &str) -> Vec<u32> {
    let text = info
        .chat_template
        .as_ref()
        .expect("the default model has a chat template")
        .render(&[ChatMessage::new("user", question)], true)
        .unwrap();
    info.tokenizer.encode(&text).unwrap()
}

/// Requests: plain, with a bias that bans the plain answer's first token, with a
/// bias that pushes a token, and with `min_tokens` past the plain answer's EOS.
fn requests(prompt: &[u32], first_token: u32, plain_len: u32) -> Vec<(String, GenerateRequest)> {
    let with = |sampling: SamplingParams| GenerateRequest {
        spec: SpecOverrides {
            k_policy: Some("fixed:4".into()),
            workload: None,
        },
        sampling,
        ..greedy(prompt, MAX_TOKENS)
    };
    vec![
        (
            "ban first token".into(),
            with(SamplingParams {
                logit_bias: vec![(first_token, -100.0)],
                ..Default::default()
            }),
        ),
        (
            "push a token".into(),
            with(SamplingParams {
                logit_bias: vec![(first_token + 1, 20.0)],
                ..Default::default()
            }),
        ),
        (
            "min_tokens".into(),
            with(SamplingParams {
                min_tokens: plain_len + 4,
                ..Default::default()
            }),
        ),
    ]
}

#[test]
fn greedy_with_bias_and_min_tokens_is_the_same_with_and_without_speculation() {
    let (plain_engine, info) = start(config(8, SpecConfig::default()));
    let prompt = chat_prompt(&info, "What is the capital of France?");
    let plain = run_all(&plain_engine, vec![greedy(&prompt, MAX_TOKENS)]).remove(0);
    assert_eq!(
        plain.reason,
        Some(FinishReason::Stop),
        "the plain answer should end with EOS within {MAX_TOKENS} tokens: {:?}",
        plain.text
    );
    let eos = *plain.ids.last().unwrap();
    let cases = requests(&prompt, plain.ids[0], plain.ids.len() as u32);
    let want = run_all(
        &plain_engine,
        cases.iter().map(|(_, r)| r.clone()).collect(),
    );
    stop(plain_engine);

    for ((what, _), o) in cases.iter().zip(&want) {
        assert_eq!(o.error, None, "{what}");
        assert_ne!(o.ids, plain.ids, "{what}: the edit changed nothing");
    }
    assert_ne!(want[0].ids[0], plain.ids[0], "a -100 bias bans the token");
    let min = &want[2];
    let min_len = plain.ids.len() + 4;
    assert!(
        !min.ids[..min_len.min(min.ids.len())].contains(&eos) && min.ids.len() >= min_len,
        "min_tokens: EOS before {min_len} tokens: {:?}",
        min.ids
    );

    let spec = SpecConfig {
        method: ProposerKind::Suffix,
        pad: true,
        k_policy: KPolicy::Fixed(4),
        ..SpecConfig::default()
    };
    let (engine, _) = start(config(8, spec));
    // Cold tree, then warm (the same requests again: long drafts get accepted).
    for round in ["cold", "warm"] {
        let got = run_all(&engine, cases.iter().map(|(_, r)| r.clone()).collect());
        for (((what, _), g), w) in cases.iter().zip(&got).zip(&want) {
            assert_eq!(g.error, None, "{what} {round}");
            assert_eq!(
                g.ids, w.ids,
                "{what} ({round} tree) differs from plain greedy"
            );
        }
        if round == "warm" {
            let accepted: u32 = got.iter().map(|o| o.usage.accepted_tokens).sum();
            assert!(accepted > 0, "a warm tree should have drafts accepted");
        }
    }
    stop(engine);
}
