//! A model the CUDA backend cannot run yet (Qwen3-MoE's and Mixtral's mixture-of-experts
//! layers, DeepSeek-V3's latent attention and routing) is refused by `open_runner` before the
//! device is opened, with an error naming
//! its `model_type` and the missing ops: the same answer on a machine with or without a
//! GPU, at one rank or split, never a panic or wrong output. Qwen3 (dense: q/k norms) is
//! not refused. (`WRING_CUDA_MOE=on` lets the MoE models through: moe_on_cuda_when_asked.rs.)
#![cfg(feature = "cuda")]

use std::path::PathBuf;

use wring_model::{load_model, Device, LoadFormat, ModelSpec, RunnerOptions};

fn tiny(name: &str) -> ModelSpec {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/hf_tiny");
    ModelSpec {
        model: Some(dir.join(name).to_string_lossy().into_owned()),
        ..Default::default()
    }
}

fn open_error(spec: &ModelSpec, tp: usize) -> Option<String> {
    let m = load_model(spec).expect("the model loads");
    let opts = RunnerOptions {
        device: Device::Cuda(0),
        tensor_parallel_size: tp,
        kv_cache_bytes: 16 << 20,
        max_model_len: 256,
        ..Default::default()
    };
    wring_runtime::open_runner(m, &opts)
        .err()
        .map(|e| format!("{e:#}"))
}

fn refusal(spec: &ModelSpec, tp: usize) -> String {
    open_error(spec, tp).expect("the CUDA backend opened a model it cannot run")
}

#[test]
fn mixture_of_experts_models_are_refused_on_cuda_by_model_type() {
    let moe = "mixture-of-experts layers";
    let tail = "are not supported on cuda yet; run with --device cpu";
    for (name, want) in [
        ("qwen3_moe", format!("qwen3_moe: {moe} {tail}")),
        ("mixtral", format!("mixtral: {moe} {tail}")),
    ] {
        for tp in [1, 2] {
            assert_eq!(refusal(&tiny(name), tp), want, "{name}, TP {tp}");
        }
    }
    // The dummy shapes take the same path.
    let dummy = ModelSpec {
        load_format: LoadFormat::Dummy,
        model_shape: Some("qwen3-30b-a3b".into()),
        model: tiny("qwen3_moe").model,
    };
    assert_eq!(refusal(&dummy, 1), format!("qwen3_moe: {moe} {tail}"));
}

#[test]
fn deepseek_v3_is_refused_on_cuda_naming_latent_attention() {
    let want = "deepseek_v3: multi-head latent attention (MLA) layers, mixture-of-experts layers and sigmoid group-limited expert routing with shared experts are not supported on cuda yet; run with --device cpu";
    for tp in [1, 2] {
        assert_eq!(refusal(&tiny("deepseek_v3"), tp), want, "TP {tp}");
    }
    // The real shape's first layers as dummy weights: refused before any weight is made;
    // its three dense layers alone lack only the attention.
    for (shape, want) in [
        ("deepseek-v3:4", want),
        (
            "deepseek-v3:3",
            "deepseek_v3: multi-head latent attention (MLA) layers are not supported on cuda yet; run with --device cpu",
        ),
    ] {
        let dummy = ModelSpec {
            load_format: LoadFormat::Dummy,
            model_shape: Some(shape.into()),
            model: tiny("deepseek_v3").model,
        };
        assert_eq!(refusal(&dummy, 1), want, "{shape}");
    }
}

#[test]
fn qwen3_dense_is_not_refused_on_cuda() {
    // Without a GPU the open fails on the device, never on the model's ops.
    for tp in [1, 2] {
        if let Some(e) = open_error(&tiny("qwen3"), tp) {
            assert!(!e.contains("not supported on cuda"), "TP {tp}: {e}");
        }
    }
}
