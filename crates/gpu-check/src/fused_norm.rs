//! `gpu_check fused-norm [OUT_DIR]`: the gemv path with the RMSNorm in the q|k|v
//! and gate|up prologue and the residual add in the o and down epilogue
//! (`WRING_CUDA_FUSED_NORM`), on dummy SmolLM2-135M and Llama-3.1-8B weights
//! (`FUSED_NORM_MODELS=dummy,dummy-8b`):
//!   1. correctness on eager (pad-only) steps of batch 1/2/4/8 × 1 and 1 × 5: gemv+fused vs
//!      gemv unfused (the kernels are built to give the same bits: reported; PASS needs the
//!      gemv-vs-cuBLAS tolerance) and vs cuBLAS (tolerance, argmax), gemv kernels launched;
//!      graph replay = eager bitwise on gemv+fused and on `auto` once it has chosen; verify
//!      K = 4 = plain greedy on gemv+fused (batch 1: 5-token steps);
//!   2. graph-replay decode step times and kernels per step (graph nodes) at batch 1/2/4/8
//!      for cublas, gemv, gemv+fused and auto (with what auto chose and the times it saw).
//!
//! Writes OUT_DIR/fused_norm.json; prints Markdown and `RESULT fused-norm: PASS|FAIL`.
//! With `FUSED_NORM_GATE=PREFIX` a model, once loaded, touches `PREFIX.MODEL.loaded` and
//! waits (up to 180 s) for `PREFIX.MODEL.go` before it runs anything, so a script can load
//! the 8B weights while other checks run and still time alone.

use crate::harness::{
    argmax_agreement, gguf_runner, prefill_eight, run_per_model, same, spec_check, step,
    time_steps, Runner,
};
use anyhow::Result;
use serde_json::json;
use wring_cuda::{CudaOptions, GraphMode, SmallStepPath};
use wring_model::ModelRunner;

/// (label, path, norm fused into the gemv launches).
const PATHS: [(&str, SmallStepPath, bool); 4] = [
    ("cublas", SmallStepPath::Cublas, false),
    ("gemv", SmallStepPath::Gemv, false),
    ("gemv+fused", SmallStepPath::Gemv, true),
    ("auto", SmallStepPath::Auto, true),
];

fn set_path(r: &mut Runner, path: SmallStepPath, fused: bool) -> Result<()> {
    let env = CudaOptions::from_env()?;
    let b = r.backend_mut();
    b.set_gemv_max_t(8, env.gemv_4bit_max_t);
    b.set_small_step_path(path);
    b.set_fused_norm(fused);
    Ok(())
}

/// Max |a − b| and max |a|.
fn max_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    a.iter().zip(b).fold((0f32, 0f32), |(d, m), (x, y)| {
        (d.max((x - y).abs()), m.max(x.abs()))
    })
}

pub fn run(out_dir: Option<&str>) -> Result<()> {
    run_per_model(
        "fused-norm",
        "FUSED_NORM_MODELS",
        "dummy,dummy-8b",
        out_dir,
        "fused_norm.json",
        one_model,
    )
}

fn one_model(model: &str, out: &mut Vec<serde_json::Value>) -> Result<bool> {
    let t0 = std::time::Instant::now();
    let (mut r, cfg) = gguf_runner(model, GraphMode::PadOnly, 2048)?;
    if let Ok(gate) = std::env::var("FUSED_NORM_GATE") {
        std::fs::write(
            format!("{gate}.{model}.loaded"),
            format!("{:.0}", t0.elapsed().as_secs_f64()),
        )?;
        let go = std::path::PathBuf::from(format!("{gate}.{model}.go"));
        let wait = std::time::Instant::now();
        while !go.exists() && wait.elapsed().as_secs() < 180 {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    println!(
        "## Norm fused into the gemv launches: {model} ({} layers, hidden {}), {}, loaded in {:.0} s\n",
        cfg.num_layers,
        cfg.hidden_size,
        r.device_name(),
        t0.elapsed().as_secs_f64()
    );
    let mut ok = true;
    set_path(&mut r, SmallStepPath::Cublas, false)?;
    let (tabs, ctx) = prefill_eight(&mut r)?;

    println!("| batch × q | gemv+fused = gemv (bitwise, expected) | max |Δ| vs gemv | max |Δ| vs cuBLAS (max |logit|) | argmax vs cuBLAS | gemv kernels ran | ok |");
    println!("|---|---|---|---|---|---|---|");
    for (b, q) in [(1usize, 1usize), (2, 1), (4, 1), (8, 1), (1, 5)] {
        let new: Vec<Vec<u32>> = (0..b)
            .map(|i| (0..q).map(|j| (650 + 5 * i + j) as u32).collect())
            .collect();
        let s = step(&new, &ctx[..b], &tabs[..b]);
        let mut logits = vec![];
        let mut launched = vec![];
        for (_, path, fused) in &PATHS[..3] {
            set_path(&mut r, *path, *fused)?;
            let before = r.backend().gemv_launches();
            logits.push(r.forward(&s)?.data);
            launched.push(r.backend().gemv_launches() > before);
        }
        let (cublas, gemv, fused) = (&logits[0], &logits[1], &logits[2]);
        let bitwise = same(fused, gemv);
        let (dg, _) = max_diff(fused, gemv);
        let (dc, scale) = max_diff(fused, cublas);
        let (agree, n) = argmax_agreement(cublas, fused, cfg.vocab_size);
        let ran = !launched[0] && launched[1] && launched[2];
        let tol = 2e-2 * scale.max(1.0);
        let row_ok = dg.is_finite() && dc.is_finite() && dg <= tol && dc <= tol && ran;
        ok &= row_ok;
        println!(
            "| {b} × {q} | {} | {dg:.2e} | {dc:.4} ({scale:.1}) | {agree}/{n} | {} | {} |",
            if bitwise { "yes" } else { "no" },
            if ran { "gemv paths only" } else { "UNEXPECTED" },
            if row_ok { "ok" } else { "DIFFERENT" }
        );
        out.push(json!({
            "model": model, "kind": "compare", "batch": b, "q": q, "fused_eq_gemv_bitwise": bitwise,
            "max_diff_vs_gemv": dg, "max_diff_vs_cublas": dc, "max_logit": scale, "ok": row_ok,
        }));
    }

    // Replay = eager, bitwise: gemv+fused forced, and auto once it has chosen (its eager
    // steps then take the key's choice).
    println!("\n| path | batch × q | eager (pad-only) = capture = replay (bitwise) |");
    println!("|---|---|---|");
    for (label, path, fused) in [PATHS[2], PATHS[3]] {
        set_path(&mut r, path, fused)?;
        for (b, q) in [(1usize, 1usize), (8, 1), (1, 5)] {
            let new: Vec<Vec<u32>> = (0..b)
                .map(|i| (0..q).map(|j| (900 + 3 * i + j) as u32).collect())
                .collect();
            let s = step(&new, &ctx[..b], &tabs[..b]);
            let auto = path == SmallStepPath::Auto;
            let mut runs = vec![];
            if !auto {
                r.backend_mut().set_graph_mode(GraphMode::PadOnly);
                runs.push(r.forward(&s)?.data);
            }
            r.backend_mut().set_graph_mode(GraphMode::On);
            for i in 0..4 {
                let l = r.forward(&s)?.data;
                // auto: the first sighting runs eagerly before any choice (cuBLAS).
                if !(auto && i == 0) {
                    runs.push(l);
                }
            }
            if auto {
                r.backend_mut().set_graph_mode(GraphMode::PadOnly);
                runs.push(r.forward(&s)?.data);
            }
            let eq = runs.iter().all(|x| same(x, &runs[0]));
            ok &= eq;
            println!(
                "| {label} | {b} × {q} | {} |",
                if eq { "identical" } else { "DIFFERENT" }
            );
            out.push(json!({"model": model, "kind": "replay", "path": label, "batch": b, "q": q, "ok": eq}));
        }
    }

    // Verify K = 4 = plain greedy on gemv+fused (graphs on: decode and 5-token verify).
    set_path(&mut r, SmallStepPath::Gemv, true)?;
    r.backend_mut().set_graph_mode(GraphMode::On);
    for (k, pos, seqs) in spec_check(&mut r, 1, &[4])? {
        let eq = seqs == 1;
        ok &= eq;
        println!(
            "\ngemv+fused, batch 1, verify K {k} vs plain greedy: {pos}/{} tokens, {}",
            crate::harness::SPEC_GEN,
            if eq { "identical" } else { "DIFFERENT" }
        );
        out.push(json!({"model": model, "kind": "spec", "k": k, "tokens_matching": pos, "ok": eq}));
    }

    // Step times.
    let ctx_len = if cfg.num_layers > 30 { 512 } else { 256 };
    println!("\n| path | batch | graph ms/step | kernels/step | per layer | auto chose (gemv ms / cuBLAS ms per replay) |");
    println!("|---|---|---|---|---|---|");
    for (label, path, fused) in PATHS {
        set_path(&mut r, path, fused)?;
        r.backend_mut().set_graph_mode(GraphMode::On);
        for batch in [1usize, 2, 4, 8] {
            let t = time_steps(&mut r, batch, 1, ctx_len, 14)?;
            let bucket = CudaOptions::from_env()?.bucket_for(batch).unwrap_or(batch);
            let nodes = r.backend().graph_nodes(bucket, 1);
            let choice = r
                .backend()
                .small_step_choices()
                .into_iter()
                .find(|c| c.bucket == bucket && c.query_len == 1);
            let chose = match (&choice, path) {
                (Some(c), SmallStepPath::Auto) => {
                    format!("{} ({:.4} / {:.4})", c.chosen, c.gemv_ms, c.cublas_ms)
                }
                (None, SmallStepPath::Auto) => "no choice made".into(),
                _ => String::new(),
            };
            println!(
                "| {label} | {batch} | {:.4} | {} | {} | {chose} |",
                t * 1e3,
                nodes.map_or("?".into(), |n| n.to_string()),
                nodes.map_or("?".into(), |n| format!(
                    "{:.1}",
                    n as f64 / cfg.num_layers as f64
                )),
            );
            out.push(json!({
                "model": model, "kind": "time", "path": label, "batch": batch, "ctx": ctx_len,
                "ms": t * 1e3, "graph_nodes": nodes,
                "auto_choice": choice.map(|c| c.chosen),
                "auto_gemv_ms": choice.map(|c| c.gemv_ms), "auto_cublas_ms": choice.map(|c| c.cublas_ms),
            }));
        }
    }
    println!();
    Ok(ok)
}
