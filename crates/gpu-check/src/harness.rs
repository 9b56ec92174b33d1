//! What the checks share: runners on GPU 0 (a GGUF model or dummy weights of a named
//! shape), step inputs and block tables, the speculative-verify check, step timing, and
//! small helpers for logits and result files.

use anyhow::{Context, Result};
use serde_json::Value;
use std::time::Instant;
use wring_backend::{SeqInput, StepInput};
use wring_cuda::{CudaBackend, CudaOptions, GraphMode};
use wring_model::llama::LlamaRunner;
use wring_model::weights::WeightSource;
use wring_model::{ModelConfig, ModelRunner};

pub const BLOCK: usize = 16;

pub type Runner = LlamaRunner<CudaBackend>;

/// Weights of the model at `path`, or deterministic random weights of the default
/// model's shape when `path` is "dummy".
pub fn model_source(path: &str) -> Result<(ModelConfig, WeightSource)> {
    // `dummy`: random SmolLM2-135M weights (head_dim 64); `dummy-8b`: llama-3.1-8b (128).
    // `dummy-gguf`: the 135M shape with llama.cpp's interleaved RoPE pairs (as the GGUF).
    // `dummy:<shape>`: any named shape (`dummy:qwen3-8b`); `dummy:<shape>:<layers>` its first
    // layers only (`dummy:qwen3-30b-a3b:2`: the MoE shape at a size a CPU f32 copy fits beside).
    let shape = match path {
        "dummy" | "dummy-gguf" => Some("smollm2-135m"),
        "dummy-8b" => Some("llama-3.1-8b"),
        _ => path.strip_prefix("dummy:"),
    };
    if let Some(shape) = shape {
        let mut cfg = ModelConfig::shape_spec(shape).context("dummy:<shape>[:<layers>]")?;
        if path == "dummy-gguf" {
            cfg.rope_interleaved = true;
        }
        return Ok((cfg, WeightSource::Dummy { seed: 0 }));
    }
    let cfg = wring_model::load_model(&wring_model::ModelSpec {
        model: Some(path.into()),
        ..Default::default()
    })?
    .config;
    // A Hugging Face directory (the transformers-made tiny models under tests/data/hf_tiny
    // among them) or a GGUF file.
    let weights = if std::path::Path::new(path).is_dir() {
        WeightSource::Safetensors(wring_model::weights::SafetensorsSet::open(path.as_ref())?)
    } else {
        WeightSource::Gguf(wring_model::gguf::GgufFile::open(path.as_ref())?)
    };
    Ok((cfg, weights))
}

/// A runner on GPU 0 with deterministic random weights of the named shape (8,192 KV blocks).
pub fn dummy_runner(shape: &str) -> Result<(Runner, ModelConfig)> {
    let cfg = ModelConfig::named_shape(shape).context("shape")?;
    let backend = CudaBackend::new(0, CudaOptions::from_env()?)?;
    let r = LlamaRunner::new(
        backend,
        cfg.clone(),
        &WeightSource::Dummy { seed: 0 },
        8192,
        BLOCK,
    )?;
    Ok((r, cfg))
}

/// The comma-separated names in environment variable `var`, else in `default`.
pub fn env_list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|v| v.trim().to_string())
        .collect()
}

/// `rows` as pretty JSON into `dir/name` (the folder made first).
pub fn write_json(dir: &str, name: &str, rows: &[serde_json::Value]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(format!("{dir}/{name}"), serde_json::to_string_pretty(rows)?)?;
    Ok(())
}

pub fn gguf_runner(
    path: &str,
    graphs: GraphMode,
    num_blocks: usize,
) -> Result<(Runner, ModelConfig)> {
    let opts = CudaOptions {
        graphs,
        ..CudaOptions::from_env()?
    };
    gguf_runner_with(path, opts, num_blocks)
}

pub fn gguf_runner_with(
    path: &str,
    opts: CudaOptions,
    num_blocks: usize,
) -> Result<(Runner, ModelConfig)> {
    let (cfg, src) = model_source(path)?;
    let backend = CudaBackend::new(0, opts)?;
    Ok((
        LlamaRunner::new(backend, cfg.clone(), &src, num_blocks, BLOCK)?,
        cfg,
    ))
}

/// One step of `seqs` sequences, each adding `new[i]` tokens after `ctx[i]` cached ones,
/// with blocks `first_block[i]..` and logits for every new token.
pub fn step(new: &[Vec<u32>], ctx: &[usize], tables: &[Vec<u32>]) -> StepInput {
    let mut s = StepInput::default();
    for (i, toks) in new.iter().enumerate() {
        let start = s.tokens.len();
        s.seqs.push(SeqInput {
            query_start: start,
            query_len: toks.len(),
            context_len: ctx[i] + toks.len(),
            block_table: tables[i].clone(),
            prompt_len: 0,
        });
        s.tokens.extend_from_slice(toks);
        s.positions
            .extend((ctx[i]..ctx[i] + toks.len()).map(|p| p as u32));
        s.logit_rows.extend(start..start + toks.len());
    }
    s
}

/// The step run eagerly in its graph's layout (`PadOnly`), then four times with graphs on
/// (first sighting, capture, two replays; re-running a step rewrites the same K/V, so each
/// run sees the same state): the eager logits, and whether every run matched them bitwise.
pub fn replays_match_eager(r: &mut Runner, s: &StepInput) -> Result<(Vec<f32>, bool)> {
    r.backend_mut().set_graph_mode(GraphMode::PadOnly);
    let eager = r.forward(s)?.data;
    r.backend_mut().set_graph_mode(GraphMode::On);
    let runs: Vec<Vec<f32>> = (0..4)
        .map(|_| r.forward(s).map(|l| l.data))
        .collect::<Result<_>>()?;
    let ok = runs.iter().all(|x| same(x, &eager));
    Ok((eager, ok))
}

/// Greedy verification of one sequence's verify row: `row` holds the target's k + 1
/// argmax ids for `fed` (the last emitted token, then k drafts). Appends the targets of
/// the drafts accepted while they equal them, then the bonus token, stopping once `out`
/// holds `gen` tokens; returns how many it appended.
pub fn accept_greedy(row: &[u32], fed: &[u32], out: &mut Vec<u32>, gen: usize) -> usize {
    let k = row.len() - 1;
    let mut emitted = 0;
    for j in 0..k {
        if out.len() >= gen {
            break;
        }
        out.push(row[j]);
        emitted += 1;
        if row[j] != fed[j + 1] {
            break;
        }
    }
    if emitted == k && out.len() < gen {
        out.push(row[k]);
        emitted += 1;
    }
    emitted
}

/// Prefills each prompt as a step of its own, `prompts[i]` into the blocks `tables[i]`.
/// Runs `one_model` on each model `env` lists (comma-separated; `default` when unset),
/// writes the rows they push to OUT_DIR/`file` and prints `RESULT name: PASS|FAIL` (a
/// model that errors fails the check and the others still run).
pub fn run_per_model(
    name: &str,
    env: &str,
    default: &str,
    out_dir: Option<&str>,
    file: &str,
    mut one_model: impl FnMut(&str, &mut Vec<Value>) -> Result<bool>,
) -> Result<()> {
    let models = std::env::var(env).unwrap_or_else(|_| default.into());
    let mut pass = true;
    let mut rows = vec![];
    for model in models.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        match one_model(model, &mut rows) {
            Ok(ok) => pass &= ok,
            Err(e) => {
                pass = false;
                println!("\n{model}: error: {e:#}");
            }
        }
    }
    if let Some(dir) = out_dir {
        write_json(dir, file, &rows)?;
    }
    println!("\nRESULT {name}: {}", if pass { "PASS" } else { "FAIL" });
    Ok(())
}

/// The small-step checks' context: eight sequences of 40 + 9 i prompt tokens prefilled
/// into block tables of 40 blocks each. Returns the tables and each sequence's length.
pub fn prefill_eight(r: &mut Runner) -> Result<(Vec<Vec<u32>>, Vec<usize>)> {
    let batch = 8;
    let tabs = tables(batch, 40);
    let ps: Vec<Vec<u32>> = (0..batch)
        .map(|i| {
            (0..(40 + 9 * i))
                .map(|j| (200 + 31 * j + 577 * i) as u32 % 30000 + 5)
                .collect()
        })
        .collect();
    prefill_each(r, &ps, &tabs)?;
    Ok((tabs, ps.iter().map(Vec::len).collect()))
}

pub fn prefill_each(r: &mut Runner, prompts: &[Vec<u32>], tables: &[Vec<u32>]) -> Result<()> {
    for (i, p) in prompts.iter().enumerate() {
        r.forward(&step(std::slice::from_ref(p), &[0], &tables[i..i + 1]))?;
    }
    Ok(())
}

pub fn tables(n: usize, blocks_each: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| ((i * blocks_each) as u32..((i + 1) * blocks_each) as u32).collect())
        .collect()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default()
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Bitwise comparison of logit sets.
pub fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

pub fn prompts(n: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            (0..(20 + 7 * i))
                .map(|j| (100 + 37 * j + 1009 * i) as u32 % 40000 + 10)
                .collect()
        })
        .collect()
}

/// Tokens each sequence generates in `spec_check`.
pub const SPEC_GEN: usize = 48;

/// Greedy decode vs speculative verify (oracle drafts with one wrong token in three
/// drafts) for `batch` sequences: does the verify path emit exactly the plain greedy
/// tokens? (K, matching tokens, identical sequences) per K.
pub fn spec_check(
    r: &mut Runner,
    batch: usize,
    ks: &[usize],
) -> Result<Vec<(usize, usize, usize)>> {
    let gen = SPEC_GEN;
    let ps = prompts(batch);
    let (mut plain, mut ctx_p) = (
        vec![vec![]; batch],
        ps.iter().map(Vec::len).collect::<Vec<_>>(),
    );
    // Blocks for the longest prompt, the generated tokens and a last verify step.
    let longest = ps.iter().map(Vec::len).max().unwrap_or(0);
    let each = 16.max((longest + gen + ks.iter().max().unwrap_or(&0) + 1).div_ceil(BLOCK));
    let second = (batch * each) as u32;
    let tabs2 = tables(batch, each)
        .into_iter()
        .map(|t| t.iter().map(|b| b + 200).collect())
        .collect::<Vec<Vec<u32>>>();
    let firsts = r.forward_greedy(&{
        let mut s = step(&ps, &vec![0; batch], &tabs2);
        s.logit_rows = (0..batch)
            .map(|i| ps[..=i].iter().map(Vec::len).sum::<usize>() - 1)
            .collect();
        s
    })?;
    for i in 0..batch {
        plain[i].push(firsts[i]);
    }
    while plain[0].len() < gen {
        let new: Vec<Vec<u32>> = plain.iter().map(|p| vec![*p.last().unwrap()]).collect();
        let out = r.forward_greedy(&step(&new, &ctx_p, &tabs2))?;
        for i in 0..batch {
            plain[i].push(out[i]);
            ctx_p[i] += 1;
        }
    }
    let mut results = vec![];
    for &k in ks {
        let tabs3: Vec<Vec<u32>> = tabs2
            .iter()
            .map(|t| t.iter().map(|b| b + second).collect())
            .collect();
        let mut spec: Vec<Vec<u32>> = (0..batch).map(|i| vec![plain[i][0]]).collect();
        let mut ctx_s: Vec<usize> = ps.iter().map(Vec::len).collect();
        // Prefill the prompts into the new blocks.
        prefill_each(r, &ps, &tabs3)?;
        let mut round = 0;
        while spec.iter().any(|s| s.len() < gen) {
            round += 1;
            let new: Vec<Vec<u32>> = (0..batch)
                .map(|i| {
                    let at = spec[i].len();
                    let mut d = vec![*spec[i].last().unwrap()];
                    for j in 0..k {
                        let truth = plain[i].get(at + j).copied().unwrap_or(7);
                        d.push(if (round + i + j) % 3 == 0 && j == k / 2 {
                            truth ^ 1
                        } else {
                            truth
                        });
                    }
                    d
                })
                .collect();
            let out = r.forward_greedy(&step(&new, &ctx_s, &tabs3))?;
            for i in 0..batch {
                let row = &out[i * (k + 1)..(i + 1) * (k + 1)];
                // The last emitted token is fed next round.
                ctx_s[i] += accept_greedy(row, &new[i], &mut spec[i], gen);
            }
        }
        let pos: usize = (0..batch)
            .map(|i| (0..gen).filter(|&j| spec[i][j] == plain[i][j]).count())
            .sum();
        let seqs = (0..batch)
            .filter(|&i| spec[i][..gen] == plain[i][..gen])
            .count();
        results.push((k, pos, seqs));
    }
    Ok(results)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median wall time of `steps` greedy steps of `batch` sequences with `q` tokens each,
/// after `ctx` tokens of prefill per sequence.
pub fn time_steps(r: &mut Runner, batch: usize, q: usize, ctx: usize, steps: usize) -> Result<f64> {
    time_steps_profiled(r, batch, q, ctx, steps, false)
}

pub fn time_steps_profiled(
    r: &mut Runner,
    batch: usize,
    q: usize,
    ctx: usize,
    steps: usize,
    profiled: bool,
) -> Result<f64> {
    let blocks_each = (ctx + steps * q + 64).div_ceil(BLOCK);
    // GPU_CHECK_CHUNK=N: each step also carries a fresh N-token prompt chunk (its own
    // table; the same positions every step), the serving steps that admit a prompt.
    let chunk: usize = std::env::var("GPU_CHECK_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut tabs = tables(batch + 1, blocks_each.max(chunk.div_ceil(BLOCK)));
    let chunk_table = tabs.pop().expect("one more table");
    for chunk in (0..batch).collect::<Vec<_>>().chunks(8) {
        let new: Vec<Vec<u32>> = chunk
            .iter()
            .map(|&i| {
                (0..ctx)
                    .map(|j| (1000 + i * 7 + j) as u32 % 30000)
                    .collect()
            })
            .collect();
        let t: Vec<Vec<u32>> = chunk.iter().map(|&i| tabs[i].clone()).collect();
        r.forward_greedy(&step(&new, &vec![0; chunk.len()], &t))?;
    }
    let mut c = vec![ctx; batch];
    let mut times = vec![];
    if profiled {
        wring_cuda::set_profiler(true);
    }
    for _ in 0..steps {
        let new: Vec<Vec<u32>> = (0..batch)
            .map(|i| (0..q).map(|j| (300 + i + j) as u32).collect())
            .collect();
        let mut s = step(&new, &c, &tabs);
        if chunk > 0 {
            let toks: Vec<u32> = (0..chunk).map(|j| (3000 + 17 * j) as u32 % 30000).collect();
            let mut with = step(&[toks], &[0], std::slice::from_ref(&chunk_table));
            // The chunk asks for its last token's logits only, as the engine does.
            let rows = s.tokens.len();
            s.seqs.push(SeqInput {
                query_start: rows,
                ..with.seqs.remove(0)
            });
            s.tokens.append(&mut with.tokens);
            s.positions.append(&mut with.positions);
            s.logit_rows.push(rows + chunk - 1);
        }
        let t0 = Instant::now();
        r.forward_greedy(&s)?;
        times.push(t0.elapsed().as_secs_f64());
        for x in c.iter_mut() {
            *x += q;
        }
    }
    if profiled {
        wring_cuda::set_profiler(false);
    }
    Ok(median(times[times.len().min(2)..].to_vec()))
}

/// Rows of two logit matrices whose argmax agrees, and the row count. Information only:
/// a flip needs a top-2 margin within twice the largest logit difference, which the
/// tolerance on that difference already bounds (dummy weights give many such near-ties).
pub fn argmax_agreement(reference: &[f32], other: &[f32], cols: usize) -> (usize, usize) {
    let rows = reference.len() / cols.max(1);
    let argmax = |x: &[f32], row: usize| {
        let r = &x[row * cols..(row + 1) * cols];
        (0..cols)
            .max_by(|&a, &b| r[a].total_cmp(&r[b]))
            .unwrap_or(0)
    };
    let agree = (0..rows)
        .filter(|&i| argmax(reference, i) == argmax(other, i))
        .count();
    (agree, rows)
}
