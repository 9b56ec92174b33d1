//! The first thing a user sees: everyday questions through the default chat path
//! (`wring generate --chat`: the same template, CPU weights and sampling resolution as `wring
//! chat`) on the default model with default weights must not come back as degenerate loops
//! (`wring_gate::degenerate::is_loop`: at least half of the answer's tokens inside a 4-token
//! span repeated from earlier in it), with the chat sampling defaults and greedy alike; and
//! questions it answers right greedily must come back right, loop-free, under the default chat
//! sampling for most seeds.

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
fn the_loop_detector_catches_the_q4_first_answer() {
    let model = wring_model::load_model(&wring_model::ModelSpec::default()).expect("default model");
    // What `--cpu-weights q4` answered greedily to the first question (results/2026-12-01-gate-cpu-formats).
    let seen = "L'Étoile, la Marsebeau, la France, la France, la France, la France, la France, la France, la France, la France, la France";
    assert!(is_loop(&model.tokenizer.encode(seen).unwrap()));
    let fine = "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre museum and its cafés along the Seine.";
    assert!(!is_loop(&model.tokenizer.encode(fine).unwrap()));
}

/// Everyday questions the default model (its default CPU weights) answers right greedily, with
/// the words that count as the right answer (whole words, any case).
const KNOWN_ANSWERS: [(&str, &[&str]); 5] = [
    ("What is the capital of France?", &["paris"]),
    ("What is 2+2?", &["4", "four"]),
    ("What color is the sky on a clear day?", &["blue"]),
    ("Name a primary color.", &["red", "blue", "yellow"]),
    ("Who wrote Romeo and Juliet?", &["shakespeare"]),
];

fn has_word(text: &str, words: &[&str]) -> bool {
    let text = text.to_lowercase();
    text.split(|c: char| !c.is_alphanumeric())
        .any(|w| words.contains(&w))
}

/// The chat default (the default model's card, temperature 0.2 / top_p 0.9, with min_p 0.05 and
/// DRY 0.8, and an empty system turn instead of the one SmolLM2's template inserts) passes.
/// With the template's system turn France's first token is nearly tied (The 0.14, L 0.13), so
/// sampling started "L'Étoile, la ..." at seeds 2 and 3; with the empty one "The" is 0.53 and
/// every seed names Paris, which is why France must be right at all three seeds. Without DRY
/// both the card's settings and the earlier 0.7/0.95/0.05 looped
/// (results/2026-12-01-chat-defaults).
#[test]
fn default_chat_sampling_answers_known_questions_right_without_loops() {
    let model = wring_model::load_model(&wring_model::ModelSpec::default()).expect("default model");
    let mut failures = vec![];
    for (q, words) in KNOWN_ANSWERS {
        let mut right = 0;
        for seed in ["1", "2", "3"] {
            let a = answer(q, &["--seed", seed]);
            let ids = model.tokenizer.encode(&a).unwrap();
            let good = has_word(&a, words);
            right += good as usize;
            eprintln!(
                "[seed {seed}] {q} -> {:?} (right {good}, repeated coverage {:.2})",
                a.chars().take(100).collect::<String>(),
                repeated_coverage(&ids)
            );
            if is_loop(&ids) {
                failures.push(format!("[seed {seed}] {q}: a loop: {a:?}"));
            }
        }
        let needed = if q.contains("France") { 3 } else { 2 };
        if right < needed {
            failures.push(format!("{q}: {words:?} in {right} of 3 seeds"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
