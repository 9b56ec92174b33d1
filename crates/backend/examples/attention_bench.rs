//! Times the CPU attention kernels on a prefill chunk: 32 query rows of one head at
//! the end of a context of N keys (SmolLM2-135M's shape: 9 query heads over 3 KV heads,
//! head_dim 64, 16-token blocks), one thread, every kernel this CPU has, and prints the
//! rate in attended (query, key) pairs and in FMA lanes (4 · head_dim a pair).
//!
//!   cargo run --release -p wring-backend --example attention_bench [-- 512 2048 4096]
//!   ATTN_ROWS=64 cargo run ...   # query rows a call (default 32, the backend's chunk)
use std::time::Instant;
use wring_backend::cpu::attention::{attend_on, Kernel};
use wring_backend::{AttnShape, SeqInput};

fn main() {
    let contexts: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("context lengths"))
        .collect();
    let contexts = if contexts.is_empty() {
        vec![512, 2048, 4096]
    } else {
        contexts
    };
    let shape = AttnShape {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
    };
    let bs = 16;
    let rows: usize = std::env::var("ATTN_ROWS").map_or(32, |v| v.parse().expect("ATTN_ROWS"));
    for ctx in contexts {
        let blocks = ctx.div_ceil(bs);
        let pool = blocks * bs * shape.n_kv_heads * shape.head_dim;
        let fill = |seed: u64| -> Vec<f32> {
            let mut x = seed;
            (0..pool)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
                })
                .collect()
        };
        let (k, v) = (fill(1), fill(2));
        let q = fill(3)[..rows * shape.n_heads * shape.head_dim].to_vec();
        let seq = SeqInput {
            query_start: 0,
            query_len: rows,
            context_len: ctx,
            block_table: (0..blocks as u32).rev().collect(),
        };
        let pairs: usize = (0..rows).map(|j| ctx - rows + 1 + j).sum::<usize>() * shape.n_heads;
        for kernel in [Kernel::Reference, Kernel::Avx2, Kernel::Avx512] {
            if !kernel.available() {
                continue;
            }
            let run = || {
                for h in 0..shape.n_heads {
                    std::hint::black_box(attend_on(kernel, &seq, h, &q, &k, &v, shape, bs));
                }
            };
            run();
            let reps = (2e8 / pairs as f64).ceil() as usize;
            let reps = if kernel == Kernel::Reference {
                reps.div_ceil(8)
            } else {
                reps
            };
            let t = Instant::now();
            for _ in 0..reps {
                run();
            }
            let secs = t.elapsed().as_secs_f64() / reps as f64;
            let per_pair_ns = secs * 1e9 / pairs as f64;
            let lanes = (4 * shape.head_dim * pairs) as f64 / secs / 1e9;
            println!(
                "ctx {ctx:5} {kernel:?}: {:8.3} ms for {pairs} pairs, {per_pair_ns:.3} ns a pair, {lanes:.1} G FMA lanes/s",
                secs * 1e3
            );
        }
    }
}
