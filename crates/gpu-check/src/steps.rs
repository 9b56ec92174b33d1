//! `gpu_check steps OUT_DIR`: graph-replay step times of the shapes bestKpad makes, against
//! the HBM roofline measured in the same call, for the 135M model's shape and dummy
//! llama-3.1-8b, for each configuration in `STEPS_VARIANTS` (default: `default` = this
//! build's defaults, `gemv` = the weight-streaming gemv kernels for steps of <= 8 tokens,
//! `nosmall` = cuBLAS for every step, `nopdl` = no programmatic dependent launch, `serial` =
//! the tensor-core attention without its K/V prefetch, `staged` = its K/V copied through
//! per-warp shared-memory rings, `before` = the previous defaults:
//! split-KV attention, cuBLAS, no PDL, `splits=per_q=512+grid=all` = the defaults with
//! that `WRING_CUDA_MMA_SPLITS`, `+` for `,`).
//! `STEPS_SHAPES=1x1,8x1` restricts the batch × q shapes; `STEPS_MODELS` picks the dummy shapes
//! (`shape[:context]`, default `smollm2-135m:256,llama-3.1-8b:512`; a mixture-of-experts
//! shape's roofline counts the experts its tokens route to); `STEPS_CTX=1024` times every
//! model at that context.
//! Writes `OUT_DIR/steps.json` (decode at batch 1/8/32, verify 32 × (1 + K),
//! K ∈ {4, 6, 8, 12}) and `OUT_DIR/latency.json` (decode at batch 1 and 8 with
//! the kernels a replayed step launches).

use crate::harness::time_steps;
use anyhow::{Context, Result};
use serde_json::json;
use std::time::Instant;
use wring_cuda::{AttentionKernel, CudaOptions, GraphMode, MmaSplits};
use wring_model::ModelConfig;

/// Bytes a step of `tokens` tokens must read at least: every layer's weights and the LM head
/// once (the embedding only for the step's rows: nothing), and the K/V of every context
/// position. Of a mixture-of-experts layer only the router and the experts the step's tokens
/// route to count: [`experts_read`] of them.
fn roofline_bytes(cfg: &ModelConfig, batch: usize, tokens: usize, ctx: usize) -> f64 {
    let (h, i, l) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_layers);
    let kvd = cfg.num_kv_heads * cfg.head_dim;
    let qd = cfg.num_heads * cfg.head_dim;
    let attention = h * (qd + 2 * kvd) + qd * h;
    let layers: f64 = (0..l)
        .map(|layer| {
            let ffn = match cfg.moe_layer(layer) {
                None => (3 * h * i) as f64,
                Some(m) => {
                    (m.num_experts * h) as f64
                        + experts_read(m.num_experts, m.top_k, tokens)
                            * (3 * h * m.expert_intermediate_size) as f64
                }
            };
            attention as f64 + ffn
        })
        .sum();
    let weights = 2.0 * (layers + (cfg.vocab_size * h) as f64);
    let kv = batch * ctx * l * 2 * kvd * 2;
    weights + kv as f64
}

/// Experts a layer reads for `tokens` tokens routed to `top_k` distinct experts of
/// `experts` each, the expected count when every choice of experts is equally likely (what
/// dummy weights' routers come close to: the op check `gpu_check moe` counts the real
/// routing of its inputs). A real checkpoint's routing is skewed, so it reads fewer.
fn experts_read(experts: usize, top_k: usize, tokens: usize) -> f64 {
    let untouched = (1.0 - top_k as f64 / experts as f64).powi(tokens as i32);
    experts as f64 * (1.0 - untouched)
}

/// A backend configuration to time: (attention kernel, small-step linear max tokens forced
/// (None: the environment's path, `auto` by default), PDL, attention_mma's key splits).
fn variant(name: &str) -> Result<(AttentionKernel, Option<usize>, bool, MmaSplits)> {
    let d = CudaOptions::from_env()?;
    if let Some(spec) = name.strip_prefix("splits=") {
        let splits = MmaSplits::parse(&spec.replace('+', ","))
            .with_context(|| format!("STEPS_VARIANTS: {name:?}"))?;
        return Ok((d.attention, None, d.pdl, splits));
    }
    let (kernel, small, pdl) = match name {
        "default" => (d.attention, None, d.pdl),
        "gemv" | "small" => (d.attention, Some(8), d.pdl),
        "nosmall" => (d.attention, Some(0), d.pdl),
        "nopdl" => (d.attention, None, false),
        "before" => (AttentionKernel::Split, Some(0), false),
        "serial" => (AttentionKernel::MmaSerial, None, d.pdl),
        "staged" => (AttentionKernel::MmaStaged, None, d.pdl),
        other => anyhow::bail!("STEPS_VARIANTS: unknown variant {other:?}"),
    };
    Ok((kernel, small, pdl, d.mma_splits))
}

pub fn run(out_dir: &str) -> Result<()> {
    let variants = crate::harness::env_list("STEPS_VARIANTS", "default,gemv,nopdl,before");
    for v in &variants {
        variant(v)?;
    }
    // `STEPS_SHAPES=1x1,1x5,8x1` times only those batch × q shapes.
    let shapes: Vec<(usize, usize)> = match std::env::var("STEPS_SHAPES") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|p| {
                let (b, q) = p.trim().split_once('x').context("STEPS_SHAPES: BxQ")?;
                Ok((b.parse()?, q.parse()?))
            })
            .collect::<Result<_>>()?,
        _ => vec![
            (1, 1),
            (1, 5),
            (8, 1),
            (32, 1),
            (32, 5),
            (32, 7),
            (32, 9),
            (32, 13),
        ],
    };
    let bw = wring_cuda::measure_copy_bandwidth(2 << 30)?;
    println!(
        "## Step times (graph replay)\n\nDevice-to-device copy: {:.0} GB/s (bytes read + written).\n",
        bw / 1e9
    );
    let ctx_override = match std::env::var("STEPS_CTX") {
        Ok(v) if !v.trim().is_empty() => Some(
            v.trim()
                .parse::<usize>()
                .with_context(|| format!("STEPS_CTX={v:?}: expected a context length"))?,
        ),
        _ => None,
    };
    let mut steps = vec![];
    let mut latency = vec![];
    // `STEPS_MODELS=qwen3-8b:512,qwen3-30b-a3b` times those dummy shapes (`shape[:context]`;
    // a mixture-of-experts shape needs `WRING_CUDA_MOE=on` while that path is opt-in).
    let models = crate::harness::env_list("STEPS_MODELS", "smollm2-135m:256,llama-3.1-8b:512");
    for spec in &models {
        let (model, ctx) = match spec.split_once(':') {
            Some((m, c)) => (
                m,
                c.parse::<usize>()
                    .with_context(|| format!("STEPS_MODELS: {spec:?}: context"))?,
            ),
            None => (spec.as_str(), 512),
        };
        let ctx = ctx_override.unwrap_or(ctx);
        let t0 = Instant::now();
        let (mut r, cfg) = crate::harness::dummy_runner(model)?;
        println!(
            "### {model} (dummy weights, bf16), loaded in {:.0} s; context {ctx}\n",
            t0.elapsed().as_secs_f64()
        );
        println!("| variant | batch × q | graph ms | roofline ms | % of roofline | × decode at this batch | kernels/step |");
        println!("|---|---|---|---|---|---|---|");
        for name in &variants {
            let (kernel, small, pdl, splits) = variant(name)?;
            r.backend_mut().set_attention(kernel);
            r.backend_mut().set_mma_splits(splits);
            match small {
                Some(t) => r.backend_mut().set_small_linear_max_t(t),
                None => {
                    let d = CudaOptions::from_env()?;
                    r.backend_mut()
                        .set_gemv_max_t(d.small_linear_max_t, d.gemv_4bit_max_t);
                    r.backend_mut().set_small_step_path(d.small_step_path);
                }
            }
            r.backend_mut().set_pdl(pdl);
            r.backend_mut().set_graph_mode(GraphMode::On);
            let mut decode_ms = std::collections::HashMap::new();
            for &(batch, q) in &shapes {
                let steps_n = 12;
                let t = time_steps(&mut r, batch, q, ctx, steps_n)?;
                let roof = roofline_bytes(&cfg, batch, batch * q, ctx + steps_n * q / 2) / bw;
                let ms = t * 1e3;
                if q == 1 {
                    decode_ms.insert(batch, ms);
                }
                let bucket = CudaOptions::from_env()?.bucket_for(batch).unwrap_or(batch);
                let nodes = r.backend().graph_nodes(bucket, q);
                println!(
                    "| {} | {batch} × {q} | {ms:.3} | {:.3} | {:.0} % | {:.2} | {} |",
                    name,
                    roof * 1e3,
                    100.0 * roof * 1e3 / ms,
                    ms / decode_ms.get(&batch).copied().unwrap_or(ms),
                    nodes.map_or("?".into(), |n| n.to_string())
                );
                steps.push(json!({
                    "model": model, "batch": batch, "q": q, "ms": ms, "roofline_ms": roof * 1e3,
                    "variant": name, "ctx": ctx,
                    "experts_read": cfg.moe.as_ref()
                        .map(|m| experts_read(m.num_experts, m.top_k, batch * q)),
                }));
                if q == 1 && batch <= 8 {
                    latency.push(json!({
                        "model": model, "batch": batch, "ms_per_step": ms, "roofline_ms": roof * 1e3,
                        "kernels_per_step": nodes, "variant": name, "ctx": ctx,
                    }));
                }
            }
        }
        println!();
    }
    crate::harness::write_json(out_dir, "steps.json", &steps)?;
    crate::harness::write_json(out_dir, "latency.json", &latency)?;
    println!("Wrote {out_dir}/steps.json and {out_dir}/latency.json.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_its_top_k_experts_and_many_tokens_read_nearly_all() {
        assert!((experts_read(128, 8, 1) - 8.0).abs() < 1e-9);
        assert!(experts_read(128, 8, 32) > 100.0 && experts_read(128, 8, 32) < 128.0);
        assert!(experts_read(8, 2, 416) > 7.999);
    }

    #[test]
    fn the_moe_roofline_counts_routed_experts_and_a_dense_one_every_weight() {
        let moe = ModelConfig::named_shape("qwen3-30b-a3b").unwrap();
        let one = roofline_bytes(&moe, 1, 1, 0);
        let all = roofline_bytes(&moe, 32, 416, 0);
        // One token reads about the active parameters, a 416-token verify step nearly all
        // (the input embedding aside: a step reads only its rows of it).
        let embedding = (moe.vocab_size * moe.hidden_size) as f64;
        let active = 2.0 * (moe.active_params() as f64 - embedding);
        let every = 2.0 * (moe.num_params() as f64 - embedding);
        assert!((one / active - 1.0).abs() < 0.01, "{one} vs {active}");
        assert!((all / every - 1.0).abs() < 0.05, "{all} vs {every}");
        let dense = ModelConfig::named_shape("llama-3.1-8b").unwrap();
        assert_eq!(
            roofline_bytes(&dense, 1, 1, 0),
            roofline_bytes(&dense, 32, 416, 0)
        );
    }
}
