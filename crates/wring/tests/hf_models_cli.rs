//! Qwen3, Qwen3-MoE and Mixtral through the binary: `wring generate` on the tiny
//! transformers-made models of tests/data/hf_tiny prints transformers' greedy text (with and
//! without suffix speculation) on the CPU, and `--device cuda` refuses them in words naming
//! the `model_type`, on a machine with or without a GPU.

use std::path::PathBuf;
use std::process::Command;

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/hf_tiny")
        .join(name)
}

/// The first reference prompt of `name` and transformers' 32 greedy tokens' text.
fn reference(name: &str) -> (String, String) {
    let path = tiny("").join(format!("{name}.reference.json"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let p = &v["prompts"][0];
    (
        p["text"].as_str().unwrap().into(),
        p["greedy_text"].as_str().unwrap().into(),
    )
}

fn generate(name: &str, prompt: &str, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .arg("generate")
        .arg("--model")
        .arg(tiny(name))
        .args([
            "--raw",
            "--prompt",
            prompt,
            "--max-tokens",
            "32",
            "--ignore-eos",
        ])
        .args(["--kv-cache-mib", "16", "--max-model-len", "256"])
        .args(extra)
        .output()
        .expect("the wring binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generate_prints_transformers_greedy_text_with_and_without_speculation() {
    for name in ["qwen3", "qwen3_moe", "mixtral"] {
        let (prompt, want) = reference(name);
        let (ok, plain, log) = generate(name, &prompt, &[]);
        assert!(ok, "{name}: {log}");
        assert_eq!(plain.trim_end_matches('\n'), want, "{name}");
        let (ok, spec, log) = generate(
            name,
            &prompt,
            &["--speculative", "suffix", "--k-policy", "fixed:4"],
        );
        assert!(ok, "{name}: {log}");
        assert_eq!(spec, plain, "{name} with suffix speculation");
    }
}

#[test]
fn cuda_refuses_what_it_cannot_run_by_model_type() {
    for (name, what) in [
        ("qwen3_moe", "qwen3_moe: mixture-of-experts layers are"),
        ("mixtral", "mixtral: mixture-of-experts layers are"),
    ] {
        let (ok, _, err) = generate(name, "Hello", &["--device", "cuda"]);
        assert!(!ok, "{name} ran on cuda");
        assert!(
            err.contains(&format!(
                "{what} not supported on cuda yet; run with --device cpu"
            )),
            "{name}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
