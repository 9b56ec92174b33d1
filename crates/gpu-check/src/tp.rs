//! `gpu_check tp ...`: tensor parallelism on several GPUs, run on the device by
//! scripts/gpu/tp_check.sh. Prints Markdown; every check ends with a `RESULT name:
//! PASS|FAIL` line. (Part of gpu_check so one binary travels to the device.)
//!
//! `gpu_check tp logits SOURCE N` — TP=N vs TP=1 logits (bf16 tolerance) and greedy ids on a
//!   prefill, decode and verify-shaped steps. SOURCE: a .gguf, `dummy` (SmolLM2-135M
//!   shape), `dummy-8b` (llama-3.1-8b) or any named shape.
//! `gpu_check tp spec SOURCE N` — greedy verify steps (1 + K, oracle drafts with wrong
//!   tokens) emit exactly the plain greedy tokens at TP=N, K ∈ {4, 8}.
//! `gpu_check tp steps OUT_DIR SHAPE:TP...` — graph-replay step times of decode (batch 1,
//!   32) and verify (32 × (1 + K), K ∈ {4, 8}) against the HBM roofline of the ranks'
//!   GPUs (copy bandwidth measured here), and the all-reduce time of each step measured
//!   on its own; writes OUT_DIR/tp.json.
//! `gpu_check tp allreduce N TOKENS HIDDEN LAYERS` — the all-reduce time of one step alone.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;
use wring_backend::{SeqInput, StepInput};
use wring_cuda::{CudaBackend, CudaOptions};
use wring_model::shard::ShardPlan;
use wring_model::weights::WeightSource;
use wring_model::{ModelConfig, ModelRunner, ModelWeights};
use wring_runtime::cuda_ranks::cuda_ranks;

use crate::harness::accept_greedy;

const BLOCK: usize = 16;

/// `args[1]` is the tp subcommand (`args[0]` is "tp").
pub fn run(args: &[String]) -> Result<()> {
    let arg = |i: usize| -> Result<&str> {
        args.get(i)
            .map(String::as_str)
            .context("missing argument (see the usage in crates/gpu-check/src/tp.rs)")
    };
    match arg(1).unwrap_or("") {
        "logits" => logits(arg(2)?, arg(3)?.parse()?),
        "spec" => spec(arg(2)?, arg(3)?.parse()?),
        "steps" => steps(arg(2)?, &args[3..]),
        "allreduce" => {
            let n: usize = arg(2)?.parse()?;
            let (tokens, hidden, layers): (usize, usize, usize) =
                (arg(3)?.parse()?, arg(4)?.parse()?, arg(5)?.parse()?);
            let ordinals: Vec<usize> = (0..n).collect();
            let t = wring_cuda::nccl_bench::time_step_all_reduces(
                &ordinals,
                tokens * hidden,
                2 * layers + 1,
                20,
            )?;
            println!(
                "{n} ranks, {} all-reduces of {tokens} x {hidden} f32: {:.3} ms per step",
                2 * layers + 1,
                t * 1e3
            );
            Ok(())
        }
        _ => bail!("usage: gpu_check tp logits SOURCE N | spec SOURCE N | steps OUT_DIR SHAPE:TP... | allreduce N TOKENS HIDDEN LAYERS"),
    }
}

/// Configuration and weights of SOURCE (see the usage).
fn source(s: &str) -> Result<ModelWeights> {
    let shape = match s {
        "dummy" => "smollm2-135m",
        "dummy-8b" => "llama-3.1-8b",
        other => other,
    };
    if let Some(cfg) = ModelConfig::named_shape(shape) {
        return Ok(ModelWeights::new(cfg, WeightSource::Dummy { seed: 0 }));
    }
    let m = wring_model::load_model(&wring_model::ModelSpec {
        model: Some(s.into()),
        ..Default::default()
    })?;
    Ok(m.into_weights())
}

/// TP=1: the plain single-GPU runner on GPU 0; TP>1: ranks on GPUs 0..tp.
fn open(w: &Arc<ModelWeights>, tp: usize, num_blocks: usize) -> Result<Box<dyn ModelRunner>> {
    let cuda = CudaOptions::from_env()?;
    if tp == 1 {
        let backend = CudaBackend::new(0, cuda)?;
        let shard = ShardPlan::SINGLE.shard(&w.config)?;
        return Ok(Box::new(w.rank_runner(backend, shard, num_blocks, BLOCK)?));
    }
    Ok(Box::new(cuda_ranks(
        w.clone(),
        0,
        tp,
        num_blocks,
        BLOCK,
        cuda,
    )?))
}

/// One step of `new[i]` tokens after `ctx[i]` cached ones per sequence, logits for every
/// new token.
fn step(new: &[Vec<u32>], ctx: &[usize], tables: &[Vec<u32>]) -> StepInput {
    let mut s = StepInput::default();
    for (i, toks) in new.iter().enumerate() {
        let start = s.tokens.len();
        s.seqs.push(SeqInput {
            query_start: start,
            query_len: toks.len(),
            context_len: ctx[i] + toks.len(),
            block_table: tables[i].clone(),
            prompt_len: 0,
        });
        s.tokens.extend_from_slice(toks);
        s.positions
            .extend((ctx[i]..ctx[i] + toks.len()).map(|p| p as u32));
        s.logit_rows.extend(start..start + toks.len());
    }
    s
}

fn tables(n: usize, blocks_each: usize, first: u32) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            let s = first + (i * blocks_each) as u32;
            (s..s + blocks_each as u32).collect()
        })
        .collect()
}

fn prompts(n: usize, len: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            (0..len + 3 * i)
                .map(|j| (1000 + 37 * i + 11 * j) as u32 % 30000)
                .collect()
        })
        .collect()
}

fn argmax(r: &[f32]) -> usize {
    (0..r.len()).fold(0, |b, i| if r[i] > r[b] { i } else { b })
}

fn logits(src: &str, tp: usize) -> Result<()> {
    let w = Arc::new(source(src)?);
    let mut one = open(&w, 1, 512)?;
    let mut split = open(&w, tp, 512)?;
    println!(
        "## TP={tp} vs TP=1 logits ({src}), {}\n",
        split.device_name()
    );
    println!("| step | rows | ‖Δ‖/‖ref‖ | max abs Δ | argmax agree | greedy ids agree |");
    println!("|---|---|---|---|---|---|");
    let ps = prompts(3, 40);
    let tabs = tables(3, 8, 0);
    let mut s = step(&ps, &[0, 0, 0], &tabs);
    let mut ctx: Vec<usize> = ps.iter().map(Vec::len).collect();
    let (mut worst, mut agree_all, mut rows_all, mut ids_all) = (0f64, 0, 0, true);
    for n in 0..8 {
        // Each shape twice: the second run of a uniform shape is captured and replayed.
        for _ in 0..2 {
            let (a, b) = (one.forward(&s)?, split.forward(&s)?);
            let (mut num, mut den, mut maxd) = (0f64, 0f64, 0f32);
            for (x, y) in a.data.iter().zip(&b.data) {
                num += ((x - y) as f64).powi(2);
                den += (*x as f64).powi(2);
                maxd = maxd.max((x - y).abs());
            }
            let rel = (num / den.max(1e-30)).sqrt();
            worst = worst.max(if rel.is_finite() { rel } else { f64::INFINITY });
            let v = a.vocab;
            let agree = (0..a.rows)
                .filter(|&r| {
                    argmax(&a.data[r * v..(r + 1) * v]) == argmax(&b.data[r * v..(r + 1) * v])
                })
                .count();
            let ids_a = one.forward_greedy(&s)?.unwrap_or_default();
            let ids_b = split.forward_greedy(&s)?.unwrap_or_default();
            let ids_same = ids_a.iter().zip(&ids_b).filter(|(x, y)| x == y).count();
            ids_all &= ids_same * 100 >= ids_a.len() * 95;
            agree_all += agree;
            rows_all += a.rows;
            println!(
                "| {n} | {} | {rel:.2e} | {maxd:.4} | {agree}/{} | {ids_same}/{} |",
                a.rows,
                a.rows,
                ids_a.len()
            );
        }
        // Next: 3 decode steps, then verify-shaped steps of 5 tokens.
        let q = if n < 3 { 1 } else { 5 };
        let new: Vec<Vec<u32>> = (0..3)
            .map(|i| (0..q).map(|j| (300 + 17 * i + 5 * n + j) as u32).collect())
            .collect();
        s = step(&new, &ctx, &tabs);
        ctx.iter_mut().for_each(|c| *c += q);
    }
    let pass = worst < 2e-2 && agree_all * 100 >= rows_all * 95 && ids_all;
    println!("\nWorst relative error {worst:.2e} (bf16: 1e-3..1e-2 expected); argmax {agree_all}/{rows_all}.");
    println!(
        "\nRESULT logits-tp{tp}: {}",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(())
}

fn spec(src: &str, tp: usize) -> Result<()> {
    let w = Arc::new(source(src)?);
    let mut r = open(&w, tp, 4096)?;
    println!(
        "## Greedy verify vs plain decode at TP={tp} ({src}), {}\n",
        r.device_name()
    );
    let batch = 6; // padded to a graph bucket of 8
    let gen = 48;
    let ps = prompts(batch, 24);
    let tabs = tables(batch, 16, 0);
    let first = {
        let mut s = step(&ps, &vec![0; batch], &tabs);
        s.logit_rows = (0..batch)
            .map(|i| ps[..=i].iter().map(Vec::len).sum::<usize>() - 1)
            .collect();
        r.forward_greedy(&s)?.context("greedy ids")?
    };
    let mut plain: Vec<Vec<u32>> = first.iter().map(|&t| vec![t]).collect();
    let mut ctx: Vec<usize> = ps.iter().map(Vec::len).collect();
    while plain[0].len() < gen {
        let new: Vec<Vec<u32>> = plain.iter().map(|p| vec![*p.last().unwrap()]).collect();
        let mut s = step(&new, &ctx, &tabs);
        s.logit_rows = (0..batch).collect();
        let out = r.forward_greedy(&s)?.context("greedy ids")?;
        for i in 0..batch {
            plain[i].push(out[i]);
            ctx[i] += 1;
        }
    }
    let mut pass = true;
    println!("| verify K | token match vs plain greedy | identical sequences |");
    println!("|---|---|---|");
    for (round_k, k) in [4usize, 8].into_iter().enumerate() {
        let tabs2 = tables(batch, 16, (200 * (round_k + 1)) as u32);
        for (i, p) in ps.iter().enumerate() {
            r.forward(&step(std::slice::from_ref(p), &[0], &tabs2[i..i + 1]))?;
        }
        let mut spec: Vec<Vec<u32>> = (0..batch).map(|i| vec![plain[i][0]]).collect();
        let mut ctx_s: Vec<usize> = ps.iter().map(Vec::len).collect();
        let mut round = 0;
        while spec.iter().any(|s| s.len() < gen) {
            round += 1;
            // Oracle drafts with one wrong token in a third of them.
            let new: Vec<Vec<u32>> = (0..batch)
                .map(|i| {
                    let at = spec[i].len();
                    let mut d = vec![*spec[i].last().unwrap()];
                    for j in 0..k {
                        let truth = plain[i].get(at + j).copied().unwrap_or(7);
                        let wrong = (round + i + j) % 3 == 0 && j == k / 2;
                        d.push(if wrong { truth ^ 1 } else { truth });
                    }
                    d
                })
                .collect();
            let out = r
                .forward_greedy(&step(&new, &ctx_s, &tabs2))?
                .context("greedy ids")?;
            for i in 0..batch {
                let row = &out[i * (k + 1)..(i + 1) * (k + 1)];
                ctx_s[i] += accept_greedy(row, &new[i], &mut spec[i], gen);
            }
        }
        let pos: usize = (0..batch)
            .map(|i| (0..gen).filter(|&j| spec[i][j] == plain[i][j]).count())
            .sum();
        let seqs = (0..batch)
            .filter(|&i| spec[i][..gen] == plain[i][..gen])
            .count();
        // Two ranks sum each value once (a + b), whatever NCCL's algorithm: exact. More
        // ranks may sum in another order for another message size: report, do not require.
        pass &= seqs == batch || tp > 2;
        println!(
            "| {k} | {pos}/{} ({:.1} %) | {seqs}/{batch} |",
            gen * batch,
            100.0 * pos as f64 / (gen * batch) as f64
        );
    }
    println!(
        "\nRESULT spec-tp{tp}: {}",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(())
}

/// Bytes one rank must read per step: its weights once (the LM head slice; the
/// embedding only for the step's rows: nothing) and the K/V of its KV heads.
fn rank_bytes(cfg: &ModelConfig, tp: usize, rank: usize, batch: usize, ctx: usize) -> Result<f64> {
    let s = ShardPlan { rank, ranks: tp }.shard(cfg)?;
    let (h, l, hd) = (cfg.hidden_size, cfg.num_layers, cfg.head_dim);
    let (qd, kvd, i) = (s.n_heads() * hd, s.n_kv_heads() * hd, s.intermediate.len());
    let weights = 2 * (l * (h * (qd + 2 * kvd) + qd * h + 3 * h * i) + s.vocab.len() * h);
    let kv = batch * ctx * l * 2 * kvd * 2;
    Ok((weights + kv) as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median wall time of `steps` greedy steps of `batch` sequences × `q` tokens after a
/// prefill of `ctx` tokens each (the first steps of a shape capture its graph).
fn time_steps(
    r: &mut dyn ModelRunner,
    batch: usize,
    q: usize,
    ctx: usize,
    steps: usize,
) -> Result<f64> {
    let blocks_each = (ctx + steps * q + 64).div_ceil(BLOCK);
    let tabs = tables(batch, blocks_each, 0);
    for chunk in (0..batch).collect::<Vec<_>>().chunks(8) {
        let new: Vec<Vec<u32>> = chunk
            .iter()
            .map(|&i| {
                (0..ctx)
                    .map(|j| (1000 + i * 7 + j) as u32 % 30000)
                    .collect()
            })
            .collect();
        let t: Vec<Vec<u32>> = chunk.iter().map(|&i| tabs[i].clone()).collect();
        let mut s = step(&new, &vec![0; chunk.len()], &t);
        s.logit_rows = (0..chunk.len()).map(|i| (i + 1) * ctx - 1).collect();
        r.forward_greedy(&s)?;
    }
    let mut c = vec![ctx; batch];
    let mut times = vec![];
    for _ in 0..steps {
        let new: Vec<Vec<u32>> = (0..batch)
            .map(|i| (0..q).map(|j| (300 + i + j) as u32).collect())
            .collect();
        let s = step(&new, &c, &tabs);
        let t0 = Instant::now();
        r.forward_greedy(&s)?;
        times.push(t0.elapsed().as_secs_f64());
        c.iter_mut().for_each(|x| *x += q);
    }
    Ok(median(times[times.len().min(2)..].to_vec()))
}

fn steps(out_dir: &str, configs: &[String]) -> Result<()> {
    let bw = wring_cuda::measure_copy_bandwidth(2 << 30)?;
    println!(
        "## Tensor-parallel step times (graph replay)\n\nDevice-to-device copy on GPU 0: {:.0} GB/s (bytes read + written). Roofline = the slowest rank's bytes (its weight shard once, its KV heads' K/V) / that bandwidth; context 512 per sequence.\n",
        bw / 1e9
    );
    println!("| model | TP | batch × q | ms | roofline ms | % of roofline | all-reduce ms (alone) | × decode |");
    println!("|---|---|---|---|---|---|---|---|");
    let ctx = 512;
    let mut rows = vec![];
    for c in configs {
        let (shape, tp) = c
            .split_once(':')
            .context("configs are SHAPE:TP, e.g. llama-3.1-70b:2")?;
        let tp: usize = tp.parse()?;
        let cfg =
            ModelConfig::named_shape(shape).with_context(|| format!("unknown shape {shape}"))?;
        let t0 = Instant::now();
        let w = Arc::new(ModelWeights::new(
            cfg.clone(),
            WeightSource::Dummy { seed: 0 },
        ));
        let mut r = match open(&w, tp, 2560) {
            Ok(r) => r,
            Err(e) => {
                println!("| {shape} | {tp} | — | could not start: {e:#} | | | | |");
                continue;
            }
        };
        eprintln!(
            "{shape} TP={tp} loaded in {:.0} s",
            t0.elapsed().as_secs_f64()
        );
        let mut decode = std::collections::HashMap::new();
        for (batch, q) in [(1, 1), (32, 1), (32, 5), (32, 9)] {
            let n = 12;
            let ms = time_steps(&mut *r, batch, q, ctx, n)? * 1e3;
            let mid_ctx = ctx + n * q / 2;
            let roof = (0..tp)
                .map(|rank| rank_bytes(&cfg, tp, rank, batch, mid_ctx))
                .collect::<Result<Vec<f64>>>()?
                .into_iter()
                .fold(0f64, f64::max)
                / bw
                * 1e3;
            let ar = if tp > 1 {
                let ordinals: Vec<usize> = (0..tp).collect();
                wring_cuda::nccl_bench::time_step_all_reduces(
                    &ordinals,
                    batch * q * cfg.hidden_size,
                    2 * cfg.num_layers + 1,
                    20,
                )
                .map(|t| t * 1e3)
                .ok()
            } else {
                None
            };
            if q == 1 {
                decode.insert(batch, ms);
            }
            println!(
                "| {shape} | {tp} | {batch} × {q} | {ms:.3} | {roof:.3} | {:.0} % | {} | {:.2} |",
                100.0 * roof / ms,
                ar.map_or("—".into(), |a| format!("{a:.3}")),
                ms / decode.get(&batch).copied().unwrap_or(ms)
            );
            rows.push(json!({
                "model": shape, "tp": tp, "batch": batch, "q": q, "ms": ms,
                "roofline_ms": roof, "allreduce_ms": ar, "ctx": ctx,
            }));
        }
        drop(r);
    }
    crate::harness::write_json(out_dir, "tp.json", &rows)?;
    println!("\nWrote {out_dir}/tp.json.");
    Ok(())
}
