//! `gpu_check attention`: every attention kernel against a float64 host reference on
//! random data (fresh draws per case), for the shapes the engine makes: prefill chunks,
//! decode (q = 1) and verify (q = 1 + K) at batch 1..32, contexts from 1 to 5,000, block
//! tables shuffled over the pool; `mma` (prefill chunks on attention_flash) and `mma-only`
//! side by side. Also checks that the tensor-core kernel is deterministic
//! and batch-invariant (a sequence's rows are bitwise the same alone or in a batch of 32).

use anyhow::{ensure, Result};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use wring_backend::{AttnShape, Backend, KvSpec, SeqInput, StepInput};
use wring_cuda::{AttentionKernel, CudaBackend, CudaOptions, GraphMode};

/// The kernels checked, in the table's column order. `mma` and `mma-staged` take prefill
/// chunks on attention_flash, `mma-only` on attention_mma.
const KERNELS: [AttentionKernel; 5] = [
    AttentionKernel::Mma,
    AttentionKernel::MmaStaged,
    AttentionKernel::MmaOnly,
    AttentionKernel::Split,
    AttentionKernel::Reference,
];

const BLOCK: usize = 16;

struct Case {
    head_dim: usize,
    n_heads: usize,
    n_kv: usize,
    batch: usize,
    q: usize,
    ctx: (usize, usize),
}

/// One step's sequences: context lengths (including the step's q tokens) and tables.
struct Seqs {
    ctx: Vec<usize>,
    tables: Vec<Vec<u32>>,
}

fn step_of(seqs: &Seqs, q: &[usize]) -> StepInput {
    let mut s = StepInput::default();
    for (i, (&c, &ql)) in seqs.ctx.iter().zip(q).enumerate() {
        let start = s.tokens.len();
        s.seqs.push(SeqInput {
            query_start: start,
            query_len: ql,
            context_len: c,
            block_table: seqs.tables[i].clone(),
            prompt_len: 0,
        });
        s.tokens.extend(std::iter::repeat_n(0, ql));
        s.positions.extend((c - ql..c).map(|p| p as u32));
    }
    s
}

fn bf16(x: f32) -> f64 {
    half::bf16::from_f32(x).to_f64()
}

/// Attention of every (token, head) of `step` over the K/V history `kv[seq][pos]`
/// (bf16-rounded), in f64: [T][n_heads * head_dim].
fn reference(
    case: &Case,
    step: &StepInput,
    q: &[f32],
    k_hist: &[Vec<Vec<f32>>],
    v_hist: &[Vec<Vec<f32>>],
) -> Vec<f64> {
    let (d, h, g) = (case.head_dim, case.n_heads, case.n_heads / case.n_kv);
    let scale = 1.0 / (d as f64).sqrt();
    // Parallel over tokens: the check's larger cases are billions of f64 operations.
    let token_seq: Vec<(usize, usize)> = step
        .seqs
        .iter()
        .enumerate()
        .flat_map(|(si, s)| (0..s.query_len).map(move |j| (si, s.query_start + j)))
        .collect();
    let rows: Vec<Vec<f64>> = token_seq
        .par_iter()
        .map(|&(si, t)| {
            let pos = step.positions[t] as usize;
            let mut o = vec![0f64; h * d];
            for head in 0..h {
                let kvh = head / g;
                let qrow = &q[(t * h + head) * d..(t * h + head + 1) * d];
                let scores: Vec<f64> = (0..=pos)
                    .map(|p| {
                        let kr = &k_hist[si][p][kvh * d..(kvh + 1) * d];
                        qrow.iter()
                            .zip(kr)
                            .map(|(a, b)| *a as f64 * bf16(*b))
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                let sum: f64 = w.iter().sum();
                let oh = &mut o[head * d..(head + 1) * d];
                for (p, wp) in w.iter().enumerate() {
                    let vr = &v_hist[si][p][kvh * d..(kvh + 1) * d];
                    for (oi, vi) in oh.iter_mut().zip(vr) {
                        *oi += wp / sum * bf16(*vi);
                    }
                }
            }
            o
        })
        .collect();
    rows.concat()
}

/// Runs `attention` for `step` on `kernel` with q/k/v given; returns the output rows.
fn run(
    b: &mut CudaBackend,
    kernel: AttentionKernel,
    step: &StepInput,
    shape: AttnShape,
    qkv: (&[f32], &[f32], &[f32]),
) -> Result<Vec<f32>> {
    b.set_attention(kernel);
    b.begin_step(step)?;
    let t = step.tokens.len();
    let q = b.upload_activation(t, shape.n_heads * shape.head_dim, qkv.0)?;
    let k = b.upload_activation(t, shape.n_kv_heads * shape.head_dim, qkv.1)?;
    let v = b.upload_activation(t, shape.n_kv_heads * shape.head_dim, qkv.2)?;
    let out = b.attention(0, &q, &k, &v, shape);
    let host = b.to_host(&out);
    drop(out);
    b.finish_step()?;
    ensure!(
        host.len() == t * shape.n_heads * shape.head_dim,
        "attention returned {} values",
        host.len()
    );
    Ok(host)
}

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-9);
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_finite() {
                (*g as f64 - w).abs()
            } else {
                f64::INFINITY
            }
        })
        .fold(0f64, f64::max)
        / scale
}

pub fn check() -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let cases = [
        // 135M shape: head_dim 64, 9 heads, 3 KV heads.
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 1,
            q: 1,
            ctx: (1, 40),
        },
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 32,
            q: 1,
            ctx: (200, 700),
        },
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 32,
            q: 5,
            ctx: (5, 600),
        },
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 32,
            q: 13,
            ctx: (13, 900),
        },
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 3,
            q: 300,
            ctx: (300, 1200),
        },
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 1,
            q: 2,
            ctx: (4000, 5000),
        },
        // Prefill chunks of 17..40 tokens beside shorter ones in one step (both kernels of
        // `mma` in one launch pair), then a 20-token chunk as the step.
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv: 3,
            batch: 8,
            q: 20,
            ctx: (20, 60),
        },
        // llama-3.1-8b shape: head_dim 128, 32 heads, 8 KV heads.
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 1,
            q: 1,
            ctx: (1, 30),
        },
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 8,
            q: 1,
            ctx: (100, 1500),
        },
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 32,
            q: 5,
            ctx: (5, 600),
        },
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 16,
            q: 13,
            ctx: (13, 1800),
        },
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 2,
            q: 200,
            ctx: (200, 700),
        },
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 8,
            q: 24,
            ctx: (24, 70),
        },
        Case {
            head_dim: 128,
            n_heads: 32,
            n_kv: 8,
            batch: 1,
            q: 7,
            ctx: (4000, 5000),
        },
    ];
    println!("## Attention kernels vs a float64 reference (random data)\n");
    println!("| head_dim × heads/KV | batch × q | context | prefill: mma / mma-staged / mma-only / split / reference | step: mma / mma-staged / mma-only / split / reference | deterministic / batch-invariant: mma; mma-staged |");
    println!("|---|---|---|---|---|---|");
    let mut pass = true;
    // ATTENTION_CASES=128:2x200,64:3x300 runs only those cases (head_dim:batch x q).
    let only: Option<Vec<String>> = std::env::var("ATTENTION_CASES")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(|c| c.trim().to_string()).collect());
    // ATTENTION_INV_REPEAT=N: the batch-invariance run N times per kernel.
    let repeat: usize = std::env::var("ATTENTION_INV_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    for case in &cases {
        let label = format!("{}:{}x{}", case.head_dim, case.batch, case.q);
        if only.as_ref().is_some_and(|o| !o.contains(&label)) {
            continue;
        }
        let shape = AttnShape {
            n_heads: case.n_heads,
            n_kv_heads: case.n_kv,
            head_dim: case.head_dim,
        };
        let ctx: Vec<usize> = (0..case.batch)
            .map(|_| rng.gen_range(case.ctx.0..=case.ctx.1).max(case.q))
            .collect();
        let blocks_each: Vec<usize> = ctx.iter().map(|c| c.div_ceil(BLOCK)).collect();
        let num_blocks = blocks_each.iter().sum::<usize>() + 8;
        let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
        ids.shuffle(&mut rng);
        let mut next = 0;
        let tables: Vec<Vec<u32>> = blocks_each
            .iter()
            .map(|&n| {
                next += n;
                ids[next - n..next].to_vec()
            })
            .collect();
        let seqs = Seqs {
            ctx: ctx.clone(),
            tables,
        };
        let mut opts = CudaOptions::from_env()?;
        opts.graphs = GraphMode::Off;
        opts.max_tokens = 8192;
        let mut b = CudaBackend::new(0, opts)?;
        // A matrix as wide as the query rows sizes the activation arena for the uploads.
        let qw = case.n_heads * case.head_dim;
        b.upload_matrix(wring_backend::HostMatrix {
            rows: qw,
            cols: qw,
            data: vec![0.0; qw * qw],
        })?;
        b.alloc_kv(KvSpec {
            layers: 1,
            num_blocks,
            block_size: BLOCK,
            n_kv_heads: case.n_kv,
            head_dim: case.head_dim,
        })?;
        let kvw = case.n_kv * case.head_dim;
        let mut rand_rows = |n: usize, w: usize| -> Vec<f32> {
            (0..n * w).map(|_| rng.gen_range(-2.0f32..2.0)).collect()
        };
        // History of every sequence: [seq][pos][kv]
        let k_hist: Vec<Vec<Vec<f32>>> = ctx
            .iter()
            .map(|&c| (0..c).map(|_| rand_rows(1, kvw)).collect())
            .collect();
        let v_hist: Vec<Vec<Vec<f32>>> = ctx
            .iter()
            .map(|&c| (0..c).map(|_| rand_rows(1, kvw)).collect())
            .collect();
        let gather = |hist: &[Vec<Vec<f32>>], step: &StepInput| -> Vec<f32> {
            let mut out = vec![];
            for (si, s) in step.seqs.iter().enumerate() {
                for j in 0..s.query_len {
                    out.extend_from_slice(&hist[si][step.positions[s.query_start + j] as usize]);
                }
            }
            out
        };
        let mut cells = vec![];
        // Prefill of everything before the step's q tokens, in steps of at most ~6,000
        // tokens (groups of sequences), then the step itself.
        let pre: Vec<usize> = ctx.iter().map(|c| c - case.q).collect();
        let mut groups: Vec<Vec<usize>> = vec![];
        for i in (0..case.batch).filter(|&i| pre[i] > 0) {
            match groups.last_mut() {
                Some(g) if g.iter().map(|&j| pre[j]).sum::<usize>() + pre[i] <= 6000 => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        let mut phases: Vec<(Vec<usize>, bool)> = groups.into_iter().map(|g| (g, false)).collect();
        phases.push(((0..case.batch).collect(), true));
        let mut pre_errs = [0f64; KERNELS.len()];
        let mut any_pre = false;
        let mut firsts: Vec<Vec<f32>> = vec![vec![]; 2];
        for (kept, is_step) in phases {
            let sub = Seqs {
                ctx: kept
                    .iter()
                    .map(|&i| if is_step { ctx[i] } else { pre[i] })
                    .collect(),
                tables: kept.iter().map(|&i| seqs.tables[i].clone()).collect(),
            };
            let ql: Vec<usize> = kept
                .iter()
                .map(|&i| if is_step { case.q } else { pre[i] })
                .collect();
            let step = step_of(&sub, &ql);
            let kh: Vec<Vec<Vec<f32>>> = kept.iter().map(|&i| k_hist[i].clone()).collect();
            let vh: Vec<Vec<Vec<f32>>> = kept.iter().map(|&i| v_hist[i].clone()).collect();
            let q = rand_rows(step.tokens.len(), qw);
            let (k, v) = (gather(&kh, &step), gather(&vh, &step));
            let want = reference(case, &step, &q, &kh, &vh);
            let mut errs = vec![];
            for (ki, kernel) in KERNELS.into_iter().enumerate() {
                let got = run(&mut b, kernel, &step, shape, (&q, &k, &v))?;
                let limit = if matches!(
                    kernel,
                    AttentionKernel::Mma | AttentionKernel::MmaStaged | AttentionKernel::MmaOnly
                ) {
                    2e-2
                } else {
                    1e-2
                };
                let e = rel_err(&got, &want);
                pass &= e < limit;
                if is_step {
                    errs.push(format!("{e:.1e}{}", if e < limit { "" } else { " FAIL" }));
                    if ki < firsts.len() {
                        firsts[ki] = got;
                    }
                } else {
                    any_pre = true;
                    pre_errs[ki] = pre_errs[ki].max(e);
                }
            }
            if !is_step {
                continue;
            }
            cells.push(if any_pre {
                pre_errs
                    .iter()
                    .map(|e| format!("{e:.1e}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            } else {
                "—".to_string()
            });
            cells.push(errs.join(" / "));
            let mut flags = vec![];
            for (kernel, first) in KERNELS.into_iter().zip(&firsts) {
                // Deterministic: the same launch again gives the same bits.
                let again = run(&mut b, kernel, &step, shape, (&q, &k, &v))?;
                let det = again
                    .iter()
                    .zip(first)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                // Batch-invariant: the first sequence alone gives its rows' bits.
                let alone = step_of(
                    &Seqs {
                        ctx: vec![ctx[0]],
                        tables: vec![seqs.tables[0].clone()],
                    },
                    &[case.q],
                );
                let n0 = case.q;
                let mut inv = true;
                for _ in 0..repeat {
                    let got0 = run(
                        &mut b,
                        kernel,
                        &alone,
                        shape,
                        (&q[..n0 * qw], &k[..n0 * kvw], &v[..n0 * kvw]),
                    )?;
                    let diffs: Vec<usize> = (0..n0 * qw)
                        .filter(|&i| got0[i].to_bits() != first[i].to_bits())
                        .collect();
                    if let Some(&i0) = diffs.first() {
                        inv = false;
                        let max = diffs
                            .iter()
                            .map(|&i| (got0[i] - first[i]).abs())
                            .fold(0f32, f32::max);
                        let d = case.head_dim;
                        println!(
                            "<!-- {label} {kernel:?}: alone differs from the batch in {} of {} values (max |diff| {max:.3e}); first at token {}, head {}, dim {}; tokens differing: {:?} -->",
                            diffs.len(),
                            n0 * qw,
                            i0 / qw,
                            i0 % qw / d,
                            i0 % d,
                            {
                                let mut t: Vec<usize> = diffs.iter().map(|i| i / qw).collect();
                                t.dedup();
                                t.truncate(12);
                                t
                            }
                        );
                    }
                }
                let yes = |ok: bool| if ok { "yes" } else { "NO" };
                pass &= det && inv;
                flags.push(format!("{} / {}", yes(det), yes(inv)));
            }
            cells.push(flags.join("; "));
        }
        println!(
            "| {} × {}/{} | {} × {} | {}..{} | {} |",
            case.head_dim,
            case.n_heads,
            case.n_kv,
            case.batch,
            case.q,
            ctx.iter().min().unwrap_or(&0),
            ctx.iter().max().unwrap_or(&0),
            cells.join(" | ")
        );
    }
    println!("\nRESULT attention: {}", if pass { "PASS" } else { "FAIL" });
    Ok(())
}
