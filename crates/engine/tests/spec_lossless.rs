//! Lossless speculation on the real default model: greedy output with suffix or
//! ngram drafts (K in {1,4,6,8,12}, padded and unpadded, concurrency 1, 6 and
//! 32, global suffix tree cold and warm, fixed/dynamic/adaptive K) is
//! token-identical to greedy output without speculation. The CPU backend is
//! batch-invariant, so this holds exactly.

mod common;

use std::sync::OnceLock;

use common::*;
use wring_engine::{
    EngineHandle, GenerateRequest, KPolicy, ProposerKind, SpecConfig, SpecOverrides, SuffixParams,
};

const MAX_TOKENS: u32 = 16;

/// One short real prompt from each corpus.
fn prompts() -> Vec<TracePrompt> {
    short_prompts_per_corpus(1, 160)
}

fn reqs(ps: &[TracePrompt], k_policy: &str, max_tokens: u32) -> Vec<GenerateRequest> {
    ps.iter()
        .map(|p| GenerateRequest {
            spec: SpecOverrides {
                k_policy: Some(k_policy.into()),
                workload: Some(p.corpus.clone()),
            },
            ..greedy(&p.prompt_ids, max_tokens)
        })
        .collect()
}

/// Greedy outputs without speculation (computed once).
fn baseline() -> &'static Vec<Vec<u32>> {
    static B: OnceLock<Vec<Vec<u32>>> = OnceLock::new();
    B.get_or_init(|| {
        let (engine, _) = start(config(8, SpecConfig::default()));
        let outs = run_all(&engine, reqs(&prompts(), "fixed:1", MAX_TOKENS));
        stop(engine);
        outs.into_iter().map(|o| o.ids).collect()
    })
}

/// The drafter parameters are those the CLI picks for `pad` (padded drafts fill K).
fn spec(method: ProposerKind, pad: bool, policy: KPolicy) -> SpecConfig {
    SpecConfig {
        method,
        pad,
        k_policy: policy,
        suffix: SuffixParams::for_padding(pad),
        ..SpecConfig::default()
    }
}

/// Runs `reqs` and checks every output against the baseline (request i uses
/// prompt i % n); returns the acceptance counters seen.
fn check(
    engine: &EngineHandle,
    reqs: Vec<GenerateRequest>,
    concurrency: usize,
    what: &str,
    max_tokens: u32,
) -> (u32, u32) {
    let base = baseline();
    let n = base.len();
    let outs = run_with_concurrency(engine, reqs, concurrency);
    let (mut drafted, mut accepted) = (0, 0);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.error, None, "{what}: request {i}");
        let want = &base[i % n][..base[i % n].len().min(max_tokens as usize)];
        assert_eq!(
            o.ids, want,
            "{what}: request {i} differs from greedy without speculation"
        );
        drafted += o.usage.draft_tokens;
        accepted += o.usage.accepted_tokens;
    }
    let m = wait_idle(engine);
    assert_eq!(m.kv_blocks_used, 0, "{what}: blocks leaked");
    (drafted, accepted)
}

fn repeat(ps: &[TracePrompt], times: usize) -> Vec<TracePrompt> {
    (0..times).flat_map(|_| ps.iter().cloned()).collect()
}

#[test]
fn suffix_padded_every_k_cold_and_warm_and_32_concurrent() {
    let ps = prompts();
    let (engine, _) = start(config(
        32,
        spec(ProposerKind::Suffix, true, KPolicy::Fixed(8)),
    ));
    let mut total_drafted = 0;
    for k in [1, 4, 6, 8, 12] {
        engine.reset_suffix_cache();
        let (d, _) = check(
            &engine,
            reqs(&ps, &format!("fixed:{k}"), MAX_TOKENS),
            8,
            &format!("suffix pad K{k} cold"),
            MAX_TOKENS,
        );
        total_drafted += d;
    }
    assert!(
        total_drafted > 0,
        "the suffix drafter proposed nothing at all"
    );
    // Warm tree: the same prompts again; drafts now come from the earlier outputs
    // and long accepted runs are the norm.
    let (d, a) = check(
        &engine,
        reqs(&ps, "fixed:12", MAX_TOKENS),
        8,
        "suffix pad K12 warm",
        MAX_TOKENS,
    );
    assert!(a * 2 > d, "a warm tree should mostly be accepted: {a}/{d}");
    // 36 requests, 32 at once, dynamic K.
    check(
        &engine,
        reqs(&repeat(&ps, 6), "dynamic", 8),
        36,
        "suffix pad dynamic c32",
        8,
    );
    let m = engine.metrics();
    assert!(m.spec_num_drafts > 0 && m.spec_num_accepted_tokens <= m.spec_num_draft_tokens);
    // Per-position counts add up to the accepted total and never increase.
    let per_pos = &m.spec_num_accepted_tokens_per_pos;
    assert_eq!(per_pos.iter().sum::<u64>(), m.spec_num_accepted_tokens);
    assert!(per_pos.windows(2).all(|w| w[0] >= w[1]), "{per_pos:?}");
    stop(engine);
}

#[test]
fn suffix_unpadded_and_concurrency_one() {
    let ps = prompts();
    let (engine, _) = start(config(
        32,
        spec(ProposerKind::Suffix, false, KPolicy::Fixed(8)),
    ));
    for k in [4, 12] {
        check(
            &engine,
            reqs(&ps, &format!("fixed:{k}"), MAX_TOKENS),
            8,
            &format!("suffix nopad K{k}"),
            MAX_TOKENS,
        );
    }
    check(
        &engine,
        reqs(&ps[..2], "fixed:8", MAX_TOKENS),
        1,
        "suffix nopad K8 c1",
        MAX_TOKENS,
    );
    stop(engine);
}

#[test]
fn ngram_padded_and_unpadded() {
    let ps = prompts();
    let (engine, _) = start(config(
        32,
        spec(ProposerKind::Ngram, true, KPolicy::Fixed(8)),
    ));
    for k in [1, 8] {
        check(
            &engine,
            reqs(&ps, &format!("fixed:{k}"), MAX_TOKENS),
            8,
            &format!("ngram pad K{k}"),
            MAX_TOKENS,
        );
    }
    check(
        &engine,
        reqs(&repeat(&ps, 6), "fixed:4", 8),
        36,
        "ngram pad K4 c32",
        8,
    );
    stop(engine);
    let (engine, _) = start(config(
        32,
        spec(ProposerKind::Ngram, false, KPolicy::Fixed(8)),
    ));
    for k in [6, 12] {
        check(
            &engine,
            reqs(&ps, &format!("fixed:{k}"), MAX_TOKENS),
            8,
            &format!("ngram nopad K{k}"),
            MAX_TOKENS,
        );
    }
    check(
        &engine,
        reqs(&ps[..2], "fixed:4", MAX_TOKENS),
        1,
        "ngram nopad K4 c1",
        MAX_TOKENS,
    );
    stop(engine);
}

#[test]
fn adaptive_k_is_lossless() {
    let ps = prompts();
    // Few sequences keep the start-up calibration short.
    let (engine, _) = start(config(
        4,
        spec(ProposerKind::Suffix, true, KPolicy::Adaptive),
    ));
    check(
        &engine,
        reqs(&ps, "adaptive", MAX_TOKENS),
        4,
        "suffix adaptive",
        MAX_TOKENS,
    );
    check(
        &engine,
        reqs(&ps, "adaptive", MAX_TOKENS),
        4,
        "suffix adaptive warm",
        MAX_TOKENS,
    );
    stop(engine);
}

#[test]
fn adaptive_k_reads_its_stored_step_timings_and_recalibrates_on_request() {
    let dir = std::env::temp_dir().join(format!("wring-step-timings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.wring-step-costs.json");
    let start_once = |refresh: bool| {
        let mut s = spec(ProposerKind::Suffix, false, KPolicy::Adaptive);
        s.step_timings = Some(wring_engine::TimingsCache {
            path: path.clone(),
            key: "test".into(),
            refresh,
        });
        let (engine, _) = start(config(2, s));
        // Speculation still runs on timings read back (and stays lossless).
        check(
            &engine,
            reqs(&prompts()[..2], "adaptive", MAX_TOKENS),
            2,
            "suffix adaptive, stored timings",
            MAX_TOKENS,
        );
        stop(engine);
        std::fs::read_to_string(&path).expect("the first start keeps its timings")
    };
    let first = start_once(false);
    assert_eq!(
        start_once(false),
        first,
        "a second start reads the timings instead of measuring (and storing) new ones"
    );
    assert_ne!(
        start_once(true),
        first,
        "--recalibrate measures again and keeps the new timings"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
