//! The engine on the real default model reproduces the golden greedy outputs,
//! whatever the batching, chunking or prefix caching.

mod common;

use common::*;
use serde_json::Value;
use wring_engine::{EngineConfig, FinishReason, SpecConfig};

struct Golden {
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
}

fn golden() -> Vec<Golden> {
    let path = test_data_dir().join("golden/smollm2_q41_f32_greedy.jsonl");
    let text = std::fs::read_to_string(&path).expect("golden file");
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Golden {
                prompt_ids: ids(&v["prompt_ids"]),
                greedy_ids: ids(&v["greedy_ids"]),
            }
        })
        .collect()
}

fn check(cfg: EngineConfig, what: &str) {
    let g = golden();
    let (engine, _) = start(cfg);
    let reqs = g.iter().map(|x| greedy(&x.prompt_ids, 24)).collect();
    let outs = run_all(&engine, reqs);
    for (i, (o, x)) in outs.iter().zip(&g).enumerate() {
        assert_eq!(o.error, None);
        assert_eq!(o.ids, x.greedy_ids, "{what}: prompt {i}");
        let want = if x.greedy_ids.len() < 24 {
            FinishReason::Stop
        } else {
            FinishReason::Length
        };
        assert_eq!(o.reason, Some(want), "{what}: prompt {i}");
        assert_eq!(o.usage.completion_tokens as usize, o.ids.len());
    }
    let m = wait_idle(&engine);
    assert_eq!(m.kv_blocks_used, 0, "{what}: every block is freed");
    stop(engine);
}

#[test]
fn batched_greedy_matches_golden() {
    check(config(8, SpecConfig::default()), "batched");
}

#[test]
fn chunked_prefill_and_one_at_a_time_match_golden() {
    let mut cfg = config(1, SpecConfig::default());
    cfg.max_num_batched_tokens = 40; // the 250-token prompt takes 7 chunks
    check(cfg, "chunked");
}
