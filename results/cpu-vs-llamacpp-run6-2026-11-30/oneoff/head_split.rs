// One-off (session 5): the q8 lm head (49152x576) at one token on the CPU team, against two
// contiguous halves each run whole on one thread of the team. Copy to
// crates/backend/examples/head_split.rs and `cargo run --release -p wring-backend --example head_split`.
// At f8f699b (chunks claimed one at a time from a shared counter): team 3.12 / 3.38 ms, halves
// 2.01 / 1.59 ms per head; at 86c8b09 (a contiguous range per thread): 1.89 / 1.86 vs 1.81 / 1.79.
use std::time::Instant;
use wring_backend::cpu::{matmul_q8, q8::Q8Matrix, team::par_for};
fn values(rows: usize, cols: usize, seed: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| ((i * 7919 + seed * 104729) % 1000) as f32 / 1000.0 - 0.5).collect()
}
fn main() {
    let (h, vocab) = (576usize, 49152usize);
    let halves: Vec<Vec<Q8Matrix>> = (0..4).map(|k| (0..2).map(|j| Q8Matrix::from_f32(vocab / 2, h, &values(vocab / 2, h, 99 + k*7+j))).collect()).collect();
    let full: Vec<Q8Matrix> = (0..4).map(|k| Q8Matrix::from_f32(vocab, h, &values(vocab, h, 9 + k))).collect();
    let x: Vec<f32> = (0..h).map(|k| ((k * 104729) % 1000) as f32 / 1000.0 - 0.5).collect();
    let steps = 40;
    for _ in 0..2 {
        let t0 = Instant::now();
        for _ in 0..steps { for m in &full { std::hint::black_box(matmul_q8(&x, 1, m)); } }
        println!("team dynamic: {:.2} ms per head", t0.elapsed().as_secs_f64() * 1e3 / steps as f64 / 4.0);
        let t0 = Instant::now();
        for _ in 0..steps { for hs in &halves { par_for(2, |k| { std::hint::black_box(matmul_q8(&x, 1, &hs[k])); }); } }
        println!("team static halves: {:.2} ms per head", t0.elapsed().as_secs_f64() * 1e3 / steps as f64 / 4.0);
    }
}
