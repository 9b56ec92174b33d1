//! Lossless speculation on the CPU's other numerics: greedy output with suffix drafts
//! (padded K 4 and 12, cold and warm tree, concurrency 1 and 4) is token-identical to
//! greedy output without speculation on the same configuration, for `--cpu-weights q4`
//! (its kernels are batch-invariant like the f32 ones) and for q8 with prompt attention
//! in bf16 tiles (`--cpu-prefill-attention bf16`: prompt rows take the tiles however they
//! are chunked, decode and verify rows the f32 kernel, so a verify row is a decode row).

mod common;

use common::*;
use wring_engine::{GenerateRequest, KPolicy, ProposerKind, SpecConfig, SpecOverrides};
use wring_model::{CpuWeights, PrefillAttention, RunnerOptions};

const MAX_TOKENS: u32 = 16;

fn opts(cpu_weights: CpuWeights, cpu_prefill_attention: PrefillAttention) -> RunnerOptions {
    RunnerOptions {
        cpu_weights,
        cpu_prefill_attention,
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
    assert_lossless(opts(CpuWeights::Q4, PrefillAttention::F32), "q4");
}

#[test]
fn q8_with_bf16_prompt_attention_suffix_speculation_is_lossless() {
    if !wring_backend::cpu::attention_amx::available() {
        eprintln!("no AMX-BF16 here: the configuration runs f32 attention (still checked)");
    }
    assert_lossless(
        opts(CpuWeights::Q8, PrefillAttention::Bf16),
        "q8 + bf16 prompt attention",
    );
}

fn assert_lossless(opts: RunnerOptions, label: &str) {
    let ps = short_prompts_per_corpus(1, 160);
    assert!(ps.len() >= 3, "too few prompts: {}", ps.len());
    let (engine, _) = start_with(config(4, SpecConfig::default()), opts.clone());
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
    let (engine, _) = start_with(config(4, spec), opts);
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
                "{label}, {what}: request {i} differs from greedy without speculation"
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
    println!("{label} speculation: {accepted} of {drafted} draft tokens accepted");
    assert!(
        accepted > 0,
        "the warm suffix tree should get drafts accepted: {accepted}/{drafted}"
    );
    stop(engine);
}
