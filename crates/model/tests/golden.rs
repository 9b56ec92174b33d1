//! The default model reproduces the independent float32 reference in
//! tests/data/golden/smollm2_q41_f32_greedy.jsonl (made by scripts/reference/golden.py): identical prompt ids and greedy ids,
//! logits within 1e-3. Also proves the CPU backend is batch-invariant.

#[allow(dead_code)] // each test crate uses some of the helpers
mod support;

use support::{argmax, decode_step, golden, ids, prefill_batch};
use wring_model::{load_model, ModelRunner, ModelSpec, RunnerOptions};

fn runner() -> (Box<dyn ModelRunner>, std::sync::Arc<wring_model::Tokenizer>) {
    let m = load_model(&ModelSpec::default()).expect("default model loads");
    let tok = m.tokenizer.clone();
    let opts = RunnerOptions {
        kv_cache_bytes: 512 << 20,
        max_model_len: 2048,
        ..Default::default()
    };
    (m.into_runner(&opts).unwrap(), tok)
}

#[test]
fn golden_prompt_ids_greedy_ids_and_logits() {
    let (mut r, tok) = runner();
    let bs = r.block_size();
    for rec in golden() {
        let chat_text = rec["chat_text"].as_str().unwrap();
        let prompt = ids(&rec["prompt_ids"]);
        assert_eq!(
            tok.encode(chat_text).unwrap(),
            prompt,
            "prompt ids differ for {chat_text:?}"
        );
        let want = ids(&rec["greedy_ids"]);
        let steps = rec["steps"].as_array().unwrap();
        // Prefill, then decode one token per step, checking the top-8 logits each time.
        let mut seq = prompt.clone();
        let blocks: Vec<u32> = (0..((prompt.len() + want.len()).div_ceil(bs) as u32)).collect();
        let mut logits = prefill_batch(r.as_mut(), std::slice::from_ref(&prompt), 0).remove(0);
        let mut got = vec![];
        for (i, st) in steps.iter().enumerate() {
            for (id, lg) in ids(&st["top_ids"])
                .iter()
                .zip(st["top_logits"].as_array().unwrap())
            {
                let diff = (logits[*id as usize] - lg.as_f64().unwrap() as f32).abs();
                assert!(
                    diff < 1e-3,
                    "step {i}: logit of token {id} is {} vs golden {} (|Δ| {diff})",
                    logits[*id as usize],
                    lg
                );
            }
            let next = argmax(&logits);
            got.push(next);
            if got.len() == want.len() {
                break;
            }
            seq.push(next);
            let step = decode_step(next, seq.len(), blocks.clone(), 0);
            logits = r.forward(&step).unwrap().row(0).to_vec();
        }
        assert_eq!(got, want, "greedy ids differ for {chat_text:?}");
    }
}

#[test]
fn cpu_backend_is_batch_invariant() {
    let (mut r, tok) = runner();
    let prompts: Vec<Vec<u32>> = [
        "Hello there",
        "Write a Python function that reverses a list.",
        "1 2 3 4 5 6 7 8 9",
    ]
    .iter()
    .map(|p| tok.encode(p).unwrap())
    .collect();
    let solo: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| prefill_batch(r.as_mut(), std::slice::from_ref(p), 0).remove(0))
        .collect();
    let together = prefill_batch(r.as_mut(), &prompts, 0);
    let reversed: Vec<Vec<u32>> = prompts.iter().rev().cloned().collect();
    let mut together_rev = prefill_batch(r.as_mut(), &reversed, 7);
    together_rev.reverse();
    for i in 0..prompts.len() {
        assert!(
            solo[i] == together[i],
            "prompt {i}: logits differ between batch of 1 and batch of 3"
        );
        assert!(
            solo[i] == together_rev[i],
            "prompt {i}: logits differ with another batch order and other blocks"
        );
    }
}

/// `renew_kv` puts the runner on new, zeroed KV memory of the same size: a decode step
/// no longer sees the K/V an earlier prefill wrote (the test fails if it is a no-op),
/// and the same prefill and decode on the new pool give the logits they gave before.
#[test]
fn a_renewed_kv_pool_is_new_memory_of_the_same_size() {
    let (mut r, tok) = runner();
    let prompt = tok.encode("The capital of France is").unwrap();
    let bs = r.block_size();
    let decode = |r: &mut dyn ModelRunner, next: u32| {
        let n = prompt.len();
        let step = decode_step(next, n + 1, (0..(n + 1).div_ceil(bs) as u32).collect(), 0);
        let l = r.forward(&step).unwrap();
        l.row(0).to_vec()
    };
    let first = prefill_batch(r.as_mut(), std::slice::from_ref(&prompt), 0).remove(0);
    let next = argmax(&first);
    let before = decode(r.as_mut(), next);
    r.renew_kv().unwrap();
    let blind = decode(r.as_mut(), next);
    assert!(
        blind != before,
        "the decode step still saw the old pool's K/V"
    );
    assert_eq!(
        prefill_batch(r.as_mut(), std::slice::from_ref(&prompt), 0).remove(0),
        first
    );
    assert_eq!(decode(r.as_mut(), next), before);
}
