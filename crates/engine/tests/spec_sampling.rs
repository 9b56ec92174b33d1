//! Speculative sampling has the distribution of plain sampling: a chi-square test
//! over many seeded draws on the default model's real first-token distributions,
//! and a deliberately broken verifier that the same test rejects.

mod common;

use common::*;
use wring_engine::sampling::{Distribution, RequestSampler};
use wring_engine::spec_decode::{verify_drafts, RejectionRule};
use wring_engine::SamplingParams;
use wring_model::runner::{SeqInput, StepInput};
use wring_model::RunnerOptions;

const DRAWS: u64 = 10_000;

fn params(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        top_k: 40,
        seed: Some(seed),
        ..Default::default()
    }
}

/// Logits after `prompt` (row 0) and after `prompt + [x1]` (row 1), from one prefill.
fn real_rows(x1_rank: usize) -> (Vec<f32>, Vec<f32>, u32) {
    let model = load_default();
    let tok = model.tokenizer.clone();
    let text = "<|im_start|>user\nWrite one word that describes the sea.<|im_end|>\n<|im_start|>assistant\n";
    let prompt = tok.encode(text).unwrap();
    let mut runner = model
        .into_runner(&RunnerOptions {
            kv_cache_bytes: 64 << 20,
            max_model_len: 256,
            ..RunnerOptions::default()
        })
        .unwrap();
    let run = |runner: &mut Box<dyn wring_model::ModelRunner>, toks: &[u32]| {
        let n = toks.len();
        let step = StepInput {
            tokens: toks.to_vec(),
            positions: (0..n as u32).collect(),
            seqs: vec![SeqInput {
                query_start: 0,
                query_len: n,
                context_len: n,
                block_table: (0..n.div_ceil(16) as u32).collect(),
                prompt_len: 0,
            }],
            logit_rows: vec![n - 1],
        };
        runner.forward(&step).unwrap().data
    };
    let row0 = run(&mut runner, &prompt);
    // Draft token for position 0: the token of the given rank under p.
    let Distribution::Probs(mut c) = Distribution::from_logits(&row0, &params(0)) else {
        panic!("sampling distribution expected")
    };
    c.sort_by(|a, b| b.1.total_cmp(&a.1));
    let x1 = c[x1_rank].0;
    let mut with_x1 = prompt.clone();
    with_x1.push(x1);
    let row1 = run(&mut runner, &with_x1);
    (row0, row1, x1)
}

/// Pearson chi-square of observed counts against probabilities; bins with an
/// expected count under 5 are merged. Returns (statistic, degrees of freedom).
fn chi_square(
    counts: &std::collections::HashMap<u32, u64>,
    dist: &Distribution,
    n: u64,
) -> (f64, usize) {
    let Distribution::Probs(c) = dist else {
        panic!("probs expected")
    };
    let (mut stat, mut bins) = (0.0, 0);
    let (mut rest_obs, mut rest_exp) = (0.0, 0.0);
    let mut seen = 0u64;
    for &(t, p) in c {
        let e = p as f64 * n as f64;
        let o = *counts.get(&t).unwrap_or(&0) as f64;
        seen += o as u64;
        if e >= 5.0 {
            stat += (o - e).powi(2) / e;
            bins += 1;
        } else {
            rest_obs += o;
            rest_exp += e;
        }
    }
    assert_eq!(
        seen, n,
        "a token outside the distribution's support was emitted"
    );
    if rest_exp > 0.0 {
        stat += (rest_obs - rest_exp).powi(2) / rest_exp.max(1e-9);
        bins += 1;
    }
    (stat, bins - 1)
}

/// Upper 0.1% point of chi-square (Wilson-Hilferty).
fn critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.090; // one-sided 0.001
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

#[test]
fn speculative_sampling_matches_plain_sampling_and_a_broken_verifier_fails() {
    let (row0, row1, x1) = real_rows(1);
    let p0 = Distribution::from_logits(&row0, &params(0));
    let p1 = Distribution::from_logits(&row1, &params(0));
    // Second draft token: the most likely continuation after x1.
    let Distribution::Probs(c1) = &p1 else {
        panic!()
    };
    let x2 = c1.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0;
    assert!(
        p0.prob(x1) > 0.02 && p0.prob(x1) < 0.9,
        "draft must be neither sure nor hopeless: {}",
        p0.prob(x1)
    );

    let draw = |rule: Option<RejectionRule>| {
        let mut first = std::collections::HashMap::new();
        let mut second = std::collections::HashMap::new();
        let mut n_second = 0;
        for seed in 0..DRAWS {
            let mut s = RequestSampler::new(params(seed), &[]);
            let toks = match rule {
                None => vec![s.sample(&row0)],
                Some(rule) => {
                    let rows = [&row0[..], &row1[..], &row1[..]];
                    verify_drafts(&mut s, |j| rows[j], &[x1, x2], 2, rule).tokens
                }
            };
            *first.entry(toks[0]).or_insert(0u64) += 1;
            if toks[0] == x1 && toks.len() > 1 {
                *second.entry(toks[1]).or_insert(0u64) += 1;
                n_second += 1;
            }
        }
        (first, second, n_second)
    };

    let (plain, _, _) = draw(None);
    let (stat, df) = chi_square(&plain, &p0, DRAWS);
    assert!(
        stat < critical(df),
        "plain sampling vs p: chi2 {stat:.1} df {df}"
    );

    let (spec, spec2, n2) = draw(Some(RejectionRule::Correct));
    let (stat, df) = chi_square(&spec, &p0, DRAWS);
    assert!(
        stat < critical(df),
        "speculative first token vs p: chi2 {stat:.1} df {df}"
    );
    let (stat2, df2) = chi_square(&spec2, &p1, n2);
    assert!(
        stat2 < critical(df2),
        "speculative second token | x1 vs p: chi2 {stat2:.1} df {df2}"
    );

    let (broken, _, _) = draw(Some(RejectionRule::BrokenKeepsDraft));
    let (stat, df) = chi_square(&broken, &p0, DRAWS);
    assert!(
        stat > critical(df),
        "the broken verifier must fail: chi2 {stat:.1} df {df}"
    );
}
