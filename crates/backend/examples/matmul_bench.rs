//! Matmul throughput of the CPU kernels (f32, q8, q4, and the checkpoint schemes int8, int4,
//! fp8, nvfp4 of `wring quantize`) at prefill and decode shapes.
//! `RAYON_NUM_THREADS=1 cargo run --release -p wring-backend --example matmul_bench`
//! (`-- --f32-q8`: only the f32, q8 and q4 kernels, skipping the checkpoint schemes)
use std::time::Instant;

/// CPU seconds this process has used (user + system), from /proc: shared machines
/// make wall time meaningless, CPU time is what the kernels cost.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}
#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::cpu_ns;

/// GFLOP per CPU-second of the best of 30 trials of `f` (each at least ~1 ms).
fn best_gflops(flop: f64, mut f: impl FnMut()) -> f64 {
    let c0 = cpu_ns();
    f();
    let once = (cpu_ns() - c0).max(1);
    let reps = (1_000_000 / once).max(1);
    let mut best = u64::MAX;
    for _ in 0..30 {
        let c0 = cpu_ns();
        for _ in 0..reps {
            f();
        }
        best = best.min((cpu_ns() - c0).max(1) / reps);
    }
    flop / best as f64
}

use wring_backend::cpu::{q4::Q4Matrix, q8::Q8Matrix, qmatmul::matmul_quant, CpuBackend};
use wring_backend::quant::{QuantMatrix, Scheme};

fn main() {
    let _ = CpuBackend::new(Default::default());
    let (rows, cols) = (1536usize, 576usize);
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let wq = Q8Matrix::from_f32(rows, cols, &w);
    let w4 = Q4Matrix::from_f32(rows, cols, &w).unwrap();
    let schemes: Vec<QuantMatrix> = Scheme::ALL
        .iter()
        .map(|&s| QuantMatrix::quantize_rtn(s, rows, cols, &w, None, None).unwrap())
        .collect();
    for t in [1usize, 8, 32, 256] {
        let x: Vec<f32> = (0..t * cols)
            .map(|i| ((i * 104729) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let reps = (4000 / t).max(16);
        let (t0, c0) = (Instant::now(), cpu_seconds());
        for _ in 0..reps {
            std::hint::black_box(wring_backend::cpu::matmul_t(&x, t, &w, rows, cols));
        }
        let f = t0.elapsed().as_secs_f64() / reps as f64;
        let fc = (cpu_seconds() - c0) / reps as f64;
        let (t1, c1) = (Instant::now(), cpu_seconds());
        for _ in 0..reps {
            std::hint::black_box(wring_backend::cpu::matmul_q8(&x, t, &wq));
        }
        let q = t1.elapsed().as_secs_f64() / reps as f64;
        let qc = (cpu_seconds() - c1) / reps as f64;
        let flop = 2.0 * (t * rows * cols) as f64;
        let fb = best_gflops(flop, || {
            std::hint::black_box(wring_backend::cpu::matmul_t(&x, t, &w, rows, cols));
        });
        let qb = best_gflops(flop, || {
            std::hint::black_box(wring_backend::cpu::matmul_q8(&x, t, &wq));
        });
        let (t4, c4) = (Instant::now(), cpu_seconds());
        for _ in 0..reps {
            std::hint::black_box(wring_backend::cpu::matmul_q4(&x, t, &w4));
        }
        let q4 = t4.elapsed().as_secs_f64() / reps as f64;
        let q4c = (cpu_seconds() - c4) / reps as f64;
        let q4b = best_gflops(flop, || {
            std::hint::black_box(wring_backend::cpu::matmul_q4(&x, t, &w4));
        });
        println!(
            "T={t:4}: f32 {:.3} ms wall, {:.1} GFLOP per CPU-second (best trial {fb:.1}) | q8 {:.3} ms wall, {:.1} GFLOP per CPU-second (best trial {qb:.1})",
            f * 1e3,
            flop / fc / 1e9,
            q * 1e3,
            flop / qc / 1e9
        );
        println!(
            "        q4 {:.3} ms wall, {:.1} GFLOP per CPU-second (best trial {q4b:.1})",
            q4 * 1e3,
            flop / q4c / 1e9
        );
        if std::env::args().any(|a| a == "--f32-q8") {
            continue;
        }
        let mut line = "        ".to_string();
        for m in &schemes {
            let c0 = cpu_seconds();
            for _ in 0..reps {
                std::hint::black_box(matmul_quant(&x, t, m));
            }
            let c = (cpu_seconds() - c0) / reps as f64;
            line += &format!(" | {} {:.1}", m.scheme(), flop / c / 1e9);
        }
        println!("{line} GFLOP per CPU-second");
    }
}
