//! The first thing a user sees: everyday questions through the default chat path
//! (`wring generate --chat`: the same template, CPU weights and sampling resolution as `wring
//! chat`) on the default model with default weights must not come back as degenerate loops
//! (`wring_gate::degenerate::is_loop`: at least half of the answer's tokens inside a 4-token
//! span repeated from earlier in it), with the chat sampling defaults and greedy alike.

use std::process::Command;
use wring_gate::degenerate::{is_loop, repeated_coverage};

const QUESTIONS: [&str; 6] = [
    "What is the capital of France?",
    "Can you recommend a good book for a long flight?",
    "How many legs does a spider have?",
    "Why is the sky blue?",
    "What are three tips for sleeping better?",
    "Who wrote Romeo and Juliet?",
];

fn answer(question: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wring"))
        .args([
            "generate",
            "--chat",
            "--prompt",
            question,
            "--max-tokens",
            "96",
        ])
        .args(["--kv-cache-mib", "64", "--max-model-len", "512"])
        .args(extra)
        .output()
        .expect("the wring binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn everyday_questions_get_answers_not_loops() {
    let model = wring_model::load_model(&wring_model::ModelSpec::default()).expect("default model");
    let mut loops = vec![];
    for (mode, extra) in [
        ("chat defaults, seed 1", &["--seed", "1"][..]),
        ("greedy", &["--temperature", "0"][..]),
    ] {
        for q in QUESTIONS {
            let a = answer(q, extra);
            let ids = model.tokenizer.encode(&a).unwrap();
            eprintln!(
                "[{mode}] {q} -> {:?} (repeated coverage {:.2})",
                a.chars().take(100).collect::<String>(),
                repeated_coverage(&ids)
            );
            assert!(!a.is_empty(), "[{mode}] {q}: empty answer");
            if is_loop(&ids) {
                loops.push(format!("[{mode}] {q}: {a:?}"));
            }
        }
    }
    assert!(
        loops.is_empty(),
        "degenerate answers:\n{}",
        loops.join("\n")
    );
}

#[test]
fn the_loop_detector_catches_the_answer_issue_19_saw() {
    let model = wring_model::load_model(&wring_model::ModelSpec::default()).expect("default model");
    // What `--cpu-weights q4` answered greedily to the first question (issue 19).
    let seen = "L'Étoile, la Marsebeau, la France, la France, la France, la France, la France, la France, la France, la France, la France";
    assert!(is_loop(&model.tokenizer.encode(seen).unwrap()));
    let fine = "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre museum and its cafés along the Seine.";
    assert!(!is_loop(&model.tokenizer.encode(fine).unwrap()));
}
