//! `gpu_check moe`: the CUDA mixture-of-experts op (`Backend::moe_ffn`,
//! crates/cuda/src/backend/moe.rs) against the CPU backend's, one layer at a time, then inside
//! a model under CUDA graphs. Runs whatever `WRING_CUDA_MOE` says (the op is the thing checked).
//!
//! The op: the MoE layers of the transformers-made tiny Qwen3-MoE and Mixtral
//! (tests/data/hf_tiny; with head_dim 16 those models cannot run on the CUDA attention, which
//! takes 64, 128 or 256) and full-size dummy layers of Qwen3-30B-A3B and Mixtral-8x7B. Every
//! weight is rounded to bf16 first and the input rows are bf16 values, so both backends hold
//! the same numbers and differ only by f32 rounding order: each token's output row must match
//! within 1e-3 (relative to the row), except tokens whose k-th and (k+1)-th router
//! probabilities are within 1e-5, which may route differently (counted; at most 5%). The same
//! step twice must give the same bits, and a token alone (or the step's tokens reversed) its
//! bits in the step. The full-size layers are also timed per step size against the bytes of
//! the experts their tokens route to.
//!
//! The model: dummy Qwen3-30B-A3B cut to 2 layers; decode and verify steps run eagerly in
//! their graph's layout, then captured and replayed: the logits bitwise equal and no capture
//! failed (a host copy, synchronisation or allocation inside the op would fail it).
//!
//! `MOE_CASES=tiny-qwen3_moe,graphs` runs only those parts (tiny-qwen3_moe, tiny-mixtral,
//! qwen3-30b-a3b, mixtral-8x7b, graphs).

use crate::harness::{
    gguf_runner_with, model_source, prefill_each, prompts, replays_match_eager, same, step, tables,
};
use anyhow::{ensure, Context, Result};
use std::time::Instant;
use wring_backend::cpu::{CpuBackend, CpuTensor};
use wring_backend::{Backend, Expert, HostMatrix, KvSpec, MoeLayer, MoeRouting};
use wring_cuda::{CudaBackend, CudaMatrix, CudaOptions, CudaVector, GraphMode};
use wring_model::ModelRunner;

/// One layer's weights on the host, every value a bf16 value.
struct HostLayer {
    router: Vec<f32>,
    /// Per expert: gate rows then up rows `[2I][H]`, and down `[H][I]`.
    experts: Vec<(Vec<f32>, Vec<f32>)>,
    routing: MoeRouting,
    hidden: usize,
    inter: usize,
}

fn to_bf16_values(v: &mut [f32]) {
    for x in v {
        *x = half::bf16::from_f32(*x).to_f32();
    }
}

/// The first mixture-of-experts layer of `model` (a Hugging Face directory or
/// `dummy:<shape>`), its matrices rounded to bf16 (the router stays f32 on both backends).
fn host_layer(model: &str) -> Result<HostLayer> {
    let (cfg, src) = model_source(model)?;
    let m = cfg.moe.clone().context("not a mixture-of-experts model")?;
    let l = (0..cfg.num_layers)
        .find(|&l| cfg.moe_layer(l).is_some())
        .context("no mixture-of-experts layer")?;
    let n = |s: &str| format!("blk.{l}.{s}");
    let (h, i) = (cfg.hidden_size, m.expert_intermediate_size);
    let router = src
        .matrix(&n("ffn_gate_inp.weight"), m.num_experts, h)?
        .data;
    let experts = (0..m.num_experts)
        .map(|e| -> Result<(Vec<f32>, Vec<f32>)> {
            let mut gu = src
                .matrix(&n(&format!("ffn_gate_exps.{e}.weight")), i, h)?
                .data;
            gu.extend(
                src.matrix(&n(&format!("ffn_up_exps.{e}.weight")), i, h)?
                    .data,
            );
            let mut down = src
                .matrix(&n(&format!("ffn_down_exps.{e}.weight")), h, i)?
                .data;
            to_bf16_values(&mut gu);
            to_bf16_values(&mut down);
            Ok((gu, down))
        })
        .collect::<Result<_>>()?;
    Ok(HostLayer {
        router,
        experts,
        routing: MoeRouting::softmax(m.top_k, m.norm_topk_prob),
        hidden: h,
        inter: i,
    })
}

fn upload<B: Backend>(b: &mut B, l: &HostLayer) -> Result<MoeLayer<B::Vector, B::Matrix>> {
    let router = b.upload_vector(&l.router)?;
    let experts = l
        .experts
        .iter()
        .map(|(gu, down)| -> Result<Expert<B::Matrix>> {
            Ok(Expert {
                gate_up: b.upload_matrix(HostMatrix {
                    rows: 2 * l.inter,
                    cols: l.hidden,
                    data: gu.clone(),
                })?,
                down: b.upload_matrix(HostMatrix {
                    rows: l.hidden,
                    cols: l.inter,
                    data: down.clone(),
                })?,
            })
        })
        .collect::<Result<_>>()?;
    let layer = MoeLayer {
        router,
        experts,
        routing: l.routing,
        correction_bias: None,
        shared: None,
    };
    b.prepare_moe(&layer)?;
    Ok(layer)
}

/// Whether a token's k-th and (k+1)-th router probabilities (float64) are within 1e-5.
fn near_tie(x: &[f32], l: &HostLayer) -> bool {
    let e = l.experts.len();
    let k = l.routing.top_k.min(e);
    if k >= e {
        return false;
    }
    let logits: Vec<f64> = l
        .router
        .chunks_exact(l.hidden)
        .map(|r| r.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum())
        .collect();
    let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut p: Vec<f64> = logits.iter().map(|v| (v - mx).exp()).collect();
    let s: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= s);
    p.sort_by(|a, b| b.total_cmp(a));
    p[k - 1] - p[k] < 1e-5
}

/// Experts the step's tokens route to (by the CPU rule on float32 logits).
fn experts_read(x: &[f32], l: &HostLayer) -> usize {
    let mut used = vec![false; l.experts.len()];
    for row in x.chunks_exact(l.hidden) {
        let logits: Vec<f32> = l
            .router
            .chunks_exact(l.hidden)
            .map(|r| r.iter().zip(row).map(|(a, b)| a * b).sum())
            .collect();
        for (e, _) in wring_backend::moe::route(&logits, l.routing, None) {
            used[e] = true;
        }
    }
    used.iter().filter(|&&u| u).count()
}

fn cuda_run(
    b: &mut CudaBackend,
    layer: &MoeLayer<CudaVector, CudaMatrix>,
    x: &[f32],
    hidden: usize,
) -> Result<Vec<f32>> {
    let t = x.len() / hidden;
    let xt = b.upload_activation(t, hidden, x)?;
    let out = b.moe_ffn(&xt, layer);
    let host = b.to_host(&out);
    drop(out);
    drop(xt);
    b.finish_step()?;
    ensure!(
        host.len() == x.len(),
        "moe_ffn returned {} values",
        host.len()
    );
    Ok(host)
}

/// Input rows of bf16 values with an RMS near 1 (a normed activation), seeded.
fn input(t: usize, h: usize, seed: u64) -> Vec<f32> {
    let mut z = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..t * h)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            let u = (z >> 40) as f32 / (1u64 << 24) as f32;
            half::bf16::from_f32((2.0 * u - 1.0) * 1.7).to_f32()
        })
        .collect()
}

/// Relative error of each row (max |Δ| over max |reference|).
fn row_errors(got: &[f32], want: &[f32], h: usize) -> Vec<f64> {
    got.chunks_exact(h)
        .zip(want.chunks_exact(h))
        .map(|(g, w)| {
            let scale = w.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-30);
            let d = g.iter().zip(w).fold(0f64, |m, (a, b)| {
                if a.is_finite() {
                    m.max((*a as f64 - *b as f64).abs())
                } else {
                    f64::INFINITY
                }
            });
            d / scale
        })
        .collect()
}

fn op_case(name: &str, model: &str, token_counts: &[usize], timed: bool) -> Result<bool> {
    let l = host_layer(model)?;
    let h = l.hidden;
    let mut cpu = CpuBackend::new(Default::default());
    let cpu_layer = upload(&mut cpu, &l)?;
    let opts = CudaOptions {
        graphs: GraphMode::Off,
        max_tokens: 512,
        ..CudaOptions::from_env()?
    };
    let mut gpu = CudaBackend::new(0, opts)?;
    let gpu_layer = upload(&mut gpu, &l)?;
    gpu.alloc_kv(KvSpec {
        layers: 1,
        num_blocks: 8,
        block_size: 16,
        n_kv_heads: 1,
        head_dim: 64,
    })?;
    let mut pass = true;
    for &t in token_counts {
        let x = input(t, h, t as u64 + 11);
        let want = cpu
            .moe_ffn(
                &CpuTensor {
                    rows: t,
                    cols: h,
                    data: x.clone(),
                },
                &cpu_layer,
            )
            .data;
        let got = cuda_run(&mut gpu, &gpu_layer, &x, h)?;
        let errs = row_errors(&got, &want, h);
        let (mut worst, mut ties, mut bad) = (0f64, 0usize, 0usize);
        for (r, e) in errs.iter().enumerate() {
            if near_tie(&x[r * h..(r + 1) * h], &l) {
                ties += 1;
                continue;
            }
            worst = worst.max(*e);
            if e.is_nan() || *e > 1e-3 {
                bad += 1;
            }
        }
        let again = cuda_run(&mut gpu, &gpu_layer, &x, h)?;
        let repeat = same(&got, &again);
        // Batch invariance: the first and last token alone, and the step's tokens reversed.
        let mut invariant = true;
        if t > 1 {
            for r in [0, t - 1] {
                let one = cuda_run(&mut gpu, &gpu_layer, &x[r * h..(r + 1) * h], h)?;
                invariant &= same(&one, &got[r * h..(r + 1) * h]);
            }
            let rev: Vec<f32> = x.chunks_exact(h).rev().flatten().copied().collect();
            let back = cuda_run(&mut gpu, &gpu_layer, &rev, h)?;
            let back: Vec<f32> = back.chunks_exact(h).rev().flatten().copied().collect();
            invariant &= same(&back, &got);
        }
        let ok = bad == 0 && ties * 20 <= t.max(20) && repeat && invariant;
        pass &= ok;
        let mut time = String::from("—");
        if timed {
            let xt = gpu.upload_activation(t, h, &x)?;
            let reps = 20;
            for _ in 0..3 {
                drop(gpu.moe_ffn(&xt, &gpu_layer));
            }
            let out = gpu.moe_ffn(&xt, &gpu_layer);
            let _ = gpu.to_host(&out);
            drop(out);
            let t0 = Instant::now();
            for _ in 0..reps - 1 {
                drop(gpu.moe_ffn(&xt, &gpu_layer));
            }
            let out = gpu.moe_ffn(&xt, &gpu_layer);
            let _ = gpu.to_host(&out);
            let s = t0.elapsed().as_secs_f64() / reps as f64;
            drop(out);
            drop(xt);
            gpu.finish_step()?;
            let read = experts_read(&x, &l);
            let bytes = read * 3 * h * l.inter * 2 + l.router.len() * 4;
            time = format!(
                "{:.1} µs, {read} experts, {:.0} GB/s",
                s * 1e6,
                bytes as f64 / s / 1e9
            );
        }
        println!(
            "| {name} | {t} | {worst:.2e} | {bad} | {ties} | {} | {} | {time} | {} |",
            if repeat { "same" } else { "DIFFERENT" },
            if t == 1 {
                "—"
            } else if invariant {
                "same"
            } else {
                "DIFFERENT"
            },
            if ok { "ok" } else { "FAIL" }
        );
    }
    Ok(pass)
}

/// Graph replay of a MoE model's decode and verify steps equals the eager step bitwise, and
/// every capture succeeds.
fn graphs_in_a_model() -> Result<bool> {
    let env = CudaOptions::from_env()?;
    let opts = CudaOptions {
        graphs: GraphMode::On,
        max_tokens: 1024,
        moe: true,
        ..env
    };
    let model = "dummy:qwen3-30b-a3b:2";
    let (mut r, _) = gguf_runner_with(model, opts, 1024)?;
    println!("\n## Graph replay vs eager, {model}, {}\n", r.device_name());
    println!("| step | eager (pad-only) = capture run = replay (bitwise) |");
    println!("|---|---|");
    let batch = 6; // padded to bucket 8
    let ps = prompts(batch);
    let tabs = tables(batch, 16);
    prefill_each(&mut r, &ps, &tabs)?;
    let mut ctx: Vec<usize> = ps.iter().map(Vec::len).collect();
    let mut all = true;
    for (b, q) in [(batch, 1usize), (batch, 5), (1, 1), (1, 13)] {
        let new: Vec<Vec<u32>> = (0..b)
            .map(|i| (0..q).map(|j| (500 + 11 * i + j) as u32).collect())
            .collect();
        let s = step(&new, &ctx[..b], &tabs[..b]);
        let (_, ok) = replays_match_eager(&mut r, &s)?;
        all &= ok;
        println!(
            "| batch {b} × q {q} | {} |",
            if ok { "identical" } else { "DIFFERENT" }
        );
        for c in ctx[..b].iter_mut() {
            *c += q;
        }
    }
    let (captured, replays, failed) = r.backend().graph_stats();
    println!("\nGraphs captured {captured}, replays {replays}, failed captures {failed}.");
    Ok(all && captured > 0 && failed == 0)
}

pub fn check() -> Result<()> {
    println!("## Mixture-of-experts op: CUDA vs CPU on the same bf16 weights and inputs\n");
    println!("| layer | tokens | worst row rel. error | rows > 1e-3 | near ties skipped | same step twice | alone / reversed = in step | time per layer | verdict |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let counts = [1, 2, 5, 8, 13, 64, 300];
    let only = crate::harness::env_list("MOE_CASES", "");
    let runs = |name: &str| only == [""] || only.iter().any(|o| o == name);
    let mut pass = true;
    for (name, model, timed) in [
        ("tiny-qwen3_moe", "tests/data/hf_tiny/qwen3_moe", false),
        ("tiny-mixtral", "tests/data/hf_tiny/mixtral", false),
        ("qwen3-30b-a3b", "dummy:qwen3-30b-a3b", true),
        ("mixtral-8x7b", "dummy:mixtral-8x7b", true),
    ] {
        if !runs(name) {
            continue;
        }
        match op_case(name, model, &counts, timed) {
            Ok(ok) => pass &= ok,
            Err(e) => {
                pass = false;
                println!("| {name} | — | error: {e:#} | | | | | | FAIL |");
            }
        }
    }
    if runs("graphs") {
        match graphs_in_a_model() {
            Ok(ok) => pass &= ok,
            Err(e) => {
                pass = false;
                println!("\ngraphs in a model: error: {e:#}");
            }
        }
    }
    println!("\nRESULT moe: {}", if pass { "PASS" } else { "FAIL" });
    Ok(())
}
