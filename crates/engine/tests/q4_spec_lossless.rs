//! Lossless speculation with `--cpu-weights q4`: greedy output with suffix drafts
//! (padded K 4 and 12, cold and warm tree, concurrency 1 and 4) is token-identical to
//! greedy output without speculation on the same q4 weights. The q4 kernels are
//! batch-invariant like the f32 ones, so this holds exactly.

mod common;

use common::*;
use wring_engine::{GenerateRequest, KPolicy, ProposerKind, SpecConfig, SpecOverrides};
use wring_model::{CpuWeights, RunnerOptions};

const MAX_TOKENS: u32 = 16;

fn q4_opts() -> RunnerOptions {
    RunnerOptions {
        cpu_weights: CpuWeights::Q4,
        ..runner_opts(256, 2048)
    }
}

fn reqs(ps: &[TracePrompt], k_policy: &str) -> Vec<GenerateRequest> {
    ps.iter()
        .map(|p| GenerateRequest {
            spec: SpecOverrides {
                k_policy: Some(k_policy.into()),
                workload: Some(p.corpus.clone()),
            },
            ..greedy(&p.prompt_ids, MAX_TOKENS)
        })
        .collect()
}

#[test]
fn q4_suffix_speculation_is_lossless() {
    let ps = short_prompts_per_corpus(1, 160);
    assert!(ps.len() >= 3, "too few prompts: {}", ps.len());
    let (engine, _) = start_with(config(4, SpecConfig::default()), q4_opts());
    let base: Vec<Vec<u32>> = run_all(&engine, reqs(&ps, "fixed:1"))
        .into_iter()
        .map(|o| {
            assert_eq!(o.error, None);
            o.ids
        })
        .collect();
    stop(engine);
    let spec = SpecConfig {
        method: ProposerKind::Suffix,
        pad: true,
        k_policy: KPolicy::Fixed(8),
        ..SpecConfig::default()
    };
    let (engine, _) = start_with(config(4, spec), q4_opts());
    let (mut drafted, mut accepted) = (0, 0);
    for (k, concurrency, what) in [
        (4, 4, "K4 cold c4"),
        (12, 1, "K12 warm c1"),
        (12, 4, "K12 warm c4"),
    ] {
        let outs = run_with_concurrency(&engine, reqs(&ps, &format!("fixed:{k}")), concurrency);
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o.error, None, "{what}: request {i}");
            assert_eq!(
                o.ids, base[i],
                "{what}: request {i} differs from q4 greedy without speculation"
            );
            drafted += o.usage.draft_tokens;
            accepted += o.usage.accepted_tokens;
        }
        assert_eq!(
            wait_idle(&engine).kv_blocks_used,
            0,
            "{what}: blocks leaked"
        );
    }
    println!("q4 speculation: {accepted} of {drafted} draft tokens accepted");
    assert!(
        accepted > 0,
        "the warm suffix tree should get drafts accepted: {accepted}/{drafted}"
    );
    stop(engine);
}
