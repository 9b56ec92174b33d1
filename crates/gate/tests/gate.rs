//! The gate on the real default model (SmolLM2-135M-Instruct) and real corpus prompts:
//! the reference against itself passes with all-zero deltas, f32 vs 8-bit CPU weights gives a
//! stable verdict, and a candidate with a layer zeroed fails.

use std::path::PathBuf;
use wring_gate::{run_gate, GateConfig, GateReport, ModelChoice, NoiseFloorKind};
use wring_model::{CpuWeights, Device, ModelSpec};

/// The corpus fixtures (`tests/data/corpora`, written by scripts/reference/fixtures.py).
fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpora")
}

fn default_model(w: CpuWeights) -> ModelChoice {
    ModelChoice {
        spec: ModelSpec::default(),
        device: Device::Cpu,
        cpu_weights: w,
        prefill_attention: Default::default(),
        gpu_weights: None,
    }
}

/// Small but real: 2 MBPP + 2 Arena-Hard prompts (the latter cut to 96 tokens), 12 new tokens,
/// all four streams in one batch (the batch noise floor compares that batch with one stream
/// at a time).
fn small(reference: ModelChoice, candidate: ModelChoice) -> GateConfig {
    let mut cfg = GateConfig::new(reference, candidate);
    cfg.corpus = "mbpp,lmsys".into();
    cfg.corpus_dir = corpus_dir();
    cfg.num_prompts = 2;
    cfg.max_new_tokens = 12;
    cfg.max_prompt_tokens = 96;
    cfg.batch_streams = 4;
    cfg
}

fn print(r: &GateReport) {
    eprintln!("{}", r.summary());
}

#[test]
fn reference_against_itself_passes_with_zero_deltas() {
    let r = run_gate(&small(
        default_model(CpuWeights::F32),
        default_model(CpuWeights::F32),
    ))
    .unwrap();
    print(&r);
    assert_eq!(r.verdict, "PASS");
    assert_eq!(r.streams, 4);
    assert!(
        r.truncated_prompts >= 1,
        "an Arena-Hard prompt is longer than 96 tokens"
    );
    assert!(r.scored_positions >= 4 && r.scored_positions <= 4 * 12);
    let m = &r.metrics;
    assert_eq!(m.max_abs_logprob_diff, 0.0);
    assert_eq!(m.ppl_rel, 0.0);
    assert_eq!((m.kld_mean, m.kld_max), (0.0, 0.0));
    assert_eq!(
        (m.delta_p.min, m.delta_p.max, m.delta_p_rms),
        (0.0, 0.0, 0.0)
    );
    // On reference continuations the next token IS the reference's argmax.
    assert_eq!((m.token_match, m.same_top), (1.0, 1.0));
    // The CPU backend is batch-invariant: the batch noise floor is exactly zero.
    let floor = &r.noise_floor[0];
    assert_eq!(floor.kind, "batch");
    assert_eq!(floor.bitwise_identical, Some(true));
    assert_eq!(floor.metrics.max_abs_logprob_diff, 0.0);
    assert_eq!(r.per_corpus.len(), 2);
    assert_eq!(r.tokenizer_mismatch_prompts, 0);
    // The JSON carries the verdict and says which tokens were scored.
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["verdict"], "PASS");
    assert!(j["scored_tokens"]
        .as_str()
        .unwrap()
        .contains("continuation"));
}

#[test]
fn f32_vs_q8_cpu_weights_verdict_is_stable() {
    let mut cfg = small(
        default_model(CpuWeights::F32),
        default_model(CpuWeights::Q8),
    );
    cfg.noise_floor = NoiseFloorKind::Precision;
    let a = run_gate(&cfg).unwrap();
    print(&a);
    cfg.noise_floor = NoiseFloorKind::None;
    let b = run_gate(&cfg).unwrap();
    assert!(b.noise_floor.is_empty());
    // Deterministic CPU kernels: the second run reproduces the first exactly.
    assert_eq!(a.verdict, b.verdict);
    assert_eq!(a.metrics, b.metrics);
    // The precision noise floor (reference f32 vs itself with q8) is the same comparison.
    let p = a
        .noise_floor
        .iter()
        .find(|f| f.kind == "precision")
        .unwrap();
    assert_eq!(p.metrics, a.metrics);
    // 8-bit weights do change the distribution, a little.
    assert!(a.metrics.max_abs_logprob_diff > 0.0);
    assert!(a.metrics.kld_mean > 0.0 && a.metrics.kld_mean < 0.05);
    let wp = a.worst_position.as_ref().unwrap();
    assert_eq!(
        (wp.logprob_cand - wp.logprob_ref).abs(),
        a.metrics.max_abs_logprob_diff
    );
    assert_eq!(a.positions_over_logprob_threshold > 0, !a.checks.logprob_ok);
    // Recorded on this model (mbpp+lmsys, 2 prompts each, 12 new tokens): see results/2026-11-30-gate.
    eprintln!(
        "f32 vs q8: {} (max |Δ logprob| {:.4}, ppl_rel {:+.5})",
        a.verdict, a.metrics.max_abs_logprob_diff, a.metrics.ppl_rel
    );
}

#[test]
fn candidate_with_a_zeroed_layer_fails() {
    use wring_model::export::{dense_tensor, export_hf_dir, DenseDtype, ExportOptions};
    let dir = tempfile::tempdir().unwrap();
    let model = wring_model::load_model(&ModelSpec::default()).unwrap();
    // Every weight of decoder layer 0 (attention, MLP, norms) set to zero; the rest exact f32.
    export_hf_dir(
        &model,
        dir.path(),
        &ExportOptions::default(),
        |spec, mut data| {
            if spec.layer == Some(0) {
                data.iter_mut().for_each(|x| *x = 0.0);
            }
            Ok(vec![dense_tensor(spec, &data, DenseDtype::F32)])
        },
    )
    .unwrap();
    drop(model);
    let broken = ModelChoice {
        spec: ModelSpec {
            model: Some(dir.path().to_string_lossy().into_owned()),
            ..Default::default()
        },
        device: Device::Cpu,
        cpu_weights: CpuWeights::F32,
        prefill_attention: Default::default(),
        gpu_weights: None,
    };
    let r = run_gate(&small(default_model(CpuWeights::F32), broken)).unwrap();
    print(&r);
    assert_eq!(r.verdict, "FAIL");
    assert!(!r.checks.logprob_ok);
    assert!(r.metrics.max_abs_logprob_diff > 0.5);
    assert!(r.positions_over_logprob_threshold > r.scored_positions / 2);
    assert!(r.metrics.kld_mean > 0.01);
    assert_eq!(
        r.tokenizer_mismatch_prompts, 0,
        "the export keeps the tokenizer"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let mut cfg = small(
        default_model(CpuWeights::F32),
        default_model(CpuWeights::F32),
    );
    cfg.corpus = "nope".into();
    let e = format!("{:#}", run_gate(&cfg).unwrap_err());
    assert!(e.contains("unknown corpus"), "{e}");
    let mut cfg = small(
        default_model(CpuWeights::F32),
        ModelChoice {
            spec: ModelSpec {
                model: Some("/nonexistent/model.gguf".into()),
                ..Default::default()
            },
            device: Device::Cpu,
            cpu_weights: CpuWeights::F32,
            prefill_attention: Default::default(),
            gpu_weights: None,
        },
    );
    let e = format!("{:#}", run_gate(&cfg).unwrap_err());
    assert!(e.contains("does not exist"), "{e}");
    cfg.candidate = default_model(CpuWeights::F32);
    cfg.max_new_tokens = 0;
    assert!(run_gate(&cfg).is_err());
}
