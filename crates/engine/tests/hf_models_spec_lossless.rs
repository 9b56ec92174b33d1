//! Greedy speculative = greedy plain on Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3: the tiny
//! transformers-made models of tests/data/hf_tiny served by the engine on the CPU give, with
//! suffix drafts (padded K 4 and 12, cold and warm tree, concurrency 1 and 3, and the
//! adaptive unpadded policy), exactly the tokens they give without speculation — which are
//! transformers' own 32 greedy tokens (hf_tiny/<model>.reference.json). On a mixture-of-
//! experts model a verify row routes its token to the experts a decode row would, whatever
//! the other rows of the step pick; under latent attention its K/V, materialised per head in
//! the paged cache, is what a decode row would have stored.

mod common;

use common::*;
use serde_json::Value;
use wring_engine::{
    GenerateRequest, KPolicy, ProposerKind, SpecConfig, SpecOverrides, SuffixParams,
};
use wring_model::{LoadedModel, ModelSpec};

const MAX_TOKENS: u32 = 32;

fn load(name: &str) -> (LoadedModel, Value) {
    let dir = test_data_dir().join("hf_tiny").join(name);
    let m = wring_model::load_model(&ModelSpec {
        model: Some(dir.to_string_lossy().into_owned()),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{name} loads: {e:#}"));
    let path = test_data_dir().join(format!("hf_tiny/{name}.reference.json"));
    let rf = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    (m, rf)
}

/// The engine's configuration for the tiny models (their context is 512 tokens).
fn cfg(spec: SpecConfig) -> wring_engine::EngineConfig {
    wring_engine::EngineConfig {
        max_model_len: 512,
        ..config(4, spec)
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The reference prompts, each with its greedy continuation; the model's EOS does not end
/// them (transformers' reference ran 32 steps).
fn reqs(prompts: &[Vec<u32>], k_policy: &str) -> Vec<GenerateRequest> {
    prompts
        .iter()
        .map(|p| GenerateRequest {
            ignore_eos: true,
            spec: SpecOverrides {
                k_policy: Some(k_policy.into()),
                workload: None,
            },
            ..greedy(p, MAX_TOKENS)
        })
        .collect()
}

fn check(name: &str) {
    let (model, rf) = load(name);
    let cases = rf["prompts"].as_array().unwrap();
    let prompts: Vec<Vec<u32>> = cases.iter().map(|p| ids(&p["ids"])).collect();
    let want: Vec<Vec<u32>> = cases.iter().map(|p| ids(&p["greedy_ids"])).collect();
    let opts = runner_opts(32, 512);

    let (engine, _) = wring_engine::Engine::start(model, opts.clone(), cfg(SpecConfig::default()))
        .expect("engine starts");
    let plain: Vec<Vec<u32>> = run_all(&engine, reqs(&prompts, "fixed:1"))
        .into_iter()
        .map(|o| {
            assert_eq!(o.error, None, "{name}");
            o.ids
        })
        .collect();
    stop(engine);
    assert_eq!(
        plain, want,
        "{name}: the engine's greedy tokens are transformers'"
    );

    for (pad, policy, runs) in [
        (
            true,
            KPolicy::Fixed(8),
            &[
                ("fixed:4", 3, "K4 cold c3"),
                ("fixed:12", 1, "K12 warm c1"),
                ("fixed:12", 3, "K12 warm c3"),
            ][..],
        ),
        (
            false,
            KPolicy::Adaptive,
            &[
                ("adaptive", 3, "adaptive unpadded cold c3"),
                ("adaptive", 3, "adaptive unpadded warm c3"),
            ][..],
        ),
    ] {
        let spec = SpecConfig {
            method: ProposerKind::Suffix,
            pad,
            k_policy: policy,
            suffix: SuffixParams::for_padding(pad),
            ..SpecConfig::default()
        };
        let (model, _) = load(name);
        let (engine, _) =
            wring_engine::Engine::start(model, opts.clone(), cfg(spec)).expect("engine starts");
        let (mut drafted, mut accepted) = (0, 0);
        for &(k_policy, concurrency, what) in runs {
            let outs = run_with_concurrency(&engine, reqs(&prompts, k_policy), concurrency);
            for (i, o) in outs.iter().enumerate() {
                assert_eq!(o.error, None, "{name}, {what}: request {i}");
                assert_eq!(
                    o.ids, plain[i],
                    "{name}, {what}: request {i} differs from greedy without speculation"
                );
                drafted += o.usage.draft_tokens;
                accepted += o.usage.accepted_tokens;
            }
            assert_eq!(
                wait_idle(&engine).kv_blocks_used,
                0,
                "{name}, {what}: blocks leaked"
            );
        }
        println!("{name} (pad {pad}): {accepted} of {drafted} draft tokens accepted");
        // Fixed K drafts whenever the tree matches; the adaptive policy's K follows the
        // step timings it measured at start-up (it may find drafting not worth it on a
        // loaded machine), so only its output is checked.
        if pad {
            assert!(accepted > 0, "{name}: no draft token was ever accepted");
        }
        stop(engine);
    }
}

#[test]
fn qwen3_speculation_is_lossless() {
    check("qwen3");
}

#[test]
fn qwen3_moe_speculation_is_lossless() {
    check("qwen3_moe");
}

#[test]
fn mixtral_speculation_is_lossless() {
    check("mixtral");
}

#[test]
fn deepseek_v3_speculation_is_lossless() {
    check("deepseek_v3");
}
