//! A model the CUDA backend cannot run yet (Qwen3's q/k norms, Qwen3-MoE's and Mixtral's
//! mixture-of-experts layers) is refused by `open_runner` before the device is opened,
//! with an error naming its `model_type` and the missing ops: the same answer on a machine
//! with or without a GPU, at one rank or split, never a panic or wrong output.
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

fn refusal(spec: &ModelSpec, tp: usize) -> String {
    let m = load_model(spec).expect("the model loads");
    let opts = RunnerOptions {
        device: Device::Cuda(0),
        tensor_parallel_size: tp,
        kv_cache_bytes: 16 << 20,
        max_model_len: 256,
        ..Default::default()
    };
    match wring_runtime::open_runner(m, &opts) {
        Ok(_) => panic!("the CUDA backend opened a model it cannot run"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn qwen3_and_mixture_of_experts_models_are_refused_on_cuda_by_model_type() {
    let norms = "q/k norms (per-head RMSNorm)";
    let moe = "mixture-of-experts layers";
    let tail = "are not supported on cuda yet; run with --device cpu";
    for (name, want) in [
        ("qwen3", format!("qwen3: {norms} {tail}")),
        ("qwen3_moe", format!("qwen3_moe: {norms} and {moe} {tail}")),
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
    assert_eq!(
        refusal(&dummy, 1),
        format!("qwen3_moe: {norms} and {moe} {tail}")
    );
}
