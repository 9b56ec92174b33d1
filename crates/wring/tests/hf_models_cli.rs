//! Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3 through the binary: `wring generate` on the tiny
//! transformers-made models of tests/data/hf_tiny prints transformers' greedy text (with and
//! without suffix speculation) on the CPU — DeepSeek-V3's from a chat prompt rendered by the
//! template in its tokenizer_config.json, whose BOS is not doubled — from their Hugging Face
//! directories and, Qwen3, Qwen3-MoE and Mixtral, from their GGUF files (tests/data/gguf_tiny,
//! as llama.cpp lays them out), and `--device cuda`
//! refuses them in words naming the `model_type`, on a machine with or without a GPU.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/hf_tiny")
        .join(name)
}

fn tiny_gguf(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/gguf_tiny")
        .join(file)
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

fn generate(model: &Path, prompt: &str, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .arg("generate")
        .arg("--model")
        .arg(model)
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
        let (ok, plain, log) = generate(&tiny(name), &prompt, &[]);
        assert!(ok, "{name}: {log}");
        assert_eq!(plain.trim_end_matches('\n'), want, "{name}");
        let (ok, spec, log) = generate(
            &tiny(name),
            &prompt,
            &["--speculative", "suffix", "--k-policy", "fixed:4"],
        );
        assert!(ok, "{name}: {log}");
        assert_eq!(spec, plain, "{name} with suffix speculation");
    }
}

/// The GGUF files (the Q8_0 one too) print the same text.
#[test]
fn generate_on_gguf_files_prints_transformers_greedy_text() {
    for (file, name) in [
        ("qwen3.gguf", "qwen3"),
        ("qwen3.Q8_0.gguf", "qwen3"),
        ("qwen3_moe.gguf", "qwen3_moe"),
        ("mixtral.gguf", "mixtral"),
    ] {
        let (prompt, want) = reference(name);
        let (ok, text, log) = generate(&tiny_gguf(file), &prompt, &[]);
        assert!(ok, "{file}: {log}");
        assert_eq!(text.trim_end_matches('\n'), want, "{file}");
    }
}

#[test]
fn deepseek_v3_answers_a_chat_prompt_as_transformers_does() {
    // Reference prompt 2 is the rendering of chat 0 (one user message, no system one) by
    // the model's template, which writes BOS itself; the tokenizer also asks for BOS
    // (`add_bos_token`), which must not put a second one in front.
    let path = tiny("").join("deepseek_v3.reference.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (chat, p) = (&v["chats"][0], &v["prompts"][2]);
    assert_eq!(p["ids"], chat["ids"]);
    let user = chat["messages"][0]["content"].as_str().unwrap();
    let want = p["greedy_text"].as_str().unwrap();
    for extra in [
        &[][..],
        &["--speculative", "suffix", "--k-policy", "fixed:4"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_wring"))
            .arg("generate")
            .arg("--model")
            .arg(tiny("deepseek_v3"))
            .args(["--prompt", user, "--max-tokens", "32", "--ignore-eos"])
            .args(["--kv-cache-mib", "16", "--max-model-len", "256"])
            .args(extra)
            .output()
            .expect("the wring binary runs");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{log}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.trim_end_matches('\n'), want, "{extra:?}");
    }
}

#[test]
fn cuda_refuses_what_it_cannot_run_by_model_type() {
    for (model, what) in [
        (
            tiny("qwen3_moe"),
            "qwen3_moe: mixture-of-experts layers are",
        ),
        (tiny("mixtral"), "mixtral: mixture-of-experts layers are"),
        (
            tiny("deepseek_v3"),
            "deepseek_v3: multi-head latent attention (MLA) layers, mixture-of-experts layers and sigmoid group-limited expert routing with shared experts are",
        ),
        (
            tiny_gguf("qwen3_moe.gguf"),
            "qwen3_moe: mixture-of-experts layers are",
        ),
        (
            tiny_gguf("mixtral.gguf"),
            "mixtral: mixture-of-experts layers are",
        ),
    ] {
        let name = model.display();
        let (ok, _, err) = generate(&model, "Hello", &["--device", "cuda"]);
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
