//! `WRING_CUDA_MOE=on` lets Qwen3-MoE and Mixtral past the CUDA backend's op check (its
//! mixture-of-experts op runs them): `open_runner` then fails only where the device does (no
//! GPU here) or succeeds (a GPU), never with the refusal by `model_type`. A file of its own:
//! the variable is the process's, and `unsupported_on_cuda` checks the default beside it.
#![cfg(feature = "cuda")]

use std::path::PathBuf;

use wring_model::{load_model, Device, ModelSpec, RunnerOptions};

#[test]
fn moe_models_pass_the_op_check_when_the_switch_is_on() {
    std::env::set_var("WRING_CUDA_MOE", "on");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/hf_tiny");
    for name in ["qwen3_moe", "mixtral"] {
        let spec = ModelSpec {
            model: Some(dir.join(name).to_string_lossy().into_owned()),
            ..Default::default()
        };
        let opts = RunnerOptions {
            device: Device::Cuda(0),
            kv_cache_bytes: 16 << 20,
            max_model_len: 256,
            ..Default::default()
        };
        let m = load_model(&spec).expect("the model loads");
        if let Err(e) = wring_runtime::open_runner(m, &opts) {
            let e = format!("{e:#}");
            assert!(!e.contains("not supported on cuda"), "{name}: {e}");
        }
    }
    // DeepSeek-V3 stays refused: the switch runs softmax routing only, and nothing runs
    // its latent attention on CUDA.
    let spec = ModelSpec {
        model: Some(dir.join("deepseek_v3").to_string_lossy().into_owned()),
        ..Default::default()
    };
    let opts = RunnerOptions {
        device: Device::Cuda(0),
        kv_cache_bytes: 16 << 20,
        max_model_len: 256,
        ..Default::default()
    };
    let e = wring_runtime::open_runner(load_model(&spec).expect("loads"), &opts)
        .err()
        .map(|e| format!("{e:#}"))
        .expect("deepseek_v3 is refused on CUDA");
    assert_eq!(
        e,
        "deepseek_v3: multi-head latent attention (MLA) layers and sigmoid group-limited expert routing with shared experts are not supported on cuda yet; run with --device cpu"
    );
    // A value that is neither on nor off is an error, not a silent default.
    std::env::set_var("WRING_CUDA_MOE", "maybe");
    let spec = ModelSpec {
        model: Some(dir.join("mixtral").to_string_lossy().into_owned()),
        ..Default::default()
    };
    let opts = RunnerOptions {
        device: Device::Cuda(0),
        ..Default::default()
    };
    let e = wring_runtime::open_runner(load_model(&spec).expect("loads"), &opts)
        .err()
        .map(|e| format!("{e:#}"))
        .expect("a bad WRING_CUDA_MOE must refuse");
    assert!(e.contains("WRING_CUDA_MOE"), "{e}");
}
