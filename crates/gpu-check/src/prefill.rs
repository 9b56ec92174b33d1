//! `gpu_check prefill OUT_DIR`: eager step times of the steps that carry prompt tokens, per
//! prefill attention kernel, for the 135M model's shape and dummy llama-3.1-8b: a prompt
//! alone from position 0 (512, 1,024, 2,048 tokens), four 256-token prompts, and one 512-token
//! prompt beside 32 decoding sequences at context 512 (the serving mix at concurrency 32).
//! Logits only for each sequence's last token, as the engine asks. Variants
//! (`PREFILL_VARIANTS`, default `flash,mma-only`): `flash` = attention_flash takes the chunks
//! (the default), `mma-only` = attention_mma takes them, `staged` = flash with mma-staged for
//! the decode rows. (results/2026-12-02-flash-prefill also timed prefill.cu's kernel, since deleted.) Each
//! round times every variant once per shape, the variants' order rotating by round
//! (`PREFILL_ROUNDS`, default 5); the table has each median. Writes `OUT_DIR/prefill.json`.

use crate::harness::BLOCK;
use anyhow::Result;
use serde_json::json;
use std::time::Instant;
use wring_backend::{SeqInput, StepInput};
use wring_cuda::AttentionKernel;

fn variant(name: &str) -> Result<AttentionKernel> {
    Ok(match name {
        "flash" => AttentionKernel::Mma,
        "mma-only" => AttentionKernel::MmaOnly,
        "staged" => AttentionKernel::MmaStaged,
        other => anyhow::bail!("PREFILL_VARIANTS: unknown variant {other:?}"),
    })
}

/// Sequences (new tokens after `ctx` cached ones, block table), logits for each last token.
fn step_of(seqs: &[(usize, usize, Vec<u32>)]) -> StepInput {
    let mut s = StepInput::default();
    for (i, (ctx, new, table)) in seqs.iter().enumerate() {
        let start = s.tokens.len();
        s.seqs.push(SeqInput {
            query_start: start,
            query_len: *new,
            context_len: ctx + new,
            block_table: table.clone(),
            prompt_len: 0,
        });
        s.tokens
            .extend((0..*new).map(|j| (100 + 13 * i + 7 * j) as u32 % 30000));
        s.positions.extend((*ctx..ctx + new).map(|p| p as u32));
        s.logit_rows.push(start + new - 1);
    }
    s
}

/// A shape: (label, prompts (tokens each), decoding sequences beside them at context 512).
const SHAPES: [(&str, &[usize], usize); 6] = [
    ("1 × 512", &[512], 0),
    ("1 × 1024", &[1024], 0),
    ("1 × 2048", &[2048], 0),
    ("4 × 256", &[256, 256, 256, 256], 0),
    ("32 decode + 1 × 512", &[512], 32),
    ("32 decode + 1 × 2048", &[2048], 32),
];
const DECODE_CTX: usize = 512;

pub fn run(out_dir: &str) -> Result<()> {
    let variants = crate::harness::env_list("PREFILL_VARIANTS", "flash,mma-only");
    for v in &variants {
        variant(v)?;
    }
    let rounds: usize = std::env::var("PREFILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    println!("## Steps with prompt tokens (eager, ms; median of {rounds} rounds)\n");
    let mut rows = vec![];
    for (model, shape) in [
        ("smollm2-135m", "smollm2-135m"),
        ("llama-3.1-8b", "llama-3.1-8b"),
    ] {
        let (mut r, _) = crate::harness::dummy_runner(shape)?;
        // Block tables: 32 decoding sequences, then four prompt slots of 2,048 tokens.
        let per = (DECODE_CTX + 16).div_ceil(BLOCK);
        let prompt_blocks = 2048usize.div_ceil(BLOCK);
        let decode_tables: Vec<Vec<u32>> = (0..32)
            .map(|i| ((i * per) as u32..((i + 1) * per) as u32).collect())
            .collect();
        let prompt_tables: Vec<Vec<u32>> = (0..4)
            .map(|i| {
                let b0 = 32 * per + i * prompt_blocks;
                (b0 as u32..(b0 + prompt_blocks) as u32).collect()
            })
            .collect();
        // The decoding sequences' contexts, prefilled once.
        for chunk in decode_tables.chunks(8) {
            let seqs: Vec<_> = chunk.iter().map(|t| (0, DECODE_CTX, t.clone())).collect();
            r.forward_greedy(&step_of(&seqs))?;
        }
        println!("### {model} (dummy weights, bf16)\n");
        println!("| shape | {} |", variants.join(" | "));
        println!("|---|{}", "---:|".repeat(variants.len()));
        for (label, prompts, decoding) in SHAPES {
            let mut seqs: Vec<(usize, usize, Vec<u32>)> = (0..decoding)
                .map(|i| (DECODE_CTX, 1, decode_tables[i].clone()))
                .collect();
            seqs.extend(
                prompts
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (0, n, prompt_tables[i].clone())),
            );
            let s = step_of(&seqs);
            let mut times = vec![vec![]; variants.len()];
            for round in 0..rounds + 1 {
                for k in 0..variants.len() {
                    let vi = (k + round) % variants.len();
                    r.backend_mut().set_attention(variant(&variants[vi])?);
                    let t0 = Instant::now();
                    r.forward_greedy(&s)?;
                    // Round 0 warms every variant up (module load, workspace).
                    if round > 0 {
                        times[vi].push(t0.elapsed().as_secs_f64() * 1e3);
                    }
                }
            }
            let medians: Vec<f64> = times.into_iter().map(crate::harness::median).collect();
            println!(
                "| {label} | {} |",
                medians
                    .iter()
                    .map(|m| format!("{m:.3}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            for (v, ms) in variants.iter().zip(&medians) {
                rows.push(json!({"model": model, "shape": label, "variant": v, "ms": ms}));
            }
        }
        println!();
    }
    crate::harness::write_json(out_dir, "prefill.json", &rows)?;
    println!("Wrote {out_dir}/prefill.json.");
    Ok(())
}

/// `gpu_check prefill-cold OUT_DIR`: the steps with prompt tokens that a server meets — a
/// prompt of a length not seen before, alone (concurrency 1) or beside 31 decoding
/// sequences (concurrency 32) — timed the first time its token count runs (cold) and again
/// (warm, median of 3), with the host's enqueue time of the warm runs (`begin_step` to the
/// synchronising copy back: a step whose enqueue time is nearly its whole time is host-bound).
/// The prompt lengths (`PREFILL_COLD_TOKENS`) are what mix and humaneval prompts tokenise to.
/// Models: `PREFILL_COLD_MODELS` (default the 135M shape). Writes `OUT_DIR/prefill_cold.json`.
pub fn run_cold(out_dir: &str) -> Result<()> {
    let lens: Vec<usize> = crate::harness::env_list(
        "PREFILL_COLD_TOKENS",
        "97,131,166,181,203,228,259,301,344,377,420,455,512,613,777,1000,1400",
    )
    .iter()
    .map(|v| v.parse())
    .collect::<Result<_, _>>()?;
    let models = crate::harness::env_list("PREFILL_COLD_MODELS", "smollm2-135m");
    println!("## Steps with a prompt of a new length (eager, ms)\n");
    let mut rows = vec![];
    for shape in &models {
        let (mut r, _) = crate::harness::dummy_runner(shape)?;
        let per = (DECODE_CTX + 64).div_ceil(BLOCK);
        let decode_tables: Vec<Vec<u32>> = (0..31)
            .map(|i| ((i * per) as u32..((i + 1) * per) as u32).collect())
            .collect();
        let b0 = 31 * per;
        let prompt_table: Vec<u32> = (b0 as u32..(b0 + 2048usize.div_ceil(BLOCK)) as u32).collect();
        for chunk in decode_tables.chunks(8) {
            let seqs: Vec<_> = chunk.iter().map(|t| (0, DECODE_CTX, t.clone())).collect();
            r.forward_greedy(&step_of(&seqs))?;
        }
        println!("### {shape} (dummy weights, bf16)\n");
        println!("| prompt tokens | beside | cold ms | warm ms | warm enqueue ms |");
        println!("|---:|---:|---:|---:|---:|");
        for (k, &n) in lens.iter().enumerate() {
            for decoding in [0usize, 31] {
                // Decoding sequences' contexts move on by one each step, as in serving.
                let mut seqs: Vec<(usize, usize, Vec<u32>)> = (0..decoding)
                    .map(|i| (DECODE_CTX + k, 1, decode_tables[i].clone()))
                    .collect();
                seqs.push((0, n, prompt_table.clone()));
                let s = step_of(&seqs);
                let t0 = Instant::now();
                r.forward_greedy(&s)?;
                let cold = t0.elapsed().as_secs_f64() * 1e3;
                let (mut warm, mut enq) = (vec![], vec![]);
                for _ in 0..3 {
                    let t0 = Instant::now();
                    r.forward_greedy(&s)?;
                    warm.push(t0.elapsed().as_secs_f64() * 1e3);
                    enq.push(r.backend_mut().last_step_enqueue_seconds() * 1e3);
                }
                let (warm, enq) = (crate::harness::median(warm), crate::harness::median(enq));
                println!("| {n} | {decoding} | {cold:.3} | {warm:.3} | {enq:.3} |");
                rows.push(
                    json!({"model": shape, "prompt_tokens": n, "decoding": decoding,
                    "cold_ms": cold, "warm_ms": warm, "warm_enqueue_ms": enq}),
                );
            }
        }
        println!();
    }
    crate::harness::write_json(out_dir, "prefill_cold.json", &rows)?;
    println!("Wrote {out_dir}/prefill_cold.json.");
    Ok(())
}

/// `gpu_check chunk-steps OUT_DIR`: steps of decode/verify rows beside one prompt chunk — the
/// steps with prompt tokens a server at concurrency 32 runs most — timed replaying their
/// chunk graph (`WRING_CUDA_CHUNK_GRAPHS`) and eagerly (padded to the token bucket, the
/// previous default), alternating, host time included (`forward_greedy` wall time, as the
/// engine sees it), with the eager run's enqueue time. Rows: 0, 8 or 32 sequences × q (1, 5)
/// at context 512 (every row's tokens logit rows, as verify asks); the chunk's last token
/// its logit row. Models: `CHUNK_STEP_MODELS` (default the 135M shape and dummy 8B).
/// Writes `OUT_DIR/chunk_steps.json`.
pub fn run_chunk_graphs(out_dir: &str) -> Result<()> {
    let chunks: Vec<usize> = crate::harness::env_list("CHUNK_STEP_TOKENS", "55,200,480,1000")
        .iter()
        .map(|v| v.parse())
        .collect::<Result<_, _>>()?;
    let models = crate::harness::env_list("CHUNK_STEP_MODELS", "smollm2-135m,llama-3.1-8b");
    const REPS: usize = 7;
    println!("## Steps with one prompt chunk: chunk graph vs eager (ms, median of {REPS})\n");
    let mut out = vec![];
    for shape in &models {
        let (mut r, _) = crate::harness::dummy_runner(shape)?;
        let graph_max = r.backend().options().chunk_graph_max;
        anyhow::ensure!(
            graph_max > 0,
            "chunk graphs are off: set WRING_CUDA_CHUNK_GRAPHS (e.g. 1024) to compare them"
        );
        let per = (DECODE_CTX + 64).div_ceil(BLOCK);
        let tables: Vec<Vec<u32>> = (0..32)
            .map(|i| ((i * per) as u32..((i + 1) * per) as u32).collect())
            .collect();
        let b0 = 32 * per;
        let prompt_table: Vec<u32> = (b0 as u32..(b0 + 2048usize.div_ceil(BLOCK)) as u32).collect();
        for chunk in tables.chunks(8) {
            let seqs: Vec<_> = chunk.iter().map(|t| (0, DECODE_CTX, t.clone())).collect();
            r.forward_greedy(&step_of(&seqs))?;
        }
        println!("### {shape} (dummy weights, bf16)\n");
        println!(
            "| rows | chunk tokens | graph ms | eager ms | eager enqueue ms | eager / graph |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        for (rows, q) in [(0usize, 1usize), (8, 1), (32, 1), (8, 5), (32, 5)] {
            for &c in &chunks {
                let mut seqs: Vec<(usize, usize, Vec<u32>)> = (0..rows)
                    .map(|i| (DECODE_CTX, q, tables[i].clone()))
                    .collect();
                seqs.push((0, c, prompt_table.clone()));
                let mut s = step_of(&seqs);
                // Verify rows: every token a logit row; the chunk: its last.
                s.logit_rows = (0..rows * q).chain([rows * q + c - 1]).collect();
                let (mut graph, mut eager, mut enq) = (vec![], vec![], vec![]);
                for rep in 0..REPS + 3 {
                    for on in [true, false] {
                        r.backend_mut()
                            .set_chunk_graph_max(if on { graph_max } else { 0 })?;
                        let t0 = Instant::now();
                        r.forward_greedy(&s)?;
                        let ms = t0.elapsed().as_secs_f64() * 1e3;
                        // The first three: eager sighting, capture, first replay.
                        if rep >= 3 {
                            if on {
                                graph.push(ms);
                            } else {
                                eager.push(ms);
                                enq.push(r.backend_mut().last_step_enqueue_seconds() * 1e3);
                            }
                        }
                    }
                }
                r.backend_mut().set_chunk_graph_max(graph_max)?;
                let (g, e, q_ms) = (
                    crate::harness::median(graph),
                    crate::harness::median(eager),
                    crate::harness::median(enq),
                );
                let label = if rows == 0 {
                    "none".to_string()
                } else {
                    format!("{rows} × {q}")
                };
                println!(
                    "| {label} | {c} | {g:.3} | {e:.3} | {q_ms:.3} | {:.2} |",
                    e / g
                );
                out.push(
                    json!({"model": shape, "rows": rows, "q": q, "chunk_tokens": c,
                    "graph_ms": g, "eager_ms": e, "eager_enqueue_ms": q_ms}),
                );
            }
        }
        let (captured, replays, failed) = r.backend().graph_stats();
        println!("\nGraphs captured {captured}, replays {replays}, failed captures {failed}.\n");
    }
    crate::harness::write_json(out_dir, "chunk_steps.json", &out)?;
    println!("Wrote {out_dir}/chunk_steps.json.");
    Ok(())
}
