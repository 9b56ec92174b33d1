//! Times the CPU attention kernels on a prefill chunk: 32 query rows of one head at
//! the end of a context of N keys (SmolLM2-135M's shape: 9 query heads over 3 KV heads,
//! head_dim 64, 16-token blocks), one thread, every kernel this CPU has, and prints the
//! rate in attended (query, key) pairs and in FMA lanes (4 · head_dim a pair); then the
//! bf16 AMX-tile kernel for prompt rows where the CPU has it (`Bf16Amx`).
//!
//!   cargo run --release -p wring-backend --example attention_bench [-- 512 2048 4096]
//!   ATTN_ROWS=64 cargo run ...   # query rows a call (default 32, the backend's chunk)
//!   ATTN_KERNELS=Bf16Amx cargo run ...   # only these kernels (comma-separated names)
use std::time::Instant;
use wring_backend::cpu::attention::{attend_on, Kernel};
use wring_backend::cpu::attention_amx::attend_prompt_bf16;
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
        let fill = |seed: u64, len: usize| -> Vec<f32> {
            let mut x = seed;
            (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
                })
                .collect()
        };
        // On cache-line boundaries, as the backend's pools are.
        let (k, v) = (fill(1, pool + 16), fill(2, pool + 16));
        let at_line = |x: &[f32]| (64 - x.as_ptr() as usize % 64) % 64 / 4;
        let (k, v) = (&k[at_line(&k)..][..pool], &v[at_line(&v)..][..pool]);
        let q = fill(3, rows * shape.n_heads * shape.head_dim);
        let seq = SeqInput {
            query_start: 0,
            query_len: rows,
            context_len: ctx,
            block_table: (0..blocks as u32).rev().collect(),
            prompt_len: 0,
        };
        let pairs: usize = (0..rows).map(|j| ctx - rows + 1 + j).sum::<usize>() * shape.n_heads;
        let amx = wring_backend::cpu::attention_amx::available();
        for (kernel, bf16) in [
            (Kernel::Reference, false),
            (Kernel::Avx2, false),
            (Kernel::Avx512, false),
            (Kernel::Avx512, true),
        ] {
            if !kernel.available() || (bf16 && !amx) {
                continue;
            }
            // bf16: one call per KV head (its query heads share the K/V tiles), as the
            // backend's tasks do.
            let group = shape.n_heads / shape.n_kv_heads;
            let run = || {
                if bf16 {
                    for h in (0..shape.n_heads).step_by(group) {
                        std::hint::black_box(attend_prompt_bf16(
                            &seq,
                            h..h + group,
                            &q,
                            k,
                            v,
                            shape,
                            bs,
                        ));
                    }
                } else {
                    for h in 0..shape.n_heads {
                        std::hint::black_box(attend_on(kernel, &seq, h, &q, k, v, shape, bs));
                    }
                }
            };
            let name = if bf16 {
                "Bf16Amx".to_string()
            } else {
                format!("{kernel:?}")
            };
            if let Ok(only) = std::env::var("ATTN_KERNELS") {
                if !only.split(',').any(|k| k == name) {
                    continue;
                }
            }
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
                "ctx {ctx:5} {name}: {:8.3} ms for {pairs} pairs, {per_pair_ns:.3} ns a pair, {lanes:.1} G FMA lanes/s",
                secs * 1e3
            );
        }
    }
}
