//! Replays the fixed test trace and compares our draft at every step with the draft
//! ArcticInference 0.3.0 made (tests/data/traces/arctic_steps_corpus_K8.jsonl). Differences
//! are allowed only where equally frequent continuations tie; each one is checked against the
//! naive reference (both drafts must be valid outcomes) and counted. Anything else fails.

mod common;

use common::{drafter_path_valid, max_tokens, test_data_dir, Naive};
use wring_suffix::replay::load_trace;
use wring_suffix::{Draft, SuffixConfig, SuffixDrafter};

#[derive(serde::Deserialize)]
struct RefRequest {
    idx: usize,
    steps: Vec<(usize, Vec<u32>, usize)>,
}

const K: usize = 8;

fn reference_config() -> SuffixConfig {
    SuffixConfig {
        max_tree_depth: 64,
        max_spec_factor: 1.0,
        max_spec_offset: 0.0,
        min_token_prob: 0.1,
        ..SuffixConfig::default()
    }
}

/// Whether some tie-breaking makes the drafter return a draft with exactly these tokens.
fn tokens_reachable(
    own: &Naive,
    global: &Naive,
    cfg: &SuffixConfig,
    ctx: &[u32],
    tokens: &[u32],
) -> bool {
    for naive in [own, global] {
        for m in common::matched_lengths(naive, ctx) {
            let c = &ctx[ctx.len().saturating_sub(naive.depth)..];
            let pat = &c[c.len() - m..];
            for mut d in naive.path_drafts(pat, max_tokens(cfg, m, K), cfg.min_token_prob) {
                d.match_len = m;
                if d.tokens == tokens && drafter_path_valid(own, global, cfg, ctx, K, &d) {
                    return true;
                }
            }
        }
    }
    tokens.is_empty() && drafter_path_valid(own, global, cfg, ctx, K, &Draft::default())
}

#[test]
fn drafts_equal_arcticinference_on_the_fixed_trace() {
    let dir = test_data_dir().join("traces");
    let trace = load_trace(&dir.join("smollm2_f32_greedy_24.jsonl")).expect("trace");
    let text =
        std::fs::read_to_string(dir.join("arctic_steps_corpus_K8.jsonl")).expect("reference");
    let reference: Vec<RefRequest> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("reference line"))
        .collect();
    assert_eq!(reference.len(), trace.len());

    let cfg = reference_config();
    let mut drafter = SuffixDrafter::try_new(cfg.clone()).unwrap();
    let mut responses: Vec<Vec<u32>> = Vec::new();
    let (mut steps, mut equal, mut ties, mut emitted) = (0usize, 0usize, 0usize, 0usize);
    let mut unexplained = Vec::new();
    for (req, want) in trace.iter().zip(&reference) {
        assert_eq!(req.idx, want.idx);
        let id = req.idx as u64;
        drafter.start_request(id, &req.prompt_ids).unwrap();
        responses.push(Vec::new());
        let out = &req.output_ids;
        let mut pos = 0;
        for (ref_pos, ref_draft, ref_accepted) in &want.steps {
            assert_eq!(pos, *ref_pos, "request {id}: step positions diverged");
            let ours = drafter.speculate(id, K).unwrap();
            steps += 1;
            if ours.tokens == *ref_draft {
                equal += 1;
                assert_eq!(ours.accepted_prefix(&out[pos..]), *ref_accepted);
            } else {
                let ctx = drafter.request_tokens(id).unwrap().to_vec();
                let own = Naive {
                    seqs: vec![&ctx],
                    depth: cfg.max_tree_depth,
                };
                let global = Naive {
                    seqs: responses.iter().map(Vec::as_slice).collect(),
                    depth: cfg.max_tree_depth,
                };
                let ours_ok = drafter_path_valid(&own, &global, &cfg, &ctx, K, &ours);
                let theirs_ok = tokens_reachable(&own, &global, &cfg, &ctx, ref_draft);
                if ours_ok && theirs_ok {
                    ties += 1;
                } else {
                    unexplained.push(format!(
                        "request {id} pos {pos}: ours {:?} (valid {ours_ok}) vs arctic {ref_draft:?} (valid {theirs_ok})",
                        ours.tokens
                    ));
                }
            }
            // Follow the reference's emission so that one tie cannot shift later steps.
            let n = (ref_accepted + 1).min(out.len() - pos);
            drafter.append(id, &out[pos..pos + n]).unwrap();
            responses
                .last_mut()
                .unwrap()
                .extend_from_slice(&out[pos..pos + n]);
            emitted += n;
            pos += n;
        }
        assert_eq!(pos, out.len());
        drafter.stop_request(id).unwrap();
    }
    drafter.check_integrity().unwrap();
    println!(
        "{steps} steps: {equal} equal, {ties} tie-break differences, {} unexplained; {:.3} tokens/step",
        unexplained.len(),
        emitted as f64 / steps as f64
    );
    assert!(
        unexplained.is_empty(),
        "unexplained differences:\n{}",
        unexplained.join("\n")
    );
    // Reproducing the reference exactly is the expected outcome of identical tie order.
    assert_eq!(
        ties, 0,
        "tie-break differences appeared; sibling order drifted from arctic"
    );
}
