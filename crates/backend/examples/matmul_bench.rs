//! Matmul throughput of the CPU kernels (f32 and q8) at prefill and decode shapes.
//! `cargo run --release -p wring-backend --example matmul_bench`
use std::time::Instant;
use wring_backend::cpu::{q8::Q8Matrix, CpuBackend};

fn main() {
    let _ = CpuBackend::new(Default::default());
    let (rows, cols) = (1536usize, 576usize);
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let wq = Q8Matrix::from_f32(rows, cols, &w);
    for t in [1usize, 8, 32, 256] {
        let x: Vec<f32> = (0..t * cols)
            .map(|i| ((i * 104729) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let reps = (2000 / t).max(4);
        let t0 = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(wring_backend::cpu::matmul_t(&x, t, &w, rows, cols));
        }
        let f = t0.elapsed().as_secs_f64() / reps as f64;
        let t1 = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(wring_backend::cpu::matmul_q8(&x, t, &wq));
        }
        let q = t1.elapsed().as_secs_f64() / reps as f64;
        let flop = 2.0 * (t * rows * cols) as f64;
        println!(
            "T={t:4}: f32 {:.3} ms ({:.1} GFLOP/s)  q8 {:.3} ms ({:.1} GFLOP/s)",
            f * 1e3,
            flop / f / 1e9,
            q * 1e3,
            flop / q / 1e9
        );
    }
}
