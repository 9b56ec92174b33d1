//! Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3 as GGUF files: tests/data/gguf_tiny holds the tiny
//! transformers-made models of tests/data/hf_tiny as llama.cpp lays them out
//! (scripts/reference/gguf_tiny_models.py: `qwen3`, `qwen3moe` with stacked experts, and
//! Mixtral as `llama` with experts and permuted q/k rows). Each file loads with the
//! configuration of its Hugging Face directory, renders transformers' chat templates,
//! reproduces transformers' logits at every prompt position within 1e-3 and its 32 greedy
//! tokens exactly, and gives the logits of the safetensors load (the same bits where q/k
//! rows are stored alike; within 1e-3 for Mixtral's permuted rows, in f32 and with q8/q4
//! CPU weights, experts included). The Q8_0 file runs as q8 and keeps the greedy tokens;
//! experts stacked as Q8_0 blocks read as their own rows; experts stored apart (files from
//! before llama.cpp stacked them) read as the stacked ones; `rope_freqs.weight` scales the
//! RoPE frequencies as Llama 3.x files mean it; malformed files are refused naming the key
//! or tensor.

#[allow(dead_code)]
mod support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use support::{argmax, decode_step, floats, ids, prompt_logits, test_data_dir};
use wring_model::gguf::{GgmlType, GgufFile, MetaValue};
use wring_model::{load_model, CpuWeights, LoadedModel, ModelRunner, ModelSpec, RunnerOptions};

const TOL: f32 = 1e-3;

fn gguf_path(file: &str) -> PathBuf {
    test_data_dir().join("gguf_tiny").join(file)
}

fn reference(name: &str) -> Value {
    let path = test_data_dir().join(format!("hf_tiny/{name}.reference.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn try_load(path: &Path) -> anyhow::Result<LoadedModel> {
    load_model(&ModelSpec {
        model: Some(path.to_string_lossy().into_owned()),
        ..Default::default()
    })
}

fn load(path: &Path) -> LoadedModel {
    try_load(path).unwrap_or_else(|e| panic!("{} loads: {e:#}", path.display()))
}

/// Each file fails to load with an error that holds its message and names the file.
fn assert_refused(cases: Vec<(PathBuf, &str)>) {
    for (path, want) in cases {
        let err = load_err(&path);
        assert!(err.contains(want), "{}: {err}", path.display());
        assert!(
            err.contains(&path.display().to_string()),
            "the error names the file: {err}"
        );
    }
}

fn load_err(path: &Path) -> String {
    match try_load(path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

fn runner(m: LoadedModel, cpu_weights: CpuWeights) -> Box<dyn ModelRunner> {
    let opts = RunnerOptions {
        kv_cache_bytes: 16 << 20,
        max_model_len: 256,
        cpu_weights,
        ..Default::default()
    };
    let w = m.cpu_weights(cpu_weights);
    m.into_runner(&RunnerOptions {
        cpu_weights: w,
        ..opts
    })
    .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// `n` greedy tokens after `prompt` (prefilled, then one decode step a token), with the
/// logits each was chosen from.
fn greedy(r: &mut dyn ModelRunner, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let bs = r.block_size();
    let blocks: Vec<u32> = (0..((prompt.len() + n).div_ceil(bs) as u32)).collect();
    let mut logits = prompt_logits(r, prompt).pop().unwrap();
    let mut seq = prompt.to_vec();
    let (mut out, mut steps) = (vec![], vec![]);
    loop {
        let next = argmax(&logits);
        out.push(next);
        steps.push(logits);
        seq.push(next);
        if out.len() == n {
            return (out, steps);
        }
        let step = decode_step(next, seq.len(), blocks.clone(), prompt.len());
        logits = r.forward(&step).unwrap().row(0).to_vec();
    }
}

fn prompts(rf: &Value) -> Vec<Vec<u32>> {
    rf["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect()
}

/// The GGUF file `file` against transformers' reference of `name` and against the
/// Hugging Face directory's load; `exact`: the two loads give the same bits.
fn check_model(file: &str, name: &str, model_type: &str, exact: bool) {
    let rf = reference(name);
    let g = load(&gguf_path(file));
    let hf = load(&test_data_dir().join("hf_tiny").join(name));
    assert_eq!(g.config.architecture, model_type);
    let mut want = hf.config.clone();
    // llama.cpp permutes a llama file's q/k rows for adjacent-pair RoPE.
    want.rope_interleaved = name == "mixtral";
    assert_eq!(g.config, want, "{file}: the directory's configuration");

    // Chat templates: transformers' renderings and ids, from the file's own keys.
    let template = g.chat_template.clone().expect("a chat template");
    for chat in rf["chats"].as_array().unwrap() {
        let text = template.render_json(&chat["messages"], None, true).unwrap();
        assert_eq!(text, chat["text"].as_str().unwrap(), "{file}: rendering");
        assert_eq!(g.tokenizer.encode(&text).unwrap(), ids(&chat["ids"]));
    }
    let eos = g.tokenizer.token_to_id(template.eos_token()).unwrap();
    assert!(g.eos_token_ids.contains(&eos), "{file}: stops at its eos");
    // Every token decodes as the directory's tokenizer decodes it, special tokens skipped
    // alike (Qwen3's <think> is text, not a control token).
    for id in 0..g.config.vocab_size as u32 {
        for skip in [false, true] {
            assert_eq!(
                g.tokenizer.decode(&[id], skip).unwrap(),
                hf.tokenizer.decode(&[id], skip).unwrap(),
                "{file}: token {id}"
            );
        }
    }
    let tok = g.tokenizer.clone();

    let mut r = runner(g, CpuWeights::F32);
    let mut r_hf = runner(hf, CpuWeights::F32);
    for (p_i, p) in rf["prompts"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&p["ids"]);
        assert_eq!(tok.encode(p["text"].as_str().unwrap()).unwrap(), prompt);
        let got = prompt_logits(r.as_mut(), &prompt);
        let from_dir = prompt_logits(r_hf.as_mut(), &prompt);
        let (mut worst_ref, mut worst_dir) = (0f32, 0f32);
        for (pos, (g, w)) in got.iter().zip(p["logits"].as_array().unwrap()).enumerate() {
            let d = max_diff(g, &floats(w));
            assert!(
                d < TOL,
                "{file}: prompt {p_i} position {pos}: |Δ logit| {d} vs transformers"
            );
            worst_ref = worst_ref.max(d);
            let d = max_diff(g, &from_dir[pos]);
            if exact {
                assert!(
                    g == &from_dir[pos],
                    "{file}: prompt {p_i} position {pos}: not the directory's bits ({d})"
                );
            }
            assert!(
                d < TOL,
                "{file}: prompt {p_i} position {pos}: |Δ| {d} vs the directory"
            );
            worst_dir = worst_dir.max(d);
        }
        println!(
            "{file}: prompt {p_i}: {} positions, largest |Δ logit| {worst_ref:.2e} vs transformers, {worst_dir:.2e} vs the safetensors load",
            got.len()
        );
        let (out, steps) = greedy(r.as_mut(), &prompt, 32);
        for (i, (st, lg)) in p["steps"]
            .as_array()
            .unwrap()
            .iter()
            .zip(&steps)
            .enumerate()
        {
            for (id, want) in ids(&st["top_ids"]).iter().zip(floats(&st["top_logits"])) {
                let d = (lg[*id as usize] - want).abs();
                assert!(
                    d < TOL,
                    "{file}: prompt {p_i} step {i}: logit of {id} off by {d}"
                );
            }
        }
        assert_eq!(
            out,
            ids(&p["greedy_ids"]),
            "{file}: prompt {p_i}: greedy ids"
        );
    }
}

#[test]
fn qwen3_gguf_matches_transformers_and_the_safetensors_load() {
    check_model("qwen3.gguf", "qwen3", "qwen3", true);
}

#[test]
fn qwen3_moe_gguf_matches_transformers_and_the_safetensors_load() {
    let g = load(&gguf_path("qwen3_moe.gguf"));
    let moe = g.config.moe.as_ref().expect("experts");
    assert_eq!(
        (moe.num_experts, moe.top_k, moe.expert_intermediate_size),
        (16, 4, 32)
    );
    assert!(
        moe.norm_topk_prob,
        "llama.cpp renormalises qwen3moe routing weights"
    );
    assert_eq!(
        moe.dense_layers,
        vec![1],
        "the layer without a router is dense"
    );
    check_model("qwen3_moe.gguf", "qwen3_moe", "qwen3_moe", true);
}

#[test]
fn mixtral_gguf_matches_transformers_and_the_safetensors_load() {
    let g = load(&gguf_path("mixtral.gguf"));
    let f = GgufFile::open(&gguf_path("mixtral.gguf")).unwrap();
    assert_eq!(f.get_str("general.architecture"), Some("llama"));
    assert!(g.config.rope_interleaved);
    let moe = g.config.moe.as_ref().expect("experts");
    assert_eq!(
        (moe.num_experts, moe.top_k, moe.expert_intermediate_size),
        (8, 2, 64)
    );
    check_model("mixtral.gguf", "mixtral", "mixtral", false);
}

/// With q8 and q4 CPU weights the experts take the dense weights' format from either
/// source: the GGUF file gives the directory's logits (the same bits for Qwen3-MoE; for
/// Mixtral, whose permuted q/k rows sum in another order, the last-bit differences can
/// round an activation to the next q8 step, so within 0.1).
#[test]
fn quantized_cpu_weights_hold_gguf_experts_as_they_hold_the_directorys() {
    for (name, exact) in [("qwen3_moe", true), ("mixtral", false)] {
        let prompts = prompts(&reference(name));
        for w in [CpuWeights::Q8, CpuWeights::Q4] {
            let mut g = runner(load(&gguf_path(&format!("{name}.gguf"))), w);
            let mut hf = runner(load(&test_data_dir().join("hf_tiny").join(name)), w);
            let mut worst = 0f32;
            for p in &prompts {
                let a = prompt_logits(g.as_mut(), p);
                let b = prompt_logits(hf.as_mut(), p);
                for (x, y) in a.iter().zip(&b) {
                    let d = max_diff(x, y);
                    worst = worst.max(d);
                    assert!(
                        if exact { x == y } else { d < 0.1 },
                        "{name} {w:?}: |Δ| {d} between the GGUF and the directory"
                    );
                }
            }
            println!(
                "{name} {w:?}: largest |Δ logit| {worst:.2e} between the GGUF and the directory"
            );
        }
    }
}

#[test]
fn q8_0_gguf_runs_as_q8_and_keeps_transformers_greedy_tokens() {
    let path = gguf_path("qwen3.Q8_0.gguf");
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors["blk.0.attn_q.weight"].ty, GgmlType::Q8_0);
    assert_eq!(f.tensors["blk.0.attn_q_norm.weight"].ty, GgmlType::F32);
    let m = load(&path);
    assert_eq!(m.native_cpu_weights(), CpuWeights::Q8);
    assert_eq!(m.config, load(&gguf_path("qwen3.gguf")).config);
    let rf = reference("qwen3");
    for w in [CpuWeights::F32, CpuWeights::Auto] {
        let mut r = runner(load(&path), w);
        for (p_i, p) in rf["prompts"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(&p["ids"]);
            let (out, _) = greedy(r.as_mut(), &prompt, 32);
            let got = prompt_logits(r.as_mut(), &prompt);
            let worst = got
                .iter()
                .zip(p["logits"].as_array().unwrap())
                .map(|(g, w)| max_diff(g, &floats(w)))
                .fold(0f32, f32::max);
            println!("qwen3.Q8_0.gguf {w:?}: prompt {p_i}: largest |Δ logit| {worst:.3} vs transformers (bf16 weights)");
            assert_eq!(
                out,
                ids(&p["greedy_ids"]),
                "{w:?}: prompt {p_i}: greedy ids"
            );
            // Logits of these models reach ±25; a misread weight moves them by far more.
            assert!(worst < 2.0, "{w:?}: prompt {p_i}: |Δ logit| {worst}");
        }
    }
}

// --- Rewriting a file: the tests below edit the tiny files and write them anew. ---

struct Tensor {
    name: String,
    /// GGML order.
    dims: Vec<usize>,
    ty: GgmlType,
    data: Vec<u8>,
}

fn tensors_of(f: &GgufFile) -> Vec<Tensor> {
    f.tensors
        .values()
        .map(|t| Tensor {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
            data: f.raw(t).to_vec(),
        })
        .collect()
}

fn meta_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::Str(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend(x.to_le_bytes()),
        MetaValue::I16(x) => out.extend(x.to_le_bytes()),
        MetaValue::U32(x) => out.extend(x.to_le_bytes()),
        MetaValue::I32(x) => out.extend(x.to_le_bytes()),
        MetaValue::F32(x) => out.extend(x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::Str(s) => put_str(out, s),
        MetaValue::Array(a) => {
            out.extend(a.first().map_or(8, meta_type).to_le_bytes());
            out.extend((a.len() as u64).to_le_bytes());
            a.iter().for_each(|x| put_value(out, x));
        }
        MetaValue::U64(x) => out.extend(x.to_le_bytes()),
        MetaValue::I64(x) => out.extend(x.to_le_bytes()),
        MetaValue::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// A GGUF v3 file of `meta` and `tensors` (data aligned to 32 bytes, the default).
fn write_gguf(path: &Path, meta: &BTreeMap<String, MetaValue>, tensors: &[Tensor]) {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        put_str(&mut out, k);
        out.extend(meta_type(v).to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0usize;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        t.dims
            .iter()
            .for_each(|d| out.extend((*d as u64).to_le_bytes()));
        out.extend(t.ty.id().to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset += t.data.len().div_ceil(32) * 32;
    }
    out.resize(out.len().div_ceil(32) * 32, 0);
    for t in tensors {
        out.extend(&t.data);
        out.resize(out.len().div_ceil(32) * 32, 0);
    }
    std::fs::write(path, out).unwrap();
}

/// `file` rewritten with `edit` applied to its metadata and tensors, in `dir` (under a
/// name of its own).
fn rewritten(
    dir: &tempfile::TempDir,
    file: &str,
    edit: impl FnOnce(&mut BTreeMap<String, MetaValue>, &mut Vec<Tensor>),
) -> PathBuf {
    let f = GgufFile::open(&gguf_path(file)).unwrap();
    let (mut meta, mut tensors) = (f.meta.clone(), tensors_of(&f));
    edit(&mut meta, &mut tensors);
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.path().join(format!("{n}-{file}"));
    write_gguf(&path, &meta, &tensors);
    path
}

#[test]
fn the_rewriter_reproduces_a_file_that_loads_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = rewritten(&dir, "qwen3.gguf", |_, _| {});
    let (a, b) = (load(&path), load(&gguf_path("qwen3.gguf")));
    assert_eq!(a.config, b.config);
    let p = prompts(&reference("qwen3")).remove(0);
    let (x, y) = (
        prompt_logits(runner(a, CpuWeights::F32).as_mut(), &p),
        prompt_logits(runner(b, CpuWeights::F32).as_mut(), &p),
    );
    assert!(x == y);
}

/// Q8_0 blocks of `v` (ggml's layout: an f16 scale, then 32 signed bytes).
fn q8_0(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() / 32 * 34);
    for b in v.chunks_exact(32) {
        let d = b.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0;
        let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
        out.extend(half::f16::from_f32(d).to_le_bytes());
        out.extend(b.iter().map(|x| (x * inv).round() as i8 as u8));
    }
    out
}

fn q8_0_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(34)
        .flat_map(|b| {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            b[2..].iter().map(move |&q| q as i8 as f32 * d)
        })
        .collect()
}

fn bf16_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// Stacked experts in Q8_0 blocks (as a Q4_K_M or Q8_0 download holds them): expert E of
/// `blk.N.ffn_down_exps` reads exactly the rows of expert E, and the model gives the bits
/// of the same values stored as F32.
#[test]
fn stacked_quantized_experts_read_as_their_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut want = BTreeMap::new();
    let path = rewritten(&dir, "qwen3_moe.gguf", |_, tensors| {
        for t in tensors.iter_mut().filter(|t| t.name.contains("_exps.")) {
            assert_eq!(t.ty, GgmlType::BF16);
            t.data = q8_0(&bf16_values(&t.data));
            t.ty = GgmlType::Q8_0;
            want.insert(t.name.clone(), (t.dims.clone(), q8_0_values(&t.data)));
        }
    });
    let f = GgufFile::open(&path).unwrap();
    for (name, (dims, values)) in &want {
        let [cols, rows, n] = dims[..] else {
            panic!("{name}: {dims:?}")
        };
        assert!(f.has_tensor(&name.replace(".weight", &format!(".{}.weight", n - 1))));
        assert!(!f.has_tensor(&name.replace(".weight", &format!(".{n}.weight"))));
        for e in 0..n {
            let expert = name.replace(".weight", &format!(".{e}.weight"));
            let (d, v) = f.dequantize(&expert).unwrap();
            assert_eq!(d, [cols, rows], "{expert}");
            assert!(
                v == values[e * rows * cols..(e + 1) * rows * cols],
                "{expert}"
            );
        }
        let err = format!(
            "{:#}",
            f.dequantize(&name.replace(".weight", &format!(".{n}.weight")))
                .unwrap_err()
        );
        assert!(err.contains(&format!("stacks {n} experts")), "{err}");
    }
    // The model on those experts: the logits of the same values stored as F32.
    let m = load(&path);
    assert_eq!(m.native_cpu_weights(), CpuWeights::Q8);
    let plain = rewritten(&dir, "qwen3_moe.gguf", |_, tensors| {
        for t in tensors.iter_mut().filter(|t| t.name.contains("_exps.")) {
            t.data = want[&t.name]
                .1
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            t.ty = GgmlType::F32;
        }
    });
    let (mut r, mut r_plain) = (
        runner(m, CpuWeights::F32),
        runner(load(&plain), CpuWeights::F32),
    );
    for p in prompts(&reference("qwen3_moe")) {
        assert!(prompt_logits(r.as_mut(), &p) == prompt_logits(r_plain.as_mut(), &p));
    }
}

/// Experts stored apart (`blk.N.ffn_gate.E.weight`, files from before llama.cpp stacked
/// them) read as the stacked ones: the same logits.
#[test]
fn experts_stored_apart_read_as_stacked_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = rewritten(&dir, "mixtral.gguf", |_, tensors| {
        let mut apart = vec![];
        tensors.retain(|t| {
            let Some(stem) = t.name.strip_suffix("_exps.weight") else {
                return true;
            };
            let [cols, rows, n] = t.dims[..] else {
                panic!("{}", t.name)
            };
            let per = t.data.len() / n;
            for e in 0..n {
                apart.push(Tensor {
                    name: format!("{stem}.{e}.weight"),
                    dims: vec![cols, rows],
                    ty: t.ty,
                    data: t.data[e * per..(e + 1) * per].to_vec(),
                });
            }
            false
        });
        tensors.extend(apart);
    });
    let f = GgufFile::open(&path).unwrap();
    assert!(f.tensors.contains_key("blk.1.ffn_down.7.weight"));
    assert!(!f.tensors.contains_key("blk.1.ffn_down_exps.weight"));
    let (a, b) = (load(&path), load(&gguf_path("mixtral.gguf")));
    assert_eq!(a.config, b.config);
    let (mut ra, mut rb) = (runner(a, CpuWeights::F32), runner(b, CpuWeights::F32));
    for p in prompts(&reference("mixtral")) {
        assert!(prompt_logits(ra.as_mut(), &p) == prompt_logits(rb.as_mut(), &p));
    }
}

#[test]
fn malformed_files_are_refused_naming_the_key_or_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            rewritten(&dir, "qwen3.gguf", |m, _| {
                m.insert(
                    "general.architecture".into(),
                    MetaValue::Str("gemma3".into()),
                );
            }),
            "architecture \"gemma3\" is not supported (supported: llama (Llama, Mistral, Mixtral), qwen2, qwen3, qwen3moe, deepseek2 (DeepSeek-V3, R1))",
        ),
        (
            rewritten(&dir, "qwen3_moe.gguf", |m, _| {
                m.remove("qwen3moe.expert_used_count");
            }),
            "metadata key qwen3moe.expert_used_count is missing or not an integer",
        ),
        (
            rewritten(&dir, "qwen3_moe.gguf", |m, _| {
                m.remove("qwen3moe.expert_count");
            }),
            "metadata key qwen3moe.expert_count is missing or 0",
        ),
        (
            rewritten(&dir, "qwen3.gguf", |m, _| {
                m.remove("qwen3.embedding_length");
            }),
            "metadata key qwen3.embedding_length is missing or not an integer",
        ),
        (
            rewritten(&dir, "qwen3.gguf", |m, _| {
                m.insert("qwen3.expert_count".into(), MetaValue::U32(4));
            }),
            "qwen3.expert_count is 4: experts are read for llama (Mixtral) and qwen3moe files only",
        ),
        (
            rewritten(&dir, "qwen3.gguf", |m, _| {
                m.insert(
                    "qwen3.rope.scaling.type".into(),
                    MetaValue::Str("yarn".into()),
                );
            }),
            "qwen3.rope.scaling.type \"yarn\" is not supported (none, linear)",
        ),
        (
            rewritten(&dir, "qwen3.gguf", |_, t| {
                t.retain(|t| t.name != "blk.1.attn_k_norm.weight");
            }),
            "tensor blk.1.attn_k_norm.weight is missing from the file (the per-head k norm of this qwen3 model)",
        ),
        (
            rewritten(&dir, "qwen3_moe.gguf", |_, t| {
                t.retain(|t| t.name != "blk.2.ffn_gate_inp.weight");
                t.retain(|t| t.name != "blk.2.ffn_up_exps.weight");
            }),
            "tensor blk.2.ffn_gate_inp.weight is missing from the file (the router: [hidden, experts] of this qwen3_moe model)",
        ),
        (
            rewritten(&dir, "qwen3_moe.gguf", |_, t| {
                t.retain(|t| t.name != "blk.0.ffn_up_exps.weight");
            }),
            "tensor blk.0.ffn_up_exps.weight is missing from the file (the experts of layer 0)",
        ),
        (
            rewritten(&dir, "qwen3_moe.gguf", |_, t| {
                let down = t
                    .iter_mut()
                    .find(|t| t.name == "blk.0.ffn_down_exps.weight")
                    .unwrap();
                let per = down.data.len() / 16;
                down.data.truncate(15 * per);
                down.dims[2] = 15;
            }),
            "tensor blk.0.ffn_down_exps.weight: shape [32, 64, 15] in the file, expected [32, 64, 16] (stacked experts: [in, out, experts])",
        ),
    ];
    assert_refused(cases);

    // A truncated download: the tensor whose data lies past the end is named.
    let bytes = std::fs::read(gguf_path("qwen3_moe.gguf")).unwrap();
    let path = dir.path().join("truncated.gguf");
    std::fs::write(&path, &bytes[..bytes.len() - 4096]).unwrap();
    let err = load_err(&path);
    assert!(
        err.contains("is not a valid GGUF file") && err.contains("the file is truncated"),
        "{err}"
    );
    assert!(err.contains("tensor "), "{err}");
    // Cut inside the metadata.
    std::fs::write(&path, &bytes[..2000]).unwrap();
    let err = load_err(&path);
    assert!(err.contains("truncated?"), "{err}");
}

/// A directory export (`wring quantize`) writes Llama or Qwen2 models: these files are
/// refused rather than written without their q/k norms or experts.
#[test]
fn exporting_q_k_norms_or_experts_is_refused() {
    use wring_model::export::{export_plain, DenseDtype};
    let dir = tempfile::tempdir().unwrap();
    for (file, arch) in [
        ("qwen3.gguf", "qwen3"),
        ("qwen3_moe.gguf", "qwen3_moe"),
        ("mixtral.gguf", "mixtral"),
    ] {
        let err = match export_plain(&load(&gguf_path(file)), dir.path(), DenseDtype::F32) {
            Ok(_) => panic!("{file} exported"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.starts_with(&format!("{arch}: exporting a model with q/k norms or mixture-of-experts layers is not supported yet")),
            "{err}"
        );
    }
}

/// A vocab-only file (no tensors: what dummy weights borrow a tokenizer from) loads
/// unchecked against its metadata's model.
#[test]
fn a_vocab_only_file_lends_dummy_weights_its_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let path = rewritten(&dir, "qwen3_moe.gguf", |_, t| t.clear());
    let m = load_model(&ModelSpec {
        model: Some(path.to_string_lossy().into_owned()),
        load_format: wring_model::LoadFormat::Dummy,
        model_shape: Some("qwen3-30b-a3b".into()),
    })
    .unwrap();
    assert_eq!(m.tokenizer.vocab_size(), 384);
    assert_eq!(m.config.moe.as_ref().unwrap().num_experts, 128);
    // Loaded as a model it has no weights to run.
    let opts = RunnerOptions {
        kv_cache_bytes: 16 << 20,
        max_model_len: 256,
        ..Default::default()
    };
    let err = match load(&path).into_runner(&opts) {
        Ok(_) => panic!("a runner without weights"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains("tensor token_embd.weight is missing from the file"),
        "{err}"
    );
}

/// The file's RoPE frequencies divided by `factors` (`rope_freqs.weight`, F32).
fn with_rope_freqs(dir: &tempfile::TempDir, file: &str, factors: &[f32]) -> PathBuf {
    rewritten(dir, file, |_, tensors| {
        tensors.push(Tensor {
            name: "rope_freqs.weight".into(),
            dims: vec![factors.len()],
            ty: GgmlType::F32,
            data: factors.iter().flat_map(|f| f.to_le_bytes()).collect(),
        })
    })
}

/// Llama 3.1's factors for pairs of unscaled frequency `base` (factor 8, low 1, high 4,
/// 8,192 original positions), in f32 as llama.cpp's converter computes them.
fn llama31_factors(base: &[f64]) -> Vec<f32> {
    let (factor, low, high, old) = (8.0f32, 1.0f32, 4.0f32, 8192.0f32);
    base.iter()
        .map(|&f| {
            let wavelen = 2.0 * std::f32::consts::PI / f as f32;
            if wavelen < old / high {
                1.0
            } else if wavelen > old / low {
                factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// GGUF Llama 3.x files carry their RoPE scaling as `rope_freqs.weight`: factors that are
/// Llama 3's formula load as its `rope_scaling` (the directory's configuration, so the
/// same bits as a config that says llama3), other factors divide the frequencies as they
/// are (all 2: linear scaling by 2), and malformed ones are refused.
#[test]
fn rope_freqs_scale_the_rope_frequencies() {
    let dir = tempfile::tempdir().unwrap();
    let plain = load(&gguf_path("mixtral.gguf"));
    let base = plain.config.rope_base_freq();
    assert_eq!(base.len(), plain.config.head_dim / 2);
    let logits = |m: LoadedModel| {
        let mut r = runner(m, CpuWeights::F32);
        prompts(&reference("mixtral"))
            .iter()
            .map(|p| prompt_logits(r.as_mut(), p))
            .collect::<Vec<_>>()
    };
    let unscaled = logits(load(&gguf_path("mixtral.gguf")));

    let factors = llama31_factors(&base);
    assert!(
        factors.contains(&8.0) && factors.contains(&1.0),
        "{factors:?}"
    );
    let l3 = load(&with_rope_freqs(&dir, "mixtral.gguf", &factors));
    let want = wring_model::RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    };
    assert_eq!(l3.config.rope_scaling, want);
    let mut said = load(&gguf_path("mixtral.gguf"));
    said.config.rope_scaling = want;
    let scaled = logits(l3);
    assert!(scaled == logits(said));
    assert!(scaled != unscaled, "the scaling changes the logits");

    let twos = load(&with_rope_freqs(
        &dir,
        "mixtral.gguf",
        &vec![2.0; base.len()],
    ));
    assert_eq!(
        twos.config.rope_scaling,
        wring_model::RopeScaling::Factors(vec![2.0; base.len()])
    );
    let mut linear = load(&gguf_path("mixtral.gguf"));
    linear.config.rope_scaling = wring_model::RopeScaling::Linear { factor: 2.0 };
    assert!(logits(twos) == logits(linear));

    let short = with_rope_freqs(&dir, "mixtral.gguf", &[1.0; 3]);
    assert!(
        load_err(&short).contains(
            "rope_freqs.weight has shape [3]: 3 values, expected one per rotated pair (8)"
        ),
        "{}",
        load_err(&short)
    );
    let mut bad = factors.clone();
    bad[0] = 0.0;
    let bad = with_rope_freqs(&dir, "mixtral.gguf", &bad);
    assert!(
        load_err(&bad).contains("rope_freqs.weight holds a value that is not a positive number")
    );
}

/// DeepSeek-V3 as llama.cpp writes it (`deepseek2`: latent attention with `kv_b` split into
/// `attn_k_b` / `attn_v_b`, sigmoid routing with the correction bias, expert groups, shared
/// experts, a leading dense layer, YaRN): the configuration of its Hugging Face directory
/// (YaRN's rotated values unscaled, as llama.cpp runs them: mscale = mscale_all_dim), the
/// directory's chat template, and the directory's logits bit for bit under that
/// configuration; a file with `kv_b` whole (before llama.cpp split it) gives the same bits.
#[test]
fn deepseek_v3_gguf_reads_as_its_directory() {
    let rf = reference("deepseek_v3");
    let g = load(&gguf_path("deepseek_v3.gguf"));
    let mut hf = load(&test_data_dir().join("hf_tiny/deepseek_v3"));
    match &mut hf.config.rope_scaling {
        wring_model::RopeScaling::Yarn {
            mscale,
            mscale_all_dim,
            ..
        } => *mscale = *mscale_all_dim,
        other => panic!("the tiny DeepSeek-V3 scales RoPE with YaRN, not {other:?}"),
    }
    assert_eq!(g.config, hf.config);
    let template = g.chat_template.clone().expect("a chat template");
    for chat in rf["chats"].as_array().unwrap() {
        let text = template.render_json(&chat["messages"], None, true).unwrap();
        assert_eq!(text, chat["text"].as_str().unwrap());
        assert_eq!(g.tokenizer.encode(&text).unwrap(), ids(&chat["ids"]));
    }

    // The same model with kv_b whole and the per-head lengths as the only lengths.
    let dir = tempfile::tempdir().unwrap();
    let src = GgufFile::open(&gguf_path("deepseek_v3.gguf")).unwrap();
    let legacy = rewritten(&dir, "deepseek_v3.gguf", |meta, tensors| {
        for l in 0..3 {
            let (dims, kv_b) = src.joined_kv_b(&format!("blk.{l}.")).unwrap();
            tensors.retain(|t| {
                !t.name.starts_with(&format!("blk.{l}.attn_k_b"))
                    && !t.name.starts_with(&format!("blk.{l}.attn_v_b"))
            });
            tensors.push(Tensor {
                name: format!("blk.{l}.attn_kv_b.weight"),
                dims,
                ty: GgmlType::F32,
                data: kv_b.iter().flat_map(|f| f.to_le_bytes()).collect(),
            });
        }
        let mla_key = meta.remove("deepseek2.attention.key_length_mla").unwrap();
        let mla_value = meta.remove("deepseek2.attention.value_length_mla").unwrap();
        meta.insert("deepseek2.attention.key_length".into(), mla_key);
        meta.insert("deepseek2.attention.value_length".into(), mla_value);
    });
    let old = load(&legacy);
    assert_eq!(old.config, hf.config);

    let (mut r, mut r_hf, mut r_old) = (
        runner(g, CpuWeights::F32),
        runner(hf, CpuWeights::F32),
        runner(old, CpuWeights::F32),
    );
    for p in prompts(&rf) {
        let got = prompt_logits(r.as_mut(), &p);
        assert!(
            got == prompt_logits(r_hf.as_mut(), &p),
            "the directory's bits"
        );
        assert!(
            got == prompt_logits(r_old.as_mut(), &p),
            "kv_b whole: the same bits"
        );
    }
    let p = prompts(&rf).remove(0);
    assert_eq!(
        greedy(r.as_mut(), &p, 32).0,
        greedy(r_hf.as_mut(), &p, 32).0
    );
}

#[test]
fn deepseek2_files_the_reader_cannot_run_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            rewritten(&dir, "deepseek_v3.gguf", |m, _| {
                m.remove("deepseek2.expert_gating_func");
            }),
            "deepseek2.expert_gating_func missing (softmax, DeepSeek-V2): only sigmoid gating (2: DeepSeek-V3, R1) is supported; DeepSeek-V2's softmax gating is not",
        ),
        (
            rewritten(&dir, "deepseek_v3.gguf", |_, t| {
                t.retain(|t| t.name != "blk.2.attn_v_b.weight");
            }),
            "tensor blk.2.attn_v_b.weight is missing from the file (v_b: [latent, v, heads] of this deepseek_v3 model)",
        ),
        (
            rewritten(&dir, "deepseek_v3.gguf", |_, t| {
                t.retain(|t| t.name != "blk.1.exp_probs_b.bias");
            }),
            "tensor blk.1.exp_probs_b.bias is missing from the file (the router's correction bias: [experts] of this deepseek_v3 model)",
        ),
        (
            rewritten(&dir, "deepseek_v3.gguf", |m, _| {
                m.insert("deepseek2.expert_group_used_count".into(), MetaValue::U32(9));
            }),
            "deepseek2: 16 experts in 4 groups, 9 of them eligible, cannot route 4 a token",
        ),
    ];
    assert_refused(cases);
}
