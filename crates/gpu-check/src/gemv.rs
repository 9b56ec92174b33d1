//! `gpu_check gemv [OUT_DIR]`: the weight-streaming gemv kernels (kernels/gemv.cu) alone, on
//! the matrix shapes of SmolLM2-135M and Llama-3.1-8B, for every weight format and token
//! bucket: the result against a host reference (sampled rows, computed from the very bf16
//! activations the kernel read), and the time per call against the path they replace
//! (cuBLAS for bf16, cuBLASLt FP8 or the small-T tensor-core kernel for quantized weights),
//! as weight bytes per second and as a share of the device-to-device copy bandwidth.
//! Host-timed back-to-back calls: matrices of a few MB are bound by the launch rate here
//! (the step table of `gpu_check steps` is the measure that counts for them).
//! GEMV_TOKENS (default 1,2,4,8) picks the token counts: above 8 only int4 and nvfp4 run,
//! on the multi-tile builds (kernels/gemv_multi.cu), against the tensor-core kernel, and
//! their first 8 token rows must equal the 8-token build's bitwise. GEMV_SCHEMES
//! (bf16,fp8,int4,nvfp4) and GEMV_MODELS (135m,8b) filter.

use crate::harness::{step, tables, BLOCK};
use anyhow::Result;
use serde_json::json;
use std::time::Instant;
use wring_backend::quant::{QuantMatrix, Scheme};
use wring_backend::{Backend, HostMatrix, KvSpec};
use wring_cuda::{CudaBackend, CudaOptions, GraphMode};

fn noise(i: usize) -> f32 {
    let h = (i as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((h >> 33) as f64 / (1u64 << 31) as f64 - 0.5) as f32
}

/// (model, matrix, rows, cols, quantized in the model).
const SHAPES: [(&str, &str, usize, usize, bool); 10] = [
    ("135m", "q|k|v", 960, 576, true),
    ("135m", "o", 576, 576, true),
    ("135m", "gate|up", 3072, 576, true),
    ("135m", "down", 576, 1536, true),
    ("135m", "lm head", 49152, 576, false),
    ("8b", "q|k|v", 6144, 4096, true),
    ("8b", "o", 4096, 4096, true),
    ("8b", "gate|up", 28672, 4096, true),
    ("8b", "down", 4096, 14336, true),
    ("8b", "lm head", 128256, 4096, false),
];

pub fn run(out_dir: Option<&str>) -> Result<()> {
    let bw = wring_cuda::measure_copy_bandwidth(2 << 30)?;
    let only = std::env::var("GEMV_MODELS").unwrap_or_else(|_| "135m,8b".into());
    let scheme_filter =
        std::env::var("GEMV_SCHEMES").unwrap_or_else(|_| "bf16,fp8,int4,nvfp4".into());
    println!(
        "## gemv kernels alone vs the path they replace\n\nDevice-to-device copy: {:.0} GB/s (bytes read + written), the 100 % of the % column. Host-timed back-to-back calls (launch-bound below a few MB). Error: ‖Δ‖/‖ref‖ over every 61st row against f64 on the kernel's own bf16 activations.\n",
        bw / 1e9
    );
    println!("| model | matrix | rows × K | weights | T | gemv µs | GB/s | % | replaced µs | GB/s | % | speed-up | gemv ‖Δ‖/‖ref‖ |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut pass = true;
    let mut rows_json = vec![];
    for &(model, name, n, k, quantized) in SHAPES.iter() {
        if !only.split(',').any(|m| m.trim() == model) {
            continue;
        }
        let w: Vec<f32> = (0..n * k).map(|i| 0.05 * noise(i)).collect();
        let schemes: &[Option<Scheme>] = if quantized {
            &[
                None,
                Some(Scheme::Fp8),
                Some(Scheme::Int4),
                Some(Scheme::Nvfp4),
            ]
        } else {
            &[None]
        };
        for &scheme in schemes {
            let sname = scheme.map_or("bf16".to_string(), |s| s.to_string());
            if !scheme_filter.split(',').any(|s| s.trim() == sname) {
                continue;
            }
            let r = one(model, name, n, k, &w, scheme, bw, &mut rows_json);
            match r {
                Ok(ok) => pass &= ok,
                Err(e) => {
                    pass = false;
                    println!("| {model} | {name} | {n} × {k} | {scheme:?} | error: {e:#} |");
                }
            }
        }
    }
    if let Some(dir) = out_dir {
        crate::harness::write_json(dir, "gemv.json", &rows_json)?;
    }
    println!(
        "\nRESULT gemv: {} (‖Δ‖/‖ref‖ < 1e-2 for every shape, format and token count)",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn one(
    model: &str,
    name: &str,
    n: usize,
    k: usize,
    w: &[f32],
    scheme: Option<Scheme>,
    bw: f64,
    out: &mut Vec<serde_json::Value>,
) -> Result<bool> {
    let opts = CudaOptions {
        quant_kernels: true,
        graphs: GraphMode::Off,
        ..CudaOptions::from_env()?
    };
    let mut b = CudaBackend::new(0, opts)?;
    let four_bit = matches!(scheme, Some(Scheme::Int4) | Some(Scheme::Nvfp4));
    let tokens: Vec<usize> = std::env::var("GEMV_TOKENS")
        .unwrap_or_else(|_| "1,2,4,8".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&t| t >= 1 && (t <= 8 || (four_bit && t <= wring_cuda::GEMV_4BIT_LIMIT)))
        .collect();
    let max_t = tokens.iter().copied().max().unwrap_or(8).max(8);
    // The token table first: the backend sizes its counters by the tallest matrix.
    let table: Vec<f32> = (0..max_t * k)
        .map(|i| {
            noise(i + 7_777_777)
                * if (i % k).is_multiple_of(97) {
                    20.0
                } else {
                    1.0
                }
        })
        .collect();
    let tm = b.upload_matrix(HostMatrix {
        rows: max_t,
        cols: k,
        data: table,
    })?;
    let before = b.weight_bytes();
    let (wm, wref) = match scheme {
        None => (
            b.upload_matrix(HostMatrix {
                rows: n,
                cols: k,
                data: w.to_vec(),
            })?,
            None,
        ),
        Some(s) => {
            let q = QuantMatrix::quantize_rtn(s, n, k, w, None, None)?;
            let d = q.dequantize();
            (b.upload_quantized(q)?, Some(d))
        }
    };
    let wbytes = (b.weight_bytes() - before) as f64;
    let ones = b.upload_vector(&vec![1.0; k])?;
    b.alloc_kv(KvSpec {
        layers: 1,
        num_blocks: max_t.div_ceil(BLOCK) + 2,
        block_size: BLOCK,
        n_kv_heads: 1,
        head_dim: 64,
    })?;
    let fmt = scheme.map_or("bf16".to_string(), |s| s.to_string());
    let sample: Vec<usize> = (0..n).step_by(61).chain([n - 1]).collect();
    let mut ok = true;
    let env = CudaOptions::from_env()?;
    // The 8-token build's rows, for the multi-tile builds' bitwise check.
    let mut rows8: Option<Vec<f32>> = None;
    for &t in &tokens {
        let toks: Vec<u32> = (0..t as u32).collect();
        b.begin_step(&step(&[toks], &[0], &tables(1, t.div_ceil(BLOCK) + 1)))?;
        let x = b.embed(&tm);
        let xb = b.rms_norm(&x, &ones, 1e-5);
        let xh = b.to_host(&xb);
        let mut times = [0f64; 2];
        let mut result = vec![];
        for (i, max) in [8usize, 0].into_iter().enumerate() {
            b.set_small_linear_max_t(max);
            if t > 8 && max > 0 {
                b.set_gemv_max_t(max, wring_cuda::GEMV_4BIT_LIMIT);
                b.set_multi_gemv_path(wring_cuda::MultiGemvPath::Gemv);
            }
            let launched = b.gemv_launches();
            for _ in 0..3 {
                drop(b.linear(&xb, &wm, None));
            }
            let calls = ((2e9 / wbytes) as usize).clamp(20, 2000);
            let y0 = b.linear(&xb, &wm, None);
            let _ = b.to_host(&y0); // synchronises
            drop(y0);
            let t0 = Instant::now();
            for _ in 0..calls - 1 {
                drop(b.linear(&xb, &wm, None));
            }
            let y = b.linear(&xb, &wm, None);
            let yh = b.to_host(&y);
            times[i] = t0.elapsed().as_secs_f64() / calls as f64;
            // The gemv run must have launched gemv kernels, the other none.
            let took = b.gemv_launches() > launched;
            if took != (max > 0) {
                ok = false;
                println!("| {model} | {name} | {n} × {k} | {fmt} | {t} | gemv path taken: {took} with max T {max} (FAIL) |");
            }
            if i == 0 {
                result = yh;
            }
        }
        b.finish_step()?;
        b.set_multi_gemv_path(env.multi_gemv);
        let mut same8 = String::new();
        if t == 8 {
            rows8 = Some(result[..8 * n].to_vec());
        } else if t > 8 {
            if let Some(r8) = &rows8 {
                let eq = crate::harness::same(r8, &result[..8 * n]);
                ok &= eq;
                same8 = if eq {
                    " (rows 0..8 = 8-token build)".into()
                } else {
                    " (rows 0..8 DIFFERENT from the 8-token build: FAIL)".into()
                };
            }
        }
        // Reference on the sampled rows: f64 over the weights the kernel dequantises (bf16
        // weights rounded as uploaded; fp8 with bf16 activations, no E4M3 rounding of x).
        let (mut num, mut den) = (0f64, 0f64);
        for &r in &sample {
            for tt in 0..t {
                let xr = &xh[tt * k..(tt + 1) * k];
                let refv: f64 = match &wref {
                    None => (0..k)
                        .map(|c| xr[c] as f64 * half::bf16::from_f32(w[r * k + c]).to_f32() as f64)
                        .sum(),
                    Some(d) => (0..k).map(|c| xr[c] as f64 * d[r * k + c] as f64).sum(),
                };
                let got = result.get(tt * n + r).copied().unwrap_or(f32::NAN) as f64;
                num += (got - refv).powi(2);
                den += refv.powi(2);
            }
        }
        let rel = (num / den.max(1e-30)).sqrt();
        let rel = if rel.is_nan() { f64::INFINITY } else { rel };
        ok &= rel < 1e-2;
        let gbs = |s: f64| wbytes / s / 1e9;
        println!(
            "| {model} | {name} | {n} × {k} | {fmt} | {t} | {:.1} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} | {:.2}× | {rel:.2e}{same8} |",
            times[0] * 1e6,
            gbs(times[0]),
            100.0 * wbytes / times[0] / bw,
            times[1] * 1e6,
            gbs(times[1]),
            100.0 * wbytes / times[1] / bw,
            times[1] / times[0],
        );
        out.push(json!({
            "model": model, "matrix": name, "rows": n, "cols": k, "weights": fmt, "t": t,
            "weight_bytes": wbytes, "gemv_us": times[0] * 1e6, "replaced_us": times[1] * 1e6,
            "copy_bw_gbs": bw / 1e9, "rel_err": rel,
        }));
    }
    Ok(ok)
}
