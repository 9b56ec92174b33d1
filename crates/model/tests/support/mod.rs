//! Helpers shared by the model's integration tests (golden file, prefill of a batch).

use serde_json::Value;
use std::path::PathBuf;
use wring_model::{ModelRunner, SeqInput, StepInput};

/// The repository's test data (`tests/data`: golden outputs, a trace, corpus fixtures; see its README).
pub fn test_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// The records of tests/data/golden/smollm2_q41_f32_greedy.jsonl.
pub fn golden() -> Vec<Value> {
    let path = test_data_dir().join("golden/smollm2_q41_f32_greedy.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Prefill `seqs` together in one step, each with its own blocks; returns last-row logits.
pub fn prefill_batch(
    r: &mut dyn ModelRunner,
    seqs: &[Vec<u32>],
    first_block: u32,
) -> Vec<Vec<f32>> {
    let bs = r.block_size();
    let mut step = StepInput::default();
    let mut next_block = first_block;
    for s in seqs {
        let nb = s.len().div_ceil(bs) as u32;
        step.seqs.push(SeqInput {
            query_start: step.tokens.len(),
            query_len: s.len(),
            context_len: s.len(),
            block_table: (next_block..next_block + nb).collect(),
            prompt_len: 0,
        });
        next_block += nb;
        step.positions.extend(0..s.len() as u32);
        step.tokens.extend_from_slice(s);
        step.logit_rows.push(step.tokens.len() - 1);
    }
    let l = r.forward(&step).unwrap();
    (0..l.rows).map(|i| l.row(i).to_vec()).collect()
}

/// A JSON array of numbers as f32.
pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Logits of every position of `prompt` in one prefill step (KV blocks from 0).
pub fn prompt_logits(r: &mut dyn ModelRunner, prompt: &[u32]) -> Vec<Vec<f32>> {
    let n = prompt.len();
    let step = StepInput {
        tokens: prompt.to_vec(),
        positions: (0..n as u32).collect(),
        seqs: vec![SeqInput {
            query_start: 0,
            query_len: n,
            context_len: n,
            block_table: (0..n.div_ceil(r.block_size()) as u32).collect(),
            prompt_len: n,
        }],
        logit_rows: (0..n).collect(),
    };
    let l = r.forward(&step).unwrap();
    (0..l.rows).map(|i| l.row(i).to_vec()).collect()
}

/// One sequence's decode step: `token` at position `context_len - 1`, the sequence's blocks
/// `block_table`, its logits asked for.
pub fn decode_step(
    token: u32,
    context_len: usize,
    block_table: Vec<u32>,
    prompt_len: usize,
) -> StepInput {
    StepInput {
        tokens: vec![token],
        positions: vec![context_len as u32 - 1],
        seqs: vec![SeqInput {
            query_start: 0,
            query_len: 1,
            context_len,
            block_table,
            prompt_len,
        }],
        logit_rows: vec![0],
    }
}
