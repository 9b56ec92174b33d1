//! `gpu_check persistent [OUT_DIR]`: the persistent step kernel (`WRING_CUDA_PERSISTENT`,
//! kernels/persistent.cu) against the launches it replaces, on the bf16 gemv path with the
//! fused norm, on dummy SmolLM2-135M and Llama-3.1-8B weights (`PERSISTENT_MODELS=dummy,dummy-8b`):
//!   1. graph replay of decode steps at batch 1/2/4/8 (and a 1 × 5 verify step) with the
//!      persistent kernel = the same replay without it, bitwise (it runs the same device
//!      functions: any difference is a bug), = the eager (pad-only) step, and the persistent
//!      kernel launched (its launch and op counters moved); verify K = 4 = plain greedy;
//!   2. graph-replay decode step times and graph nodes at batch 1/2/4/8: cuBLAS (the
//!      default), gemv with the fused norm, the persistent kernel, and `auto` (each graph
//!      key captured on all three, timed, the fastest kept: `WRING_CUDA_PERSISTENT=auto
//!      WRING_CUDA_SMALL_STEP_PATH=auto`), with what `auto` measured and chose per key.
//!
//! Writes OUT_DIR/persistent.json; prints Markdown and `RESULT persistent: PASS|FAIL`.

use crate::harness::{
    gguf_runner, prefill_eight, run_per_model, same, spec_check, step, time_steps, Runner,
};
use anyhow::Result;
use serde_json::json;
use wring_cuda::{CudaOptions, GraphMode, PersistentMode, SmallStepPath};
use wring_model::ModelRunner;

/// The gemv path with the fused norm, on the persistent kernel or not.
fn set_persistent(r: &mut Runner, on: bool) -> Result<()> {
    let mode = if on {
        PersistentMode::On
    } else {
        PersistentMode::Off
    };
    set_paths(r, SmallStepPath::Gemv, mode)
}

fn set_paths(r: &mut Runner, path: SmallStepPath, mode: PersistentMode) -> Result<()> {
    let env = CudaOptions::from_env()?;
    let b = r.backend_mut();
    b.set_gemv_max_t(8, env.gemv_4bit_max_t);
    b.set_small_step_path(path);
    b.set_fused_norm(true);
    b.set_persistent(mode);
    Ok(())
}

pub fn run(out_dir: Option<&str>) -> Result<()> {
    run_per_model(
        "persistent",
        "PERSISTENT_MODELS",
        "dummy,dummy-8b",
        out_dir,
        "persistent.json",
        one_model,
    )
}

fn one_model(model: &str, out: &mut Vec<serde_json::Value>) -> Result<bool> {
    let t0 = std::time::Instant::now();
    let (mut r, cfg) = gguf_runner(model, GraphMode::On, 2048)?;
    println!(
        "## Persistent step kernel: {model} ({} layers, hidden {}), {}, loaded in {:.0} s\n",
        cfg.num_layers,
        cfg.hidden_size,
        r.device_name(),
        t0.elapsed().as_secs_f64()
    );
    let mut ok = true;
    set_persistent(&mut r, false)?;
    let (tabs, ctx) = prefill_eight(&mut r)?;

    println!("| batch × q | eager = replay = persistent replay (bitwise) | persistent launches / ops per step | ok |");
    println!("|---|---|---|---|");
    for (b, q) in [(1usize, 1usize), (2, 1), (4, 1), (8, 1), (1, 5)] {
        let new: Vec<Vec<u32>> = (0..b)
            .map(|i| (0..q).map(|j| (650 + 5 * i + j) as u32).collect())
            .collect();
        let s = step(&new, &ctx[..b], &tabs[..b]);
        set_persistent(&mut r, false)?;
        r.backend_mut().set_graph_mode(GraphMode::PadOnly);
        let eager = r.forward(&s)?.data;
        r.backend_mut().set_graph_mode(GraphMode::On);
        let mut runs = vec![];
        for _ in 0..3 {
            runs.push(r.forward(&s)?.data);
        }
        set_persistent(&mut r, true)?;
        let (l0, o0) = r.backend().persistent_counts();
        for _ in 0..3 {
            runs.push(r.forward(&s)?.data);
        }
        let (l1, o1) = r.backend().persistent_counts();
        let eq = runs.iter().all(|x| same(x, &eager));
        let launched = l1 > l0;
        let row_ok = eq && launched;
        ok &= row_ok;
        println!(
            "| {b} × {q} | {} | {} / {} | {} |",
            if eq { "identical" } else { "DIFFERENT" },
            l1 - l0,
            o1 - o0,
            if row_ok { "ok" } else { "FAIL" }
        );
        out.push(json!({
            "model": model, "kind": "compare", "batch": b, "q": q, "bitwise": eq,
            "persistent_launches": l1 - l0, "persistent_ops": o1 - o0, "ok": row_ok,
        }));
    }

    // Verify K = 4 = plain greedy with the persistent kernel (decode and 5-token verify graphs).
    set_persistent(&mut r, true)?;
    for (k, pos, seqs) in spec_check(&mut r, 1, &[4])? {
        let eq = seqs == 1;
        ok &= eq;
        println!(
            "\npersistent, batch 1, verify K {k} vs plain greedy: {pos}/{} tokens, {}",
            crate::harness::SPEC_GEN,
            if eq { "identical" } else { "DIFFERENT" }
        );
        out.push(json!({"model": model, "kind": "spec", "k": k, "tokens_matching": pos, "ok": eq}));
    }

    let ctx_len = if cfg.num_layers > 30 { 512 } else { 256 };
    println!("\n| path | batch | graph ms/step | graph nodes |");
    println!("|---|---|---|---|");
    let paths = [
        ("cublas", SmallStepPath::Cublas, PersistentMode::Off),
        ("gemv+fused", SmallStepPath::Gemv, PersistentMode::Off),
        ("persistent", SmallStepPath::Gemv, PersistentMode::On),
        ("auto", SmallStepPath::Auto, PersistentMode::Auto),
    ];
    for (label, path, mode) in paths {
        set_paths(&mut r, path, mode)?;
        for batch in [1usize, 2, 4, 8] {
            let t = time_steps(&mut r, batch, 1, ctx_len, 14)?;
            let bucket = CudaOptions::from_env()?.bucket_for(batch).unwrap_or(batch);
            let nodes = r.backend().graph_nodes(bucket, 1);
            println!(
                "| {label} | {batch} | {:.4} | {} |",
                t * 1e3,
                nodes.map_or("?".into(), |n| n.to_string())
            );
            out.push(json!({
                "model": model, "kind": "time", "path": label, "batch": batch, "ctx": ctx_len,
                "ms": t * 1e3, "graph_nodes": nodes,
            }));
        }
    }
    // What `auto` measured for each key it captured (the last path set above).
    println!("\n| auto: batch × q | chosen | cuBLAS ms | gemv ms | persistent ms |");
    println!("|---|---|---|---|---|");
    for c in r.backend().small_step_choices() {
        println!(
            "| {} × {} | {} | {:.4} | {:.4} | {:.4} |",
            c.bucket, c.query_len, c.chosen, c.cublas_ms, c.gemv_ms, c.persistent_ms
        );
        out.push(json!({
            "model": model, "kind": "auto", "batch": c.bucket, "q": c.query_len,
            "chosen": c.chosen, "cublas_ms": c.cublas_ms, "gemv_ms": c.gemv_ms,
            "persistent_ms": c.persistent_ms,
        }));
    }
    println!();
    Ok(ok)
}
