//! CI check: quantize the default model with every scheme on the CPU, gate each
//! against the original, and check that the verdicts are stable (a second run reproduces the
//! metrics exactly) and ordered as the schemes' precision says they must be.

use std::path::PathBuf;
use wring_backend::quant::Scheme;
use wring_gate::{run_gate, GateConfig, GateReport, ModelChoice, NoiseFloorKind};
use wring_model::{CpuWeights, Device, ModelSpec};
use wring_quant::{quantize_model, CalibOptions, QuantizeOptions};

/// The corpus fixtures (`tests/data/corpora`, written by scripts/reference/fixtures.py).
fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpora")
}

fn choice(model: Option<String>) -> ModelChoice {
    ModelChoice {
        spec: ModelSpec {
            model,
            ..Default::default()
        },
        device: Device::Cpu,
        cpu_weights: CpuWeights::F32,
        prefill_attention: Default::default(),
        gpu_weights: None,
    }
}

/// Round-to-nearest for every scheme (int4 without AWQ/GPTQ: calibration is covered by
/// crates/quant/tests and is too slow for this check).
fn rtn(scheme: Scheme) -> QuantizeOptions {
    QuantizeOptions {
        scheme,
        group_size: None,
        awq: false,
        gptq: false,
        damp: 0.01,
        calib: CalibOptions {
            corpus: "wildchat".into(),
            corpus_dir: corpus_dir(),
            prompts: 1,
            max_tokens: 16,
            layers: None,
            progress: false,
        },
        progress: false,
    }
}

fn gate(candidate: &str, floor: NoiseFloorKind) -> GateReport {
    let mut cfg = GateConfig::new(choice(None), choice(Some(candidate.into())));
    cfg.corpus = "mbpp,lmsys".into();
    cfg.corpus_dir = corpus_dir();
    cfg.num_prompts = 2;
    cfg.max_new_tokens = 12;
    cfg.max_prompt_tokens = 96;
    cfg.batch_streams = 4;
    cfg.noise_floor = floor;
    run_gate(&cfg).unwrap()
}

#[test]
fn every_quantized_scheme_gets_a_stable_verdict() {
    let src = wring_model::load_model(&ModelSpec::default()).unwrap();
    let mut kld = Vec::new();
    for scheme in Scheme::ALL {
        let dir = tempfile::tempdir().unwrap();
        quantize_model(&src, dir.path(), &rtn(scheme)).unwrap();
        let path = dir.path().to_string_lossy().into_owned();
        let a = gate(&path, NoiseFloorKind::Batch);
        let b = gate(&path, NoiseFloorKind::None);
        eprintln!("{scheme}: {}", a.summary());
        // Deterministic CPU kernels: the same candidate gets the same verdict and metrics.
        assert_eq!(a.verdict, b.verdict, "{scheme}");
        assert_eq!(a.metrics, b.metrics, "{scheme}");
        // The noise floor of the reference is exactly zero (batch-invariant backend), so
        // every delta measured is the scheme's own.
        assert_eq!(a.noise_floor[0].metrics.max_abs_logprob_diff, 0.0);
        assert!(
            a.metrics.kld_mean > 0.0,
            "{scheme} changes the distribution"
        );
        kld.push((scheme, a.metrics.kld_mean, a.verdict.clone()));
    }
    eprintln!("{kld:?}");
    let get = |s: Scheme| kld.iter().find(|k| k.0 == s).unwrap().clone();
    // 8-bit integer weights per channel are the most faithful; 4-bit values with E4M3
    // block scales (nvfp4) the least.
    assert!(get(Scheme::Int8).1 < get(Scheme::Int4).1);
    assert!(get(Scheme::Int8).1 < get(Scheme::Nvfp4).1);
    assert!(get(Scheme::Fp8).1 < get(Scheme::Nvfp4).1);
    assert_eq!(get(Scheme::Int8).2, "PASS");
    assert_eq!(get(Scheme::Nvfp4).2, "FAIL");
}
