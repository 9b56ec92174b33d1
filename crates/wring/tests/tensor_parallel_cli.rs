//! `--tensor-parallel-size` end to end through the binary, on CPU ranks (the GPU path
//! differs only in the backend's collectives): the same greedy text as one rank, with and
//! without suffix speculation, and clear errors for splits that cannot work.

use std::process::Command;

fn generate(extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .args(["generate", "--prompt", "The three primary colors are"])
        .args([
            "--max-tokens",
            "32",
            "--cpu-weights",
            "f32",
            "--kv-cache-mib",
            "64",
        ])
        .args(["--max-model-len", "256"])
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
fn tp2_generates_what_one_rank_does_with_and_without_speculation() {
    let (ok, one, err) = generate(&[]);
    assert!(ok, "{err}");
    assert!(one.split_whitespace().count() > 5, "{one:?}");
    let (ok, tp2, err) = generate(&["--tensor-parallel-size", "2"]);
    assert!(ok, "{err}");
    assert_eq!(tp2, one, "TP=2 greedy text");
    let (ok, spec, err) = generate(&[
        "--tp",
        "3",
        "--speculative",
        "suffix",
        "--k-policy",
        "fixed:4",
    ]);
    assert!(ok, "{err}");
    assert_eq!(spec, one, "TP=3 with suffix speculation");
}

#[test]
fn impossible_splits_are_clear_errors() {
    let (ok, _, err) = generate(&["--tensor-parallel-size", "12"]);
    assert!(!ok);
    assert!(err.contains("too large for 9 attention heads"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Without a GPU (CI) the CUDA path must refuse in words, not panic or hang.
    let (ok, _, err) = generate(&["--device", "cuda", "--tensor-parallel-size", "2"]);
    if !ok {
        assert!(
            err.starts_with("error:") || err.contains("\nerror:"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
