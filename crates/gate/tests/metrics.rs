//! The metrics against a hand-computed example (vocabulary of 3 tokens, three positions).

use wring_gate::metrics::{percentile, score_position, summarize, Thresholds};

const LN2: f64 = std::f64::consts::LN_2;

fn close(a: f64, b: f64, what: &str) {
    // Logits are f32, so ln 2 enters with f32 rounding (~4e-8 relative).
    assert!((a - b).abs() < 1e-6, "{what}: got {a}, expected {b}");
}

#[test]
fn hand_computed_example() {
    let ln2 = LN2 as f32;
    // A: ref logits [0, ln2, 0] → p_ref = [1/4, 1/2, 1/4]; cand [ln2, 0, 0] → p_cand = [1/2, 1/4, 1/4].
    //    Next token 1: log p_ref = ln 1/2, log p_cand = ln 1/4, Δ logprob = −ln 2.
    //    KLD = 1/4 ln(1/4 / 1/2) + 1/2 ln(1/2 / 1/4) + 1/4 ln 1 = (−1/4 + 1/2) ln 2 = ln2 / 4.
    //    Δp = 1/4 − 1/2 = −1/4. argmax ref 1, cand 0: no match, not the same top.
    let a = score_position(&[0.0, ln2, 0.0], &[ln2, 0.0, 0.0], 1).unwrap();
    close(a.logprob_ref, (0.5f64).ln(), "A logprob_ref");
    close(a.logprob_cand, (0.25f64).ln(), "A logprob_cand");
    close(a.kld, LN2 / 4.0, "A kld");
    close(a.delta_p(), -0.25, "A Δp");
    assert_eq!((a.top_ref, a.top_cand), (1, 0));
    // B: identical rows [3, 1, 0], next token 0: Δ logprob 0, KLD 0, Δp 0, argmax 0 for both (match).
    //    log p(0) = 3 − ln(e³ + e + 1) = −0.169846…
    let b = score_position(&[3.0, 1.0, 0.0], &[3.0, 1.0, 0.0], 0).unwrap();
    let lp_b = 3.0 - (3f64.exp() + 1f64.exp() + 1.0).ln();
    close(b.logprob_ref, lp_b, "B logprob_ref");
    close(b.logprob_cand, lp_b, "B logprob_cand");
    close(b.kld, 0.0, "B kld");
    // C: ref uniform [0, 0, 0] → 1/3 each; cand [ln2, 0, 0] → [1/2, 1/4, 1/4]; next token 2.
    //    Δ logprob = ln(1/4) − ln(1/3) = ln(3/4); KLD = 1/3 (ln(2/3) + 2 ln(4/3)) = ln(32/27) / 3;
    //    Δp = 1/4 − 1/3 = −1/12; argmax ref 0 (tie → lowest id), cand 0: same top, no match.
    let c = score_position(&[0.0, 0.0, 0.0], &[ln2, 0.0, 0.0], 2).unwrap();
    close(c.delta_logprob(), (0.75f64).ln(), "C Δ logprob");
    close(c.kld, (32.0f64 / 27.0).ln() / 3.0, "C kld");
    close(c.delta_p(), -1.0 / 12.0, "C Δp");
    assert_eq!((c.top_ref, c.top_cand), (0, 0));

    let m = summarize(&[a, b, c]).unwrap();
    assert_eq!(m.positions, 3);
    close(m.token_match, 1.0 / 3.0, "token match (B only)");
    close(m.same_top, 2.0 / 3.0, "same top (B, C)");
    close(m.max_abs_logprob_diff, LN2, "max |Δ logprob| (A)");
    close(
        m.mean_abs_logprob_diff,
        (LN2 + (4.0f64 / 3.0).ln()) / 3.0,
        "mean |Δ logprob|",
    );
    // mean NLL_cand − mean NLL_ref = (ln4 + ln4 − ln2 − ln3) / 3 = ln(8/3) / 3 (B cancels),
    // so ppl_rel = (8/3)^(1/3) − 1 = 0.386722…
    close(m.ppl_rel, (8.0f64 / 3.0).cbrt() - 1.0, "ppl_rel");
    close(m.ppl_cand / m.ppl_ref - 1.0, m.ppl_rel, "ppl ratio");
    // KLD sorted [0, ln(32/27)/3, ln2/4]: median is the middle one; p99 sits at rank 1.98.
    let (k1, k2) = ((32.0f64 / 27.0).ln() / 3.0, LN2 / 4.0);
    close(m.kld_mean, (k1 + k2) / 3.0, "KLD mean");
    close(m.kld_median, k1, "KLD median");
    close(m.kld_p99, k1 + 0.98 * (k2 - k1), "KLD p99");
    close(m.kld_max, k2, "KLD max");
    // Δp sorted [−1/4, −1/12, 0]; rank of quantile q is 2q.
    let d = &m.delta_p;
    close(d.min, -0.25, "Δp min");
    close(d.p1, -0.25 + 0.02 * (1.0 / 6.0), "Δp p1");
    close(d.p5, -0.25 + 0.10 * (1.0 / 6.0), "Δp p5");
    close(d.p10, -0.25 + 0.20 * (1.0 / 6.0), "Δp p10");
    close(d.median, -1.0 / 12.0, "Δp median");
    close(d.p90, -1.0 / 12.0 + 0.8 / 12.0, "Δp p90");
    close(d.p95, -1.0 / 12.0 + 0.9 / 12.0, "Δp p95");
    close(d.p99, -1.0 / 12.0 + 0.98 / 12.0, "Δp p99");
    close(d.max, 0.0, "Δp max");
    close(
        m.delta_p_rms,
        ((1.0 / 16.0 + 1.0 / 144.0) / 3.0f64).sqrt(),
        "RMS Δp",
    );

    // Study defaults: ln 2 > 0.5 and 0.387 > 0.1 → FAIL on both counts.
    let v = Thresholds::default().judge(&m);
    assert!(!v.pass && !v.logprob_ok && !v.ppl_ok);
    // Loose enough thresholds pass; the comparison is ≤ (threshold = the value itself passes).
    let loose = Thresholds {
        max_logprob_diff: m.max_abs_logprob_diff,
        max_ppl_rel: 0.4,
        ..Default::default()
    };
    assert!(loose.judge(&m).pass);
    // ppl_rel is judged by its absolute value: the candidate better by the same factor fails too.
    let swapped: Vec<_> = [a, b, c]
        .iter()
        .map(|s| {
            let mut t = *s;
            std::mem::swap(&mut t.logprob_ref, &mut t.logprob_cand);
            t
        })
        .collect();
    let ms = summarize(&swapped).unwrap();
    // ppl_rel = (3/8)^(1/3) − 1 = −0.2789…: below 0.25 signed, above it in absolute value.
    close(ms.ppl_rel, (3.0f64 / 8.0).cbrt() - 1.0, "swapped ppl_rel");
    let t = Thresholds {
        max_logprob_diff: 1.0,
        max_ppl_rel: 0.25,
        ..Default::default()
    };
    assert!(!t.judge(&ms).ppl_ok);
}

#[test]
fn percentiles_interpolate_between_ranks() {
    let v = [1.0, 2.0, 3.0, 4.0, 5.0];
    close(percentile(&v, 0.0), 1.0, "p0");
    close(percentile(&v, 0.5), 3.0, "p50");
    close(percentile(&v, 0.9), 4.6, "p90");
    close(percentile(&v, 1.0), 5.0, "p100");
    close(percentile(&[7.0], 0.99), 7.0, "single value");
}

#[test]
fn identical_rows_give_zero_and_bad_input_is_an_error() {
    let row = [0.5f32, -1.0, 2.0, 0.0];
    let s = score_position(&row, &row, 3).unwrap();
    assert_eq!((s.kld, s.delta_logprob(), s.delta_p()), (0.0, 0.0, 0.0));
    let e = score_position(&row, &row[..3], 0).unwrap_err().to_string();
    assert!(e.contains("vocabulary"), "{e}");
    assert!(
        score_position(&row, &row, 4).is_err(),
        "target outside vocab"
    );
    assert!(score_position(&row, &[f32::NAN, 0.0, 0.0, 0.0], 0).is_err());
    assert!(summarize(&[]).is_err());
}
