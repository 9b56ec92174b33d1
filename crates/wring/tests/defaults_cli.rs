//! What the CLI picks when flags leave a choice open, as the start-up log (the launch plan)
//! says it: speculation (`--speculative suffix` alone: adaptive K, unpadded on the CPU;
//! `--k-policy`, `--pad`, `--no-pad` override), fair steps, the model and the KV cache, and chat
//! sampling (flag, else the model's own, else wring's).

use std::process::Command;

/// Runs `wring generate` for one token and returns (success, stderr).
fn start(extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .args(["generate", "--prompt", "Hello", "--max-tokens", "1"])
        .args([
            "--cpu-weights",
            "f32",
            "--kv-cache-mib",
            "64",
            "--max-model-len",
            "256",
        ])
        .args(extra)
        .env("RUST_LOG", "info")
        .output()
        .expect("the wring binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn speculation_defaults_follow_the_backend_and_flags_override() {
    let (ok, log) = start(&["--speculative", "suffix"]);
    assert!(ok, "{log}");
    assert!(
        log.contains(
            "speculation: suffix, K policy adaptive (CPU default), unpadded (CPU default)"
        ),
        "{log}"
    );
    let (ok, log) = start(&["--speculative", "suffix", "--k-policy", "fixed:4", "--pad"]);
    assert!(ok, "{log}");
    assert!(
        log.contains("speculation: suffix, K policy fixed:4 (given), padded (given)"),
        "{log}"
    );
    let (ok, log) = start(&[
        "--speculative",
        "suffix",
        "--no-pad",
        "--k-policy",
        "dynamic",
    ]);
    assert!(ok, "{log}");
    assert!(
        log.contains("K policy dynamic (given), unpadded (given)"),
        "{log}"
    );
    let (ok, log) = start(&["--speculative", "suffix", "--pad", "--no-pad"]);
    assert!(!ok && log.contains("cannot be used with"), "{log}");
    let (ok, log) = start(&[]);
    assert!(ok, "{log}");
    assert!(log.contains("speculation: off"), "{log}");
}

#[test]
fn fair_steps_default_on_the_cpu_and_zero_turns_them_off() {
    let (ok, log) = start(&[]);
    assert!(ok, "{log}");
    assert!(
        log.contains("fair steps: prefill chunks sized for 120 ms steps, the default here (500 ms for a prompt alone; hard cap 2048 tokens)"),
        "{log}"
    );
    // The rest of the launch plan: one line a decision, with its reason.
    for line in [
        "(the default model; --model names another)",
        "KV cache: 64 MiB (--kv-cache-mib)",
        "CPU prefill attention: ",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    let (ok, log) = start(&[
        "--step-time-target-ms",
        "0",
        "--max-num-batched-tokens",
        "512",
    ]);
    assert!(ok, "{log}");
    assert!(
        log.contains("step budget: 512 tokens (no step-time target)"),
        "{log}"
    );
}

#[test]
fn chat_samples_by_default_and_plain_generate_stays_greedy() {
    let (ok, log) = start(&["--chat"]);
    assert!(ok, "{log}");
    assert!(
        log.contains("sampling: temperature 0.2 (model card), top_p 0.9 (model card), min_p 0.05 (wring chat default)"),
        "the default model's card (SmolLM2: temperature 0.2, top_p 0.9); its GGUF has no sampling keys\n{log}"
    );
    let (ok, log) = start(&["--chat", "--top-p", "0.8"]);
    assert!(ok, "{log}");
    assert!(
        log.contains("sampling: temperature 0.2 (model card), top_p 0.8 (flag)"),
        "{log}"
    );
    assert!(
        log.contains("DRY 0.8 (wring chat default; base 1.75, allowed length 2, whole context)"),
        "{log}"
    );
    let (ok, log) = start(&["--chat", "--temperature", "0"]);
    assert!(ok, "{log}");
    assert!(
        log.contains("sampling: greedy (temperature 0 (flag)), DRY 0.8 (wring chat default"),
        "{log}"
    );
    let (ok, log) = start(&[]);
    assert!(ok, "{log}");
    assert!(
        !log.contains("sampling:"),
        "plain generate logs no chat sampling\n{log}"
    );
}

/// Runs `wring generate` with the default weights; (success, stdout, stderr).
fn generate(extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .args(["generate", "--max-tokens", "24", "--kv-cache-mib", "64"])
        .args(["--max-model-len", "256"])
        .args(extra)
        .env("RUST_LOG", "info")
        .output()
        .expect("the wring binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generate_answers_a_question_through_the_chat_template_and_raw_continues_the_text() {
    let q = "What is the capital of France?";
    let (ok, answer, log) = generate(&["--prompt", q]);
    assert!(ok, "{log}");
    assert!(
        answer.contains("Paris"),
        "an instruct model answers a user message: {answer:?}"
    );
    assert!(
        log.contains("a user message in the model's chat template"),
        "{log}"
    );
    // The bare text, as before: this instruct model ends it at once.
    let (ok, raw, log) = generate(&["--raw", "--prompt", q]);
    assert!(ok, "{log}");
    assert!(!raw.contains("Paris"), "{raw:?}");
    assert!(log.contains("continued as it is (--raw)"), "{log}");
    let (ok, _, log) = generate(&["--raw", "--chat", "--prompt", q]);
    assert!(!ok && log.contains("cannot be used with"), "{log}");
}
