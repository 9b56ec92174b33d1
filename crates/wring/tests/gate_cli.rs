//! `wring gate` end to end through the binary: exit status 0 PASS, 1 FAIL, 2 error, and the
//! JSON result. Real default model, two MBPP prompts.

use std::process::Command;

/// The corpus fixtures (`tests/data/corpora`, written by scripts/reference/fixtures.py).
fn corpus_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpora")
}

fn gate(extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .args(["gate", "--reference", "default", "--corpus", "mbpp"])
        .args(["--num-prompts", "2", "--max-new-tokens", "6", "--quiet"])
        .arg("--corpus-dir")
        .arg(corpus_dir())
        .args(extra)
        .output()
        .expect("the wring binary runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn gate_exit_status_reflects_the_verdict() {
    let json = std::env::temp_dir().join(format!("wring-gate-cli-{}.json", std::process::id()));
    let (code, stdout, stderr) =
        gate(&["--candidate", "default", "--json", json.to_str().unwrap()]);
    assert_eq!(code, 0, "self vs self must PASS\n{stdout}\n{stderr}");
    assert!(stdout.contains("wring gate: PASS"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(v["verdict"], "PASS");
    assert_eq!(v["metrics"]["max_abs_logprob_diff"], 0.0);
    assert_eq!(v["thresholds"]["max_logprob_diff"], 0.5);

    // q8 weights move the log-probs a little: a zero tolerance must FAIL with status 1.
    let (code, stdout, stderr) = gate(&[
        "--candidate",
        "default",
        "--candidate-cpu-weights",
        "q8",
        "--max-logprob-diff",
        "0",
        "--noise-floor",
        "none",
    ]);
    assert_eq!(code, 1, "zero tolerance must FAIL\n{stdout}\n{stderr}");
    assert!(stdout.contains("wring gate: FAIL"), "{stdout}");

    // A model that does not exist is an error: status 2 and a clear message.
    let (code, _, stderr) = gate(&["--candidate", "/nonexistent/model.gguf"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
}
