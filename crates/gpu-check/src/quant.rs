//! Quantized weights on the GPU (`gpu_check quant`, `gpu_check quant-bench`).

use crate::harness::{argmax, ids, model_source, prompts, step, tables, time_steps, BLOCK};
use anyhow::{Context, Result};
use serde_json::Value;
use std::time::Instant;
use wring_backend::cpu::CpuBackend;
use wring_backend::quant::{QuantMatrix, Scheme};
use wring_backend::{AttnShape, Backend, HostMatrix, KvSpec, RopeSpec, StepInput};
use wring_cuda::{CudaBackend, CudaOptions, GraphMode};
use wring_model::llama::LlamaRunner;
use wring_model::weights::WeightSource;
use wring_model::{ModelConfig, ModelRunner};

const SCHEMES: [Scheme; 3] = [Scheme::Fp8, Scheme::Int4, Scheme::Nvfp4];

/// The schemes `gpu_check quant` checks: `QUANT_SCHEMES` (e.g. "fp8"), else all three.
fn schemes() -> Result<Vec<Scheme>> {
    match std::env::var("QUANT_SCHEMES") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<Scheme>()
                    .map_err(|e| anyhow::anyhow!("QUANT_SCHEMES={v:?}: {e}"))
            })
            .collect(),
        _ => Ok(SCHEMES.to_vec()),
    }
}

/// The CPU backend with dense weights quantised at upload by the CUDA backend's rule
/// (`WRING_CUDA_WEIGHTS`): round to nearest, the vocabulary-sized matrices stay dense.
/// Matrices here are under 2^24 values, so the quantisation is the same single call.
struct QuantCpu {
    inner: CpuBackend,
    scheme: Scheme,
    vocab: usize,
}

type T = <CpuBackend as Backend>::Tensor;
type M = <CpuBackend as Backend>::Matrix;
type V = <CpuBackend as Backend>::Vector;

impl Backend for QuantCpu {
    type Tensor = T;
    type Matrix = M;
    type Vector = V;
    fn name(&self) -> String {
        format!("{} ({} at load)", self.inner.name(), self.scheme)
    }
    fn upload_matrix(&mut self, m: HostMatrix) -> Result<M> {
        let vocab_sized = self.vocab == 0 || m.rows >= self.vocab;
        self.vocab = self.vocab.max(m.rows);
        if vocab_sized {
            return self.inner.upload_matrix(m);
        }
        let q = QuantMatrix::quantize_rtn(self.scheme, m.rows, m.cols, &m.data, None, None)?;
        self.inner.upload_quantized(q)
    }
    fn upload_quantized(&mut self, m: QuantMatrix) -> Result<M> {
        self.inner.upload_quantized(m)
    }
    fn upload_vector(&mut self, v: &[f32]) -> Result<V> {
        self.inner.upload_vector(v)
    }
    fn alloc_kv(&mut self, spec: KvSpec) -> Result<()> {
        self.inner.alloc_kv(spec)
    }
    fn begin_step(&mut self, step: &StepInput) -> Result<()> {
        self.inner.begin_step(step)
    }
    fn embed(&mut self, table: &M) -> T {
        self.inner.embed(table)
    }
    fn rms_norm(&mut self, x: &T, w: &V, eps: f32) -> T {
        self.inner.rms_norm(x, w, eps)
    }
    fn add_assign(&mut self, x: &mut T, y: &T) {
        self.inner.add_assign(x, y)
    }
    fn linear(&mut self, x: &T, w: &M, bias: Option<&V>) -> T {
        self.inner.linear(x, w, bias)
    }
    fn rope(&mut self, x: &mut T, n_heads: usize, head_dim: usize, rope: &RopeSpec) {
        self.inner.rope(x, n_heads, head_dim, rope)
    }
    fn attention(&mut self, layer: usize, q: &T, k: &T, v: &T, shape: AttnShape) -> T {
        self.inner.attention(layer, q, k, v, shape)
    }
    fn silu_mul(&mut self, gate: &T, up: &T) -> T {
        self.inner.silu_mul(gate, up)
    }
    fn gather_logit_rows(&mut self, x: &T) -> T {
        self.inner.gather_logit_rows(x)
    }
    fn to_host(&mut self, x: &T) -> Vec<f32> {
        self.inner.to_host(x)
    }
    fn add_rms_norm(&mut self, x: &mut T, y: &T, w: &V, eps: f32) -> T {
        self.inner.add_rms_norm(x, y, w, eps)
    }
    fn argmax_rows(&mut self, logits: &T) -> Option<Vec<u32>> {
        self.inner.argmax_rows(logits)
    }
    fn next_input_for(&mut self, w: &M) {
        self.inner.next_input_for(w)
    }
    fn finish_step(&mut self) -> Result<()> {
        self.inner.finish_step()
    }
}

fn cuda(
    cfg: &ModelConfig,
    src: &WeightSource,
    weights: Option<Scheme>,
    fused: bool,
    blocks: usize,
) -> Result<LlamaRunner<CudaBackend>> {
    let opts = CudaOptions {
        weights,
        fused,
        graphs: GraphMode::On,
        // This check is what validates the quantized kernels.
        quant_kernels: true,
        ..CudaOptions::from_env()?
    };
    LlamaRunner::new(CudaBackend::new(0, opts)?, cfg.clone(), src, blocks, BLOCK)
}

/// ‖a − b‖ / ‖a‖ and max |a − b| (NaN counts as infinite).
fn diff(a: &[f32], b: &[f32]) -> (f64, f32) {
    let (mut num, mut den, mut maxd) = (0f64, 0f64, 0f32);
    for (x, y) in a.iter().zip(b) {
        let d = (x - y).abs();
        num += (d as f64).powi(2);
        den += (*x as f64).powi(2);
        maxd = maxd.max(if d.is_nan() { f32::INFINITY } else { d });
    }
    let rel = (num / den.max(1e-30)).sqrt();
    (if rel.is_nan() { f64::INFINITY } else { rel }, maxd)
}

/// Logits of every position of `prompt ++ forced` (teacher-forced): one prefill step of
/// the prompt (its last row), then one decode step per forced token.
fn forced(r: &mut dyn ModelRunner, prompt: &[u32], forced: &[u32]) -> Result<Vec<Vec<f32>>> {
    let table = tables(1, (prompt.len() + forced.len()).div_ceil(BLOCK) + 1);
    let mut pre = step(&[prompt.to_vec()], &[0], &table);
    pre.logit_rows = vec![prompt.len() - 1];
    let mut out = vec![r.forward(&pre)?.data];
    for (i, &t) in forced.iter().enumerate() {
        out.push(
            r.forward(&step(&[vec![t]], &[prompt.len() + i], &table))?
                .data,
        );
    }
    Ok(out)
}

/// One step holding every prompt (a large T: the dequantising path), logits of each
/// prompt's last position.
fn batched_prefill(r: &mut dyn ModelRunner, ps: &[Vec<u32>]) -> Result<Vec<f32>> {
    let tabs = tables(ps.len(), 16);
    let mut s = step(ps, &vec![0; ps.len()], &tabs);
    s.logit_rows = (0..ps.len())
        .map(|i| ps[..=i].iter().map(Vec::len).sum::<usize>() - 1)
        .collect();
    Ok(r.forward(&s)?.data)
}

/// Free-running greedy ids after `prompt`.
fn greedy(r: &mut dyn ModelRunner, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
    let table = tables(1, (prompt.len() + n).div_ceil(BLOCK) + 1);
    let mut pre = step(&[prompt.to_vec()], &[0], &table);
    pre.logit_rows = vec![prompt.len() - 1];
    let mut out = vec![argmax(&r.forward(&pre)?.data)];
    while out.len() < n {
        let ctx = prompt.len() + out.len() - 1;
        let l = r.forward(&step(&[vec![*out.last().unwrap()]], &[ctx], &table))?;
        out.push(argmax(&l.data));
    }
    Ok(out)
}

pub fn check(model: &str, golden: Option<&str>) -> Result<()> {
    let (cfg, src) = model_source(model)?;
    // (prompt, the f32 reference's greedy ids when a golden file is given)
    let cases: Vec<(Vec<u32>, Vec<u32>)> = match golden {
        Some(g) => std::fs::read_to_string(g)
            .with_context(|| format!("reading {g}"))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let rec: Value = serde_json::from_str(l)?;
                Ok((ids(&rec["prompt_ids"]), ids(&rec["greedy_ids"])))
            })
            .collect::<Result<_>>()?,
        None => prompts(4).into_iter().map(|p| (p, vec![])).collect(),
    };
    let gen = 24;
    let mut bf = cuda(&cfg, &src, None, true, 512)?;
    println!(
        "## Quantized weights vs the same scheme on the CPU ({model}), {}\n",
        bf.device_name()
    );
    // bf16 greedy continuations: the sequences every scheme is teacher-forced on.
    let seqs: Vec<Vec<u32>> = cases
        .iter()
        .map(|(p, _)| greedy(&mut bf, p, gen))
        .collect::<Result<_>>()?;
    let bf_logits: Vec<Vec<Vec<f32>>> = cases
        .iter()
        .zip(&seqs)
        .map(|((p, _), s)| forced(&mut bf, p, &s[..gen - 1]))
        .collect::<Result<_>>()?;
    drop(bf);
    let ps: Vec<Vec<u32>> = cases.iter().map(|c| c.0.clone()).collect();
    println!("Teacher-forced on the bf16 CUDA greedy continuation ({gen} tokens per prompt, {} prompts): prefill of one prompt (T ≤ 32: the tensor-core kernel for int4/nvfp4) then T = 1 decode steps; plus one step of all prompts together (T = {}: dequantise + cuBLAS). CUDA runs unfused here (the CPU quantises q, k, v, gate, up one by one); `fused` is the default configuration (stacked matrices quantised together: identical weights for fp8/int4, one nvfp4 global scale per stack).\n",
        cases.len(), ps.iter().map(Vec::len).sum::<usize>());
    println!("| scheme | CUDA vs CPU ‖Δ‖/‖ref‖ (worst step) | max abs Δ | argmax = CPU | batched prefill ‖Δ‖/‖ref‖ | fused vs unfused ‖Δ‖/‖ref‖ | fused vs bf16 ‖Δ‖/‖ref‖ | argmax = bf16 greedy | argmax = f32 golden |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut pass = true;
    for scheme in schemes()? {
        let row = || -> Result<bool> {
            let t0 = Instant::now();
            let mut cpu = LlamaRunner::new(
                QuantCpu {
                    inner: CpuBackend::new(Default::default()),
                    scheme,
                    vocab: 0,
                },
                cfg.clone(),
                &src,
                512,
                BLOCK,
            )?;
            let mut gpu = cuda(&cfg, &src, Some(scheme), false, 512)?;
            let mut fused = cuda(&cfg, &src, Some(scheme), true, 512)?;
            let wbytes = gpu.backend().weight_bytes();
            let (mut worst, mut maxd, mut agree_cpu, mut agree_bf, mut total) =
                (0f64, 0f32, 0usize, 0usize, 0usize);
            let (mut worst_fused, mut agree_gold, mut total_gold) = (0f64, 0usize, 0usize);
            let mut worst_bf = 0f64;
            for (ci, (p, gold)) in cases.iter().enumerate() {
                let f = &seqs[ci][..gen - 1];
                let (a, b, c) = (
                    forced(&mut cpu, p, f)?,
                    forced(&mut gpu, p, f)?,
                    forced(&mut fused, p, f)?,
                );
                for (i, ((x, y), z)) in a.iter().zip(&b).zip(&c).enumerate() {
                    let (rel, m) = diff(x, y);
                    worst = worst.max(rel);
                    maxd = maxd.max(m);
                    worst_fused = worst_fused.max(diff(y, z).0);
                    agree_cpu += (argmax(x) == argmax(y)) as usize;
                    agree_bf += (argmax(z) == seqs[ci][i]) as usize;
                    total += 1;
                    worst_bf = worst_bf.max(diff(&bf_logits[ci][i], z).0);
                }
                // The f32 golden continuation, teacher-forced on its own ids.
                if !gold.is_empty() {
                    let n = gold.len();
                    let g = forced(&mut fused, p, &gold[..n - 1])?;
                    agree_gold += g.iter().zip(gold).filter(|(l, &t)| argmax(l) == t).count();
                    total_gold += n;
                }
            }
            let (pa, pb) = (
                batched_prefill(&mut cpu, &ps)?,
                batched_prefill(&mut gpu, &ps)?,
            );
            let (prel, _) = diff(&pa, &pb);
            let tol = 5e-2;
            let ok = worst < tol && prel < tol && agree_cpu * 100 >= total * 95;
            println!(
            "| {scheme} ({:.1} MB) | {worst:.2e} | {maxd:.3} | {agree_cpu}/{total} | {prel:.2e} | {worst_fused:.2e} | {worst_bf:.2e} | {agree_bf}/{total} | {} |",
            wbytes as f64 / 1e6,
            if total_gold > 0 {
                format!("{agree_gold}/{total_gold}")
            } else {
                "-".into()
            }
        );
            eprintln!("{scheme}: {:.1} s", t0.elapsed().as_secs_f64());
            Ok(ok)
        };
        match row() {
            Ok(ok) => pass &= ok,
            Err(e) => {
                pass = false;
                println!("| {scheme} | error: {e:#} | | | | | | | |");
            }
        }
    }
    println!("\nPass: ‖Δ‖/‖ref‖ < 5e-2 on every step and the batched prefill, argmax = CPU on ≥ 95 % of steps (the CPU runs the same quantized weights in f32; CUDA rounds GEMM inputs and dequantised weights to bf16, and fp8 quantises bf16 rather than f32 activations).");
    println!("\nRESULT quant: {}", if pass { "PASS" } else { "FAIL" });
    Ok(())
}

/// `gpu_check quant-bench [OUT]`: dummy llama-3.1-8b per weight scheme (QUANT_BENCH_SCHEMES,
/// default int4,fp8,nvfp4,bf16), each loaded once and timed (graph replay) per linear path
/// (QUANT_BENCH_VARIANTS: `default` = as loaded, `gemv` = the gemv kernels for steps of <= 8
/// tokens, `off` = cuBLAS / quantized GEMMs only, `multi` / `tensor-core` = int4/nvfp4 steps
/// of 9 to 64 tokens on the multi-tile gemv / the tensor-core kernel, `multi-fused` = multi
/// with the norm fused into those steps' gemv too) and step shape (QUANT_BENCH_SHAPES, default
/// 1x1,8x1,32x1,32x5), against each scheme's own HBM roofline. OUT: a `.json` path, or a
/// folder for `quant.json` — one row per (scheme, shape, variant), rewritten after each scheme
/// so a call cut short keeps what finished. QUANT_BENCH_GATE=PREFIX: after loading scheme X,
/// wait for PREFIX.X.go before timing and create PREFIX.X.done after, so several schemes can
/// load in parallel processes while their timings run one at a time.
pub fn bench(out: Option<&str>) -> Result<()> {
    let json_out = out.map(|o| {
        if o.ends_with(".json") {
            std::path::PathBuf::from(o)
        } else {
            std::path::Path::new(o).join("quant.json")
        }
    });
    let cfg = ModelConfig::named_shape("llama-3.1-8b").context("shape")?;
    println!(
        "## Dummy llama-3.1-8b per weight scheme\n\nRoofline = (resident weight bytes but the bf16 embedding table + K/V read) / the device-to-device copy bandwidth measured just before each scheme's timings (after its load: a copy measured while other processes load runs slow); ctx 512 per sequence, graphs on.\n"
    );
    println!("| weights | variant | resident GB | load s | batch × q | step ms | tok/s | roofline ms | % of roofline | gemv launches |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let (l, kvd) = (cfg.num_layers, cfg.num_kv_heads * cfg.head_dim);
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.into());
    let order = env("QUANT_BENCH_SCHEMES", "int4,fp8,nvfp4,bf16");
    let variants = env("QUANT_BENCH_VARIANTS", "default");
    let shapes: Vec<(usize, usize)> = env("QUANT_BENCH_SHAPES", "1x1,8x1,32x1,32x5")
        .split(',')
        .filter_map(|s| {
            let (b, q) = s.trim().split_once('x')?;
            Some((b.parse().ok()?, q.parse().ok()?))
        })
        .collect();
    let gate = std::env::var("QUANT_BENCH_GATE").ok();
    let mut rows = Vec::new();
    for name in order.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let scheme = wring_cuda::qweights::parse_weights(name)?;
        let mut one = || -> Result<()> {
            let t0 = Instant::now();
            // KV blocks for the largest batch at ctx 512 plus the timed steps (not the whole
            // GPU: several schemes may be resident at once under QUANT_BENCH_GATE).
            let max_batch = shapes.iter().map(|s| s.0).max().unwrap_or(1);
            let blocks = max_batch * (512 / BLOCK + 16) + 64;
            let mut r = cuda(&cfg, &WeightSource::Dummy { seed: 0 }, scheme, true, blocks)?;
            let load = t0.elapsed().as_secs_f64();
            if let Some(g) = &gate {
                std::fs::write(format!("{g}.{name}.loaded"), format!("{load:.1}"))?;
                let go = format!("{g}.{name}.go");
                let t = Instant::now();
                while !std::path::Path::new(&go).exists() {
                    anyhow::ensure!(t.elapsed().as_secs() < 900, "no {go} within 900 s");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
            let bw = wring_cuda::measure_copy_bandwidth(2 << 30)?;
            eprintln!("{name}: device-to-device copy {:.0} GB/s", bw / 1e9);
            let wb = r.backend().weight_bytes() as f64;
            // The embedding table is resident but only its looked-up rows are read per step.
            let streamed = wb - (cfg.vocab_size * cfg.hidden_size * 2) as f64;
            let ctx = 512;
            let loaded = (
                r.backend().options().small_linear_max_t,
                r.backend().options().gemv_4bit_max_t,
            );
            for variant in variants.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (small, four_bit) = match variant {
                    "default" => loaded,
                    "gemv" => (8, 8),
                    "off" => (0, 0),
                    "multi" | "multi-fused" | "tensor-core" => {
                        (loaded.0, wring_cuda::GEMV_4BIT_LIMIT)
                    }
                    other => anyhow::bail!("QUANT_BENCH_VARIANTS: unknown variant {other:?}"),
                };
                r.backend_mut().set_gemv_max_t(small, four_bit);
                // multi / tensor-core: 4-bit steps of 9 to 64 tokens forced to one path.
                r.backend_mut().set_multi_fused_norm(match variant {
                    "multi-fused" => true,
                    "multi" => false,
                    _ => CudaOptions::from_env()?.multi_fused_norm,
                });
                r.backend_mut().set_multi_gemv_path(match variant {
                    "multi" | "multi-fused" => wring_cuda::MultiGemvPath::Gemv,
                    "tensor-core" => wring_cuda::MultiGemvPath::TensorCore,
                    _ => CudaOptions::from_env()?.multi_gemv,
                });
                // gemv / off force the dense path too; default keeps the environment's.
                r.backend_mut().set_small_step_path(match variant {
                    "gemv" => wring_cuda::SmallStepPath::Gemv,
                    "off" => wring_cuda::SmallStepPath::Cublas,
                    _ => CudaOptions::from_env()?.small_step_path,
                });
                for &(batch, q) in &shapes {
                    let launches = r.backend().gemv_launches();
                    let g = time_steps(&mut r, batch, q, ctx, 12)?;
                    let gemv = r.backend().gemv_launches() - launches;
                    let kv_bytes = (batch * (ctx + 6 * q) * l * 2 * kvd * 2) as f64;
                    let roof = (streamed + kv_bytes) / bw;
                    println!(
                        "| {name} | {variant} | {:.2} | {load:.0} | {batch} × {q} | {:.3} | {:.0} | {:.3} | {:.0} % | {gemv} |",
                        wb / 1e9,
                        g * 1e3,
                        (batch * q) as f64 / g,
                        roof * 1e3,
                        100.0 * roof / g
                    );
                    rows.push(serde_json::json!({
                        "model": "llama-3.1-8b", "weights": name, "batch": batch, "q": q,
                        "ms": g * 1e3, "roofline_ms": roof * 1e3, "variant": variant,
                        "gemv_launches": gemv, "load_s": load,
                    }));
                }
            }
            let (captured, replays, failed) = r.backend().graph_stats();
            eprintln!("{name}: graphs captured {captured}, replays {replays}, failed {failed}");
            Ok(())
        };
        if let Err(e) = one() {
            println!("| {name} | error: {e:#} | | | | | | | | |");
        }
        if let Some(g) = &gate {
            std::fs::write(format!("{g}.{name}.done"), "")?;
        }
        if let Some(path) = &json_out {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, serde_json::to_string_pretty(&rows)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if let Some(path) = &json_out {
        println!("\nWrote {}.", path.display());
    }
    Ok(())
}

/// `gpu_check fp8-fused MODEL`: FP8 weights quantised at load, the fused activation path
/// (norm / SiLU·mul write E4M3, the next kernel rescales; the default) against
/// `WRING_CUDA_FP8_FUSED=off` (a quantise and a rescale launch around every FP8 GEMM),
/// with fused and with split projections: prefill + teacher-forced decode logits (decode
/// steps replay a captured graph from the third on) and one batched prefill step. The two
/// do the same arithmetic, so the logits should be identical; PASS within 1e-3.
pub fn fp8_fused_check(model: &str) -> Result<()> {
    let (cfg, src) = model_source(model)?;
    let make = |fused_act: bool, fused_proj: bool| -> Result<LlamaRunner<CudaBackend>> {
        let opts = CudaOptions {
            weights: Some(Scheme::Fp8),
            fused: fused_proj,
            fp8_fused: fused_act,
            graphs: GraphMode::On,
            quant_kernels: true,
            ..CudaOptions::from_env()?
        };
        LlamaRunner::new(CudaBackend::new(0, opts)?, cfg.clone(), &src, 512, BLOCK)
    };
    let ps = prompts(4);
    let forced_ids: Vec<u32> = (0..16).map(|i| 300 + 17 * i).collect();
    println!("## FP8 W8A8: fused activation path vs quantise + GEMM + rescale ({model})\n");
    println!("| projections | steps | identical | worst ‖Δ‖/‖ref‖ | max abs Δ |");
    println!("|---|---|---|---|---|");
    let mut pass = true;
    for proj in [true, false] {
        let mut fused = make(true, proj)?;
        let mut old = make(false, proj)?;
        let (mut worst, mut maxd, mut identical, mut n) = (0f64, 0f32, true, 0usize);
        let mut cmp = |a: &[f32], b: &[f32]| {
            let (rel, m) = diff(b, a);
            worst = worst.max(rel);
            maxd = maxd.max(m);
            identical &= crate::harness::same(a, b);
            n += 1;
        };
        for p in &ps {
            let (a, b) = (
                forced(&mut fused, p, &forced_ids)?,
                forced(&mut old, p, &forced_ids)?,
            );
            for (x, y) in a.iter().zip(&b) {
                cmp(x, y);
            }
        }
        let big: Vec<Vec<u32>> = prompts(12);
        let (a, b) = (
            batched_prefill(&mut fused, &big)?,
            batched_prefill(&mut old, &big)?,
        );
        cmp(&a, &b);
        pass &= worst <= 1e-3 && a.iter().all(|v| v.is_finite());
        println!(
            "| {} | {n} | {} | {worst:.2e} | {maxd:.2e} |",
            if proj {
                "fused q|k|v, gate|up"
            } else {
                "split"
            },
            if identical { "yes (bitwise)" } else { "no" }
        );
        let (captured, replays, failed) = fused.backend().graph_stats();
        eprintln!("fused path: graphs captured {captured}, replays {replays}, failed {failed}");
    }
    println!(
        "\nRESULT fp8-fused: {} (‖Δ‖/‖ref‖ ≤ 1e-3 on every step)",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(())
}

/// One quantized GEMM alone (`gpu_check qgemm`): for each scheme and token count, the CUDA
/// backend's `linear` on bf16 activations against a host reference computed from the very
/// bf16 values the kernel read (read back) and the scheme's dequantised weights; fp8 also
/// quantises those activations per row to E4M3 on the host, as the W8A8 path does. A few
/// outlier input channels (×40) mimic SmolLM2's activations. Isolates a kernel from the
/// 30-layer amplification of `gpu_check quant`.
pub fn gemm_check() -> Result<()> {
    use wring_backend::quant::{e4m3_to_f32, f32_to_e4m3, E4M3_MAX};
    let (k, n) = (576usize, 1536usize);
    let noise = |i: usize| {
        let h = (i as u64)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((h >> 33) as f64 / (1u64 << 31) as f64 - 0.5) as f32
    };
    let w: Vec<f32> = (0..n * k).map(|i| 0.1 * noise(i)).collect();
    let max_t = 512;
    let table: Vec<f32> = (0..max_t * k)
        .map(|i| noise(i + 7_777_777) * if (i % k) % 97 == 0 { 40.0 } else { 1.0 })
        .collect();
    println!("## One GEMM ({n}×{k} weights) vs a host reference on the same bf16 activations\n");
    println!("| scheme | tokens | ‖Δ‖/‖ref‖ | max abs Δ | max abs ref |");
    println!("|---|---|---|---|---|");
    let mut pass = true;
    for scheme in [
        None,
        Some(Scheme::Fp8),
        Some(Scheme::Int4),
        Some(Scheme::Nvfp4),
    ] {
        let opts = CudaOptions {
            quant_kernels: true,
            graphs: GraphMode::Off,
            ..CudaOptions::from_env()?
        };
        // Steps of up to this many tokens run the gemv kernels: fp8 weights with bf16
        // activations there (no E4M3 activations).
        let gemv_t = if opts.small_step_path == wring_cuda::SmallStepPath::Gemv {
            opts.small_linear_max_t.min(8)
        } else {
            0
        };
        let mut b = CudaBackend::new(0, opts)?;
        let (wm, wref) = match scheme {
            None => (
                b.upload_matrix(HostMatrix {
                    rows: n,
                    cols: k,
                    data: w.clone(),
                })?,
                // bf16 weights: the reference rounds them the same way.
                w.iter()
                    .map(|&v| half::bf16::from_f32(v).to_f32())
                    .collect::<Vec<f32>>(),
            ),
            Some(s) => {
                let q = QuantMatrix::quantize_rtn(s, n, k, &w, None, None)?;
                let d = q.dequantize();
                (b.upload_quantized(q)?, d)
            }
        };
        let tm = b.upload_matrix(HostMatrix {
            rows: max_t,
            cols: k,
            data: table.clone(),
        })?;
        let ones = b.upload_vector(&vec![1.0; k])?;
        b.alloc_kv(KvSpec {
            layers: 1,
            num_blocks: max_t.div_ceil(BLOCK) + 2,
            block_size: BLOCK,
            n_kv_heads: 1,
            head_dim: 64,
        })?;
        let name = scheme.map_or("bf16".to_string(), |s| s.to_string());
        for t in [1usize, 2, 3, 5, 8, 16, 17, 32, 33, 64, 128, 512] {
            let toks: Vec<u32> = (0..t as u32).collect();
            b.begin_step(&step(&[toks], &[0], &tables(1, t.div_ceil(BLOCK) + 1)))?;
            let x = b.embed(&tm);
            let xb = b.rms_norm(&x, &ones, 1e-5);
            let y = b.linear(&xb, &wm, None);
            let xh = b.to_host(&xb);
            let yh = b.to_host(&y);
            b.finish_step()?;
            let mut reference = vec![0f32; t * n];
            for r in 0..t {
                let mut xr: Vec<f64> = xh[r * k..(r + 1) * k].iter().map(|&v| v as f64).collect();
                if scheme == Some(Scheme::Fp8) && t > gemv_t {
                    let amax = xr.iter().fold(0f64, |m, v| m.max(v.abs())) as f32;
                    let s = if amax > 0.0 { amax / E4M3_MAX } else { 1.0 };
                    let inv = 1.0 / s;
                    for v in xr.iter_mut() {
                        *v = e4m3_to_f32(f32_to_e4m3(*v as f32 * inv)) as f64 * s as f64;
                    }
                }
                for o in 0..n {
                    let wr = &wref[o * k..(o + 1) * k];
                    reference[r * n + o] =
                        xr.iter().zip(wr).map(|(a, &b)| a * b as f64).sum::<f64>() as f32;
                }
            }
            let (rel, maxd) = diff(&reference, &yh);
            let maxref = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
            pass &= rel < 1e-2;
            println!("| {name} | {t} | {rel:.2e} | {maxd:.4} | {maxref:.3} |");
        }
    }
    println!(
        "\nRESULT qgemm: {} (‖Δ‖/‖ref‖ < 1e-2 for every scheme and token count)",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(())
}
