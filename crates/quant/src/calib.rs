//! Calibration: run the model (f32, on the CPU) over prompts from the corpora and
//! record, for every linear weight, statistics of its input activations X:
//! the Gram matrix `H = XᵀX` (GPTQ's Hessian, and the exact output-error metric
//! `‖X·ΔWᵀ‖² = Σ_rows Δw·H·Δwᵀ`) and the mean |x| per input channel (AWQ).
//!
//! Recording is a [`Backend`] wrapper around the CPU backend whose matrices know which
//! weight they are (recognised at upload by a fingerprint of their values); its
//! `linear` accumulates the statistics of the input of the weight it is called with.
//! Weights that read the same input (q/k/v, gate/up) share one record.

use anyhow::{ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::path::PathBuf;
use wring_backend::cpu::{matmul_t, CpuBackend, CpuMatrix, CpuTensor, CpuVector, CpuWeights};
use wring_backend::quant::QuantMatrix;
use wring_backend::{AttnShape, Backend, HostMatrix, KvSpec, RopeSpec, StepInput};
use wring_bench::corpus::{parse_corpus_list, CorpusSource};
use wring_model::llama::LlamaRunner;
use wring_model::{ChatMessage, LoadedModel, ModelRunner, SeqInput};

/// Input statistics of one linear layer.
#[derive(Debug, Clone)]
pub struct InputStats {
    pub cols: usize,
    /// Calibration tokens seen.
    pub tokens: usize,
    /// `XᵀX`, row-major `[cols][cols]`.
    pub h: Vec<f32>,
    /// Σ|x| per input channel.
    pub abs_sum: Vec<f64>,
}

impl InputStats {
    pub fn new(cols: usize) -> Self {
        Self {
            cols,
            tokens: 0,
            h: vec![0.0; cols * cols],
            abs_sum: vec![0.0; cols],
        }
    }

    /// Adds the rows of `x` (`[t][cols]`).
    pub fn add(&mut self, x: &[f32], t: usize) {
        let cols = self.cols;
        let mut xt = vec![0.0f32; cols * t];
        for (r, row) in x.chunks_exact(cols).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                xt[c * t + r] = v;
                self.abs_sum[c] += v.abs() as f64;
            }
        }
        let g = matmul_t(&xt, cols, &xt, cols, t);
        for (a, b) in self.h.iter_mut().zip(&g) {
            *a += b;
        }
        self.tokens += t;
    }

    /// Mean |x| per input channel.
    pub fn mean_abs(&self) -> Vec<f32> {
        let n = self.tokens.max(1) as f64;
        self.abs_sum.iter().map(|s| (s / n) as f32).collect()
    }
}

const PER_LAYER: usize = 7;
/// Input group of each of the seven linear weights of a layer: q/k/v read the same
/// input (group 0), o 1, gate/up 2, down 3.
const GROUP: [usize; PER_LAYER] = [0, 0, 0, 1, 2, 2, 3];
/// Canonical names of the seven.
pub const LINEAR_NAMES: [&str; PER_LAYER] = [
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
];
/// The weight of each group that records it (the first that reads the input).
const RECORDS: [bool; PER_LAYER] = [true, false, false, true, true, false, true];

pub struct RecMatrix {
    /// (layer, index among the seven) when this is a recorded linear weight.
    which: Option<(usize, usize)>,
    m: CpuMatrix,
}

/// Fingerprint of a matrix's shape and values: how the recorder recognises which
/// weight the runner uploads, whatever order it uploads them in.
fn fingerprint(rows: usize, cols: usize, data: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325 ^ ((rows as u64) << 32 | cols as u64);
    for v in data {
        h = (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3);
    }
    h
}

/// The recording backend.
pub struct Recorder {
    inner: CpuBackend,
    /// Fingerprint → (layer, index among the seven) of the linear weights to record.
    known: HashMap<u64, (usize, usize)>,
    /// `[layer][group]`, None for layers not recorded.
    stats: Vec<Option<[InputStats; 4]>>,
}

impl Recorder {
    /// A recorder for `layers` of `model` (reads those layers' linear weights once to
    /// fingerprint them).
    fn new(model: &LoadedModel, layers: &[usize]) -> Result<Self> {
        let c = &model.config;
        let (h, i, qd, kvd) = (
            c.hidden_size,
            c.intermediate_size,
            c.num_heads * c.head_dim,
            c.num_kv_heads * c.head_dim,
        );
        let shapes = [(qd, h), (kvd, h), (kvd, h), (h, qd), (i, h), (i, h), (h, i)];
        let mut known = HashMap::new();
        let mut stats: Vec<Option<[InputStats; 4]>> = (0..c.num_layers).map(|_| None).collect();
        for &l in layers {
            ensure!(
                l < c.num_layers,
                "layer {l} out of range (the model has {})",
                c.num_layers
            );
            for (j, (name, &(rows, cols))) in LINEAR_NAMES.iter().zip(&shapes).enumerate() {
                if RECORDS[j] {
                    let m = model
                        .weight_source()
                        .matrix(&format!("blk.{l}.{name}"), rows, cols)?;
                    known.insert(fingerprint(rows, cols, &m.data), (l, j));
                }
            }
            stats[l] = Some([
                InputStats::new(h),
                InputStats::new(qd),
                InputStats::new(h),
                InputStats::new(i),
            ]);
        }
        Ok(Self {
            inner: CpuBackend::new(CpuWeights::F32),
            known,
            stats,
        })
    }
}

impl Backend for Recorder {
    type Tensor = CpuTensor;
    type Matrix = RecMatrix;
    type Vector = CpuVector;

    fn name(&self) -> String {
        "cpu (calibration)".into()
    }
    fn upload_matrix(&mut self, m: HostMatrix) -> Result<RecMatrix> {
        let which = self
            .known
            .get(&fingerprint(m.rows, m.cols, &m.data))
            .copied();
        Ok(RecMatrix {
            which,
            m: self.inner.upload_matrix(m)?,
        })
    }
    fn upload_quantized(&mut self, m: QuantMatrix) -> Result<RecMatrix> {
        let data = m.dequantize();
        self.upload_matrix(HostMatrix {
            rows: m.rows,
            cols: m.cols,
            data,
        })
    }
    fn upload_vector(&mut self, v: &[f32]) -> Result<CpuVector> {
        self.inner.upload_vector(v)
    }
    fn alloc_kv(&mut self, spec: KvSpec) -> Result<()> {
        self.inner.alloc_kv(spec)
    }
    fn begin_step(&mut self, step: &StepInput) -> Result<()> {
        self.inner.begin_step(step)
    }
    fn embed(&mut self, table: &RecMatrix) -> CpuTensor {
        self.inner.embed(&table.m)
    }
    fn rms_norm(&mut self, x: &CpuTensor, w: &CpuVector, eps: f32) -> CpuTensor {
        self.inner.rms_norm(x, w, eps)
    }
    fn add_assign(&mut self, x: &mut CpuTensor, y: &CpuTensor) {
        self.inner.add_assign(x, y)
    }
    fn linear(&mut self, x: &CpuTensor, w: &RecMatrix, bias: Option<&CpuVector>) -> CpuTensor {
        if let Some((l, j)) = w.which {
            if let Some(st) = self.stats[l].as_mut() {
                st[GROUP[j]].add(&x.data, x.rows);
            }
        }
        self.inner.linear(x, &w.m, bias)
    }
    fn rope(&mut self, x: &mut CpuTensor, n_heads: usize, head_dim: usize, rope: &RopeSpec) {
        self.inner.rope(x, n_heads, head_dim, rope)
    }
    fn attention(
        &mut self,
        layer: usize,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        shape: AttnShape,
    ) -> CpuTensor {
        self.inner.attention(layer, q, k, v, shape)
    }
    fn silu_mul(&mut self, gate: &CpuTensor, up: &CpuTensor) -> CpuTensor {
        self.inner.silu_mul(gate, up)
    }
    fn gather_logit_rows(&mut self, x: &CpuTensor) -> CpuTensor {
        self.inner.gather_logit_rows(x)
    }
    fn to_host(&mut self, x: &CpuTensor) -> Vec<f32> {
        self.inner.to_host(x)
    }
}

/// Where calibration prompts come from.
#[derive(Debug, Clone)]
pub struct CalibOptions {
    /// Comma-separated corpus tags (`wildchat,mbpp,lmsys`, …; see wring-bench).
    pub corpus: String,
    pub corpus_dir: PathBuf,
    /// Prompts in all (taken round-robin from the corpora).
    pub prompts: usize,
    /// Tokens per prompt at most (longer prompts are cut).
    pub max_tokens: usize,
    /// Only these decoder layers (None: all).
    pub layers: Option<Vec<usize>>,
    pub progress: bool,
}

/// The shared corpora directory: `$WRING_SHARED/corpora`, else `../shared/corpora`.
pub fn default_corpus_dir() -> PathBuf {
    if let Some(shared) = std::env::var_os("WRING_SHARED") {
        return PathBuf::from(shared).join("corpora");
    }
    [
        "../shared/corpora",
        "shared/corpora",
        "../../../shared/corpora",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_dir())
    .unwrap_or_else(|| PathBuf::from("../shared/corpora"))
}

/// Token ids of the calibration prompts (chat template applied when the model has one).
pub fn calibration_prompts(model: &LoadedModel, opts: &CalibOptions) -> Result<Vec<Vec<u32>>> {
    let corpora = parse_corpus_list(&opts.corpus)?;
    ensure!(!corpora.is_empty(), "--calib-corpus names no corpus");
    let mut src = CorpusSource::new(&opts.corpus_dir);
    src.fetch_missing = false;
    let per = opts.prompts.div_ceil(corpora.len());
    let mut lists = vec![];
    for c in &corpora {
        let l = src
            .load(*c, Some(per), 0)
            .with_context(|| format!("calibration corpus {c}"))?;
        lists.push(l.prompts);
    }
    let mut out = vec![];
    for i in 0..per {
        for l in &lists {
            if out.len() < opts.prompts {
                if let Some(p) = l.get(i) {
                    let text = match &model.chat_template {
                        Some(t) => t.render(&[ChatMessage::new("user", &p.text)], true)?,
                        None => p.text.clone(),
                    };
                    // BOS when the model wants it and the template did not write it.
                    let mut ids = model.tokenizer.encode(&text)?;
                    if let (true, Some(bos)) =
                        (model.tokenizer.add_bos(), model.tokenizer.bos_token_id())
                    {
                        if ids.first() != Some(&bos) {
                            ids.insert(0, bos);
                        }
                    }
                    ids.truncate(opts.max_tokens);
                    out.push(ids);
                }
            }
        }
    }
    ensure!(!out.is_empty(), "no calibration prompts in {}", opts.corpus);
    Ok(out)
}

/// Per layer, the input statistics of its four input groups (q/k/v, o, gate/up, down);
/// None for layers not recorded.
pub struct Calibration {
    pub stats: Vec<Option<[InputStats; 4]>>,
    pub prompts: usize,
    pub tokens: usize,
}

impl Calibration {
    /// Statistics of the input of linear weight `canonical` (`blk.L.attn_q.weight`, …).
    pub fn for_weight(&self, canonical: &str) -> Option<&InputStats> {
        let rest = canonical.strip_prefix("blk.")?;
        let (l, part) = rest.split_once('.')?;
        let l: usize = l.parse().ok()?;
        let j = LINEAR_NAMES.iter().position(|n| *n == part)?;
        self.stats.get(l)?.as_ref().map(|s| &s[GROUP[j]])
    }
}

/// Runs the model over the calibration prompts and returns the recorded statistics.
pub fn calibrate(model: &LoadedModel, opts: &CalibOptions) -> Result<Calibration> {
    let prompts = calibration_prompts(model, opts)?;
    let cfg = model.config.clone();
    let block_size = 16;
    let max_len = prompts.iter().map(Vec::len).max().unwrap_or(1);
    let num_blocks = max_len.div_ceil(block_size).max(1);
    let layers: Vec<usize> = match &opts.layers {
        Some(l) => l.clone(),
        None => (0..cfg.num_layers).collect(),
    };
    let rec = Recorder::new(model, &layers)?;
    let mut runner = LlamaRunner::new(rec, cfg, model.weight_source(), num_blocks, block_size)?;
    let pb = if opts.progress {
        ProgressBar::new(prompts.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template(
            "calibrating {bar:30} {pos}/{len} prompts {elapsed} (eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut tokens = 0;
    for ids in &prompts {
        let n = ids.len();
        let step = StepInput {
            tokens: ids.clone(),
            positions: (0..n as u32).collect(),
            seqs: vec![SeqInput {
                query_start: 0,
                query_len: n,
                context_len: n,
                block_table: (0..n.div_ceil(block_size) as u32).collect(),
                prompt_len: 0,
            }],
            logit_rows: vec![n - 1],
        };
        ModelRunner::forward(&mut runner, &step)?;
        tokens += n;
        pb.inc(1);
    }
    pb.finish_and_clear();
    let rec = runner.backend_mut();
    Ok(Calibration {
        stats: std::mem::take(&mut rec.stats),
        prompts: prompts.len(),
        tokens,
    })
}
