//! The matmuls of one decode step of SmolLM2-135M (30 layers × q, k, v, o, gate, up,
//! down, then the 49152-row lm_head) over 8-bit weights, then over 4-bit weights (`q4`,
//! lm_head still q8 as `--cpu-weights q4` keeps it), at 1 and 8 tokens (or `DECODE_TOKENS`): wall and CPU
//! milliseconds per step. Weights are synthetic (the kernels' speed does not depend
//! on the values); attention and the small ops are left out, so this is the matmul floor
//! of a step.
//! `cargo run --release -p wring-backend --example decode_bench [-- STEPS [--in-pool] [--weights q8|q4]]`
//! (`--in-pool`: each step runs inside the rayon pool, so its parallel matmuls do not
//! each cross from the main thread into the pool and back)
use std::time::Instant;
use wring_backend::cpu::{matmul_q4, matmul_q8, q4::Q4Matrix, q8::Q8Matrix};

#[path = "support/cpu_time.rs"]
mod cpu_time;

/// Process CPU time in seconds.
fn cpu_s() -> f64 {
    cpu_time::cpu_ns() as f64 * 1e-9
}

fn values(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i * 7919 + seed * 104729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn matrix(rows: usize, cols: usize, seed: usize) -> Q8Matrix {
    Q8Matrix::from_f32(rows, cols, &values(rows, cols, seed))
}

/// A weight of the layers: q8 or q4.
enum Mat {
    Q8(Q8Matrix),
    Q4(Q4Matrix),
}

impl Mat {
    fn cols(&self) -> usize {
        match self {
            Mat::Q8(m) => m.cols,
            Mat::Q4(m) => m.cols,
        }
    }
    fn matmul(&self, x: &[f32], t: usize) -> Vec<f32> {
        match self {
            Mat::Q8(m) => matmul_q8(x, t, m),
            Mat::Q4(m) => matmul_q4(x, t, m),
        }
    }
}

fn main() {
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let (h, i, kv, layers, vocab) = (576usize, 1536usize, 192usize, 30usize, 49152usize);
    let head = matrix(vocab, h, 999);
    let in_pool = std::env::args().any(|a| a == "--in-pool");
    let only = std::env::args().skip_while(|a| a != "--weights").nth(1);
    for q4 in [false, true] {
        if only
            .as_deref()
            .is_some_and(|w| w != if q4 { "q4" } else { "q8" })
        {
            continue;
        }
        // Distinct matrices per layer, so each step streams every weight from memory.
        let layer_mats: Vec<Vec<Mat>> = (0..layers)
            .map(|l| {
                [(h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i)]
                    .iter()
                    .enumerate()
                    .map(|(j, &(r, c))| {
                        let w = values(r, c, l * 7 + j);
                        if q4 {
                            Mat::Q4(Q4Matrix::from_f32(r, c, &w).unwrap())
                        } else {
                            Mat::Q8(Q8Matrix::from_f32(r, c, &w))
                        }
                    })
                    .collect()
            })
            .collect();
        // DECODE_TOKENS="32 33 36": other batch sizes (a verify row past a multiple of the
        // kernels' four-token tiles is what the adaptive policy prices).
        let batches: Vec<usize> = std::env::var("DECODE_TOKENS").map_or(vec![1, 8], |v| {
            v.split_whitespace()
                .map(|t| t.parse().expect("DECODE_TOKENS"))
                .collect()
        });
        for &t in &batches {
            let x: Vec<f32> = (0..t * i)
                .map(|k| ((k * 104729) % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            let step = || {
                for m in &layer_mats {
                    for w in m {
                        std::hint::black_box(w.matmul(&x[..t * w.cols()], t));
                    }
                }
                std::hint::black_box(matmul_q8(&x[..t * h], t, &head));
            };
            let step = || {
                if in_pool {
                    rayon::scope(|_| step())
                } else {
                    step()
                }
            };
            step();
            let (w0, c0) = (Instant::now(), cpu_s());
            for _ in 0..steps {
                step();
            }
            let (wall, cpu) = (
                w0.elapsed().as_secs_f64() / steps as f64,
                (cpu_s() - c0) / steps as f64,
            );
            println!(
                "{} T={t}: {:.2} ms wall, {:.2} CPU-ms per step ({:.0} tok/s wall)",
                if q4 { "q4" } else { "q8" },
                wall * 1e3,
                cpu * 1e3,
                t as f64 / wall
            );
        }
    }
}
