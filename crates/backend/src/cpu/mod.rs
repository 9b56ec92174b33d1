//! The CPU backend: f32 compute, multi-threaded (a fork-join team, `team.rs`), batch-invariant.
//!
//! Batch invariance: every output value is computed by the same sequence of
//! floating-point operations whatever else is in the batch — matmuls compute each
//! (token, output) dot product independently in a fixed order, and attention walks
//! each (sequence, head, query) over its own context in position order. Parallelism
//! only splits *which* values a thread computes, never how one value is summed.

mod aligned;
pub mod attention;
pub mod attention_amx;
pub mod host_comm;
mod kernels;
pub mod q4;
pub mod q8;
pub mod qmatmul;
mod simd;
pub mod team;
mod tiling;

use crate::quant::QuantMatrix;
use crate::{
    AttnShape, Backend, ExtraOp, HostMatrix, KvSpec, MlaLayer, MlaQuery, MoeLayer, RopeSpec,
    SeqInput, StepInput,
};
use aligned::Aligned;
use anyhow::{ensure, Result};
use std::borrow::Cow;

pub use kernels::{dot, matmul_t};
pub use q4::matmul_q4;
pub use q8::matmul_q8;

/// Activations: row-major `[rows][cols]` f32.
#[derive(Debug, Clone)]
pub struct CpuTensor {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

/// A weight matrix `[rows=out][cols=in]`.
pub enum CpuMatrix {
    F32 {
        rows: usize,
        cols: usize,
        data: Vec<f32>,
    },
    Q8(q8::Q8Matrix),
    Q4(q4::Q4Matrix),
    /// A checkpoint's quantized weights (`wring quantize`), run by [`qmatmul`].
    Quant(QuantMatrix),
}

impl CpuMatrix {
    fn shape(&self) -> (usize, usize) {
        match self {
            CpuMatrix::F32 { rows, cols, .. } => (*rows, *cols),
            CpuMatrix::Q8(m) => (m.rows, m.cols),
            CpuMatrix::Q4(m) => (m.rows, m.cols),
            CpuMatrix::Quant(m) => (m.rows, m.cols),
        }
    }

    /// Bytes of weight data held.
    pub fn nbytes(&self) -> usize {
        match self {
            CpuMatrix::F32 { data, .. } => 4 * data.len(),
            CpuMatrix::Q8(m) => m.nbytes(),
            CpuMatrix::Q4(m) => m.nbytes(),
            CpuMatrix::Quant(m) => m.nbytes(),
        }
    }
}

/// How the CPU backend stores weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuWeights {
    /// f32: the bit-exact reference (matches the golden outputs).
    #[default]
    F32,
    /// 8-bit blocks with f32 scales, activations quantised per row: ~4x less memory traffic.
    Q8,
    /// 4-bit blocks with a scale and minimum (Q4_1's shape), activations quantised per
    /// row as for q8: ~6x less memory traffic than f32. The vocabulary-sized matrices
    /// (the embedding, uploaded first, and an lm head as tall) stay q8.
    Q4,
    /// The checkpoint's own precision: q4 for a GGUF whose layers are 4-bit, q8 for 6-
    /// and 8-bit ones, f32 otherwise. The model loader resolves it before it builds the
    /// backend (`wring_model`); a backend given `Auto` stores f32.
    Auto,
}

/// The precision of attention over prompt rows (prefill) on the CPU. Decode and verify
/// rows always run the f32 kernels, so speculation stays lossless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillAttention {
    /// The f32 kernels: the bits of the portable reference.
    #[default]
    F32,
    /// bf16 AMX tiles ([`attention_amx`]) where the CPU has AMX-BF16; f32 elsewhere.
    Bf16,
    /// bf16 where the gate's verdict for this model and weight format passed; resolved by
    /// the caller before the backend is built (a backend given `Auto` runs f32).
    Auto,
}

impl std::str::FromStr for PrefillAttention {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "auto" => Ok(Self::Auto),
            _ => anyhow::bail!("unknown CPU prefill attention {s:?} (auto, f32, bf16)"),
        }
    }
}

impl PrefillAttention {
    /// The name on the command line and in gate verdicts.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Auto => "auto",
        }
    }
}

impl std::str::FromStr for CpuWeights {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Self::F32),
            "q8" => Ok(Self::Q8),
            "q4" => Ok(Self::Q4),
            "auto" => Ok(Self::Auto),
            _ => anyhow::bail!("unknown CPU weight format {s:?} (auto, f32, q8, q4)"),
        }
    }
}

pub struct CpuVector(Vec<f32>);

struct KvPool {
    spec: KvSpec,
    /// Per layer: K as `[block][kv_head][head_dim][slot]` (transposed within a block,
    /// so scores run eight keys per vector), V as `[block][slot][kv_head][head_dim]`
    /// ([`attention::KvLayout`]).
    k: Vec<Aligned<f32>>,
    v: Vec<Aligned<f32>>,
}

#[derive(Default)]
pub struct CpuBackend {
    kv: Option<KvPool>,
    step: StepInput,
    weights: CpuWeights,
    /// Rows of the first matrix uploaded (the embedding: the model loader uploads it
    /// first); under q4, matrices at least this tall stay q8.
    vocab_rows: Option<usize>,
    /// This step's [`kernels::rope_angles`], `[row][head_dim/2]`, filled by its first
    /// `rope` call.
    rope_angles: Vec<(f32, f32)>,
    /// The tensor-parallel group this rank belongs to, and the first error of a
    /// collective this step (reported by `finish_step`).
    comm: Option<host_comm::HostComm>,
    comm_error: Option<anyhow::Error>,
    /// Prompt rows' attention in bf16 tiles (set, and this CPU has AMX-BF16).
    prefill_bf16: bool,
}

impl CpuBackend {
    pub fn new(weights: CpuWeights) -> Self {
        Self {
            weights,
            ..Self::default()
        }
    }

    /// Runs prompt rows' attention at `p` (bf16 only where [`attention_amx::available`]).
    pub fn with_prefill_attention(mut self, p: PrefillAttention) -> Self {
        self.prefill_bf16 = p == PrefillAttention::Bf16 && attention_amx::available();
        self
    }

    /// Whether prompt rows' attention runs in bf16 tiles.
    pub fn prefill_bf16(&self) -> bool {
        self.prefill_bf16
    }

    /// A rank of a tensor-parallel group whose collectives run over `comm`.
    pub fn with_comm(weights: CpuWeights, comm: host_comm::HostComm) -> Self {
        Self {
            weights,
            comm: Some(comm),
            ..Self::default()
        }
    }

    /// Appends row `t` of `table` to `data` as f32.
    fn push_row(table: &CpuMatrix, t: usize, data: &mut Vec<f32>) {
        let cols = table.shape().1;
        match table {
            CpuMatrix::F32 { data: d, .. } => data.extend_from_slice(&d[t * cols..(t + 1) * cols]),
            CpuMatrix::Q8(m) => {
                let start = data.len();
                data.resize(start + cols, 0.0);
                m.dequantize_row(t, &mut data[start..]);
            }
            CpuMatrix::Q4(m) => {
                let start = data.len();
                data.resize(start + cols, 0.0);
                m.dequantize_row(t, &mut data[start..]);
            }
            CpuMatrix::Quant(m) => {
                let start = data.len();
                data.resize(start + cols, 0.0);
                m.dequantize_row(t, &mut data[start..]);
            }
        }
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Matrix = CpuMatrix;
    type Vector = CpuVector;

    fn name(&self) -> String {
        "cpu".into()
    }

    fn upload_matrix(&mut self, m: HostMatrix) -> Result<CpuMatrix> {
        ensure!(
            m.data.len() == m.rows * m.cols,
            "matrix data has {} values, expected {}x{}",
            m.data.len(),
            m.rows,
            m.cols
        );
        let vocab_sized = self.vocab_rows.is_none_or(|v| m.rows >= v);
        self.vocab_rows.get_or_insert(m.rows);
        if self.weights == CpuWeights::Q4 && !vocab_sized {
            // A matrix q4 cannot hold (columns not in blocks of 32, values beyond f16)
            // falls back to q8 or f32 below.
            if let Ok(q) = q4::Q4Matrix::from_f32(m.rows, m.cols, &m.data) {
                return Ok(CpuMatrix::Q4(q));
            }
        }
        if matches!(self.weights, CpuWeights::Q8 | CpuWeights::Q4) && m.cols.is_multiple_of(q8::QK)
        {
            return Ok(CpuMatrix::Q8(q8::Q8Matrix::from_f32(
                m.rows, m.cols, &m.data,
            )));
        }
        Ok(CpuMatrix::F32 {
            rows: m.rows,
            cols: m.cols,
            data: m.data,
        })
    }

    fn upload_quantized(&mut self, m: QuantMatrix) -> Result<CpuMatrix> {
        Ok(CpuMatrix::Quant(m))
    }

    fn upload_vector(&mut self, v: &[f32]) -> Result<CpuVector> {
        Ok(CpuVector(v.to_vec()))
    }

    fn renew_kv(&mut self) -> Result<()> {
        match self.kv.take() {
            Some(pool) => {
                // Drop the old pages first so the two pools never coexist.
                let spec = pool.spec;
                drop(pool);
                self.alloc_kv(spec)
            }
            None => Ok(()),
        }
    }

    fn alloc_kv(&mut self, spec: KvSpec) -> Result<()> {
        let per_layer = spec.num_blocks * spec.block_size * spec.n_kv_heads * spec.head_dim;
        self.kv = Some(KvPool {
            spec,
            k: (0..spec.layers)
                .map(|_| Aligned::zeroed(per_layer))
                .collect(),
            v: (0..spec.layers)
                .map(|_| Aligned::zeroed(per_layer))
                .collect(),
        });
        Ok(())
    }

    fn begin_step(&mut self, step: &StepInput) -> Result<()> {
        let kv = self
            .kv
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("KV pool not allocated"))?;
        step.validate(kv.spec.num_blocks, kv.spec.block_size)?;
        self.step = step.clone();
        self.rope_angles.clear();
        Ok(())
    }

    fn embed(&mut self, table: &CpuMatrix) -> CpuTensor {
        let cols = table.shape().1;
        let mut data = Vec::with_capacity(self.step.tokens.len() * cols);
        for &t in &self.step.tokens {
            Self::push_row(table, t as usize, &mut data);
        }
        CpuTensor {
            rows: self.step.tokens.len(),
            cols,
            data,
        }
    }

    fn rms_norm(&mut self, x: &CpuTensor, w: &CpuVector, eps: f32) -> CpuTensor {
        let mut out = x.clone();
        tiling::for_rows(
            x.rows,
            16,
            &mut out.data,
            x.cols,
            &mut [(); 0],
            0,
            |_, row, _| kernels::rms_norm_inplace(row, &w.0, eps),
        );
        out
    }

    fn add_assign(&mut self, x: &mut CpuTensor, y: &CpuTensor) {
        for (a, b) in x.data.iter_mut().zip(&y.data) {
            *a += b;
        }
    }

    fn linear(&mut self, x: &CpuTensor, w: &CpuMatrix, bias: Option<&CpuVector>) -> CpuTensor {
        let (rows, cols) = w.shape();
        assert_eq!(
            x.cols, cols,
            "linear: input has {} columns, weight expects {cols}",
            x.cols
        );
        let mut out = match w {
            CpuMatrix::F32 { data, .. } => kernels::matmul_t(&x.data, x.rows, data, rows, cols),
            CpuMatrix::Q8(m) => q8::matmul_q8(&x.data, x.rows, m),
            CpuMatrix::Q4(m) => q4::matmul_q4(&x.data, x.rows, m),
            CpuMatrix::Quant(m) => qmatmul::matmul_quant(&x.data, x.rows, m),
        };
        if let Some(b) = bias {
            for row in out.chunks_mut(rows) {
                for (o, bv) in row.iter_mut().zip(&b.0) {
                    *o += bv;
                }
            }
        }
        CpuTensor {
            rows: x.rows,
            cols: rows,
            data: out,
        }
    }

    fn rope(&mut self, x: &mut CpuTensor, n_heads: usize, head_dim: usize, rope: &RopeSpec) {
        let positions = &self.step.positions;
        let rows = x.rows.min(positions.len());
        let per_row = rope.inv_freq.len().min(head_dim / 2);
        if self.rope_angles.len() != rows * per_row {
            // The first rotation of the step (angles depend on the position alone):
            // every later head and layer reuses them.
            self.rope_angles.clear();
            for &p in &positions[..rows] {
                kernels::rope_angles(p, rope, head_dim, &mut self.rope_angles);
            }
        }
        let angles = &self.rope_angles;
        tiling::for_rows(
            rows,
            16,
            &mut x.data,
            x.cols,
            &mut [(); 0],
            0,
            |t, row, _| {
                for h in 0..n_heads {
                    kernels::rope_head_at(
                        &mut row[h * head_dim..(h + 1) * head_dim],
                        &angles[t * per_row..(t + 1) * per_row],
                        rope.interleaved,
                    );
                }
            },
        );
    }

    fn attention(
        &mut self,
        layer: usize,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        shape: AttnShape,
    ) -> CpuTensor {
        let kv = self.kv.as_mut().expect("KV pool allocated before any step");
        let bs = kv.spec.block_size;
        let kv_width = shape.n_kv_heads * shape.head_dim;
        let layout = attention::KvLayout::of(shape, bs);
        // Write this step's K/V into the pool slots of their positions.
        for seq in &self.step.seqs {
            for j in 0..seq.query_len {
                let t = seq.query_start + j;
                let pos = seq.context_len - seq.query_len + j;
                layout.store(
                    &mut kv.k[layer],
                    &mut kv.v[layer],
                    seq.block_table[pos / bs] as usize,
                    pos % bs,
                    &k.data[t * kv_width..(t + 1) * kv_width],
                    &v.data[t * kv_width..(t + 1) * kv_width],
                );
            }
        }
        let (kl, vl) = (&kv.k[layer], &kv.v[layer]);
        let width = shape.n_heads * shape.head_dim;
        let mut out = vec![0.0f32; q.rows * width];
        // One task per (sequence, query head, chunk of up to 64 queries): a long prefill
        // becomes many tasks, so both threads stay busy. A chunk is the sequence cut
        // short after its last query (causal), so each query sees exactly the context
        // and arithmetic it would in one piece. Tasks write disjoint output cells.
        // A sequence that fits one chunk (every decode and verify step) is used as is.
        // 64: each task reads its head's K/V once for 64 rows; at a 4,096-token context
        // that is 2 MB a task, and with 32 rows the kernel waited on it (attention_bench:
        // 2.90 → 2.56 ns a pair at 4,096 keys; prefill of 4,096 tokens −3 %).
        // Prompt rows (positions below `prompt_len`) and the others never share a chunk:
        // with bf16 prefill attention on, prompt chunks run the AMX kernel, the rest f32.
        const Q_CHUNK: usize = 64;
        let bf16 = self.prefill_bf16 && attention_amx::fits(shape, bs);
        let chunks: Vec<(Cow<SeqInput>, bool)> = self
            .step
            .seqs
            .iter()
            .flat_map(|seq| {
                let first_pos = seq.context_len - seq.query_len;
                let prompt_rows = seq.prompt_len.saturating_sub(first_pos).min(seq.query_len);
                let pieces = [(0, prompt_rows, bf16), (prompt_rows, seq.query_len, false)];
                pieces.into_iter().flat_map(move |(a, b, amx)| {
                    (a..b).step_by(Q_CHUNK).map(move |j0| {
                        let j1 = (j0 + Q_CHUNK).min(b);
                        if j0 == 0 && j1 == seq.query_len {
                            return (Cow::Borrowed(seq), amx);
                        }
                        let part = SeqInput {
                            query_start: seq.query_start + j0,
                            query_len: j1 - j0,
                            context_len: first_pos + j1,
                            block_table: seq.block_table.clone(),
                            prompt_len: seq.prompt_len,
                        };
                        (Cow::Owned(part), amx)
                    })
                })
            })
            .collect();
        // A task: one query head of a chunk, or for a bf16 chunk all the query heads of one
        // KV head (the kernel converts that head's K/V to tiles once for them).
        let group = shape.n_heads / shape.n_kv_heads;
        let tasks: Vec<(usize, std::ops::Range<usize>)> = (0..chunks.len())
            .flat_map(|c| {
                let per_task = if chunks[c].1 { group } else { 1 };
                (0..shape.n_heads)
                    .step_by(per_task)
                    .map(move |h| (c, h..h + per_task))
            })
            .collect();
        let tasks = balanced_order(tasks, |(c, heads)| {
            let part = &chunks[*c].0;
            part.query_len * part.context_len * heads.len()
        });
        let mut results: Vec<Vec<f32>> = vec![Vec::new(); tasks.len()];
        tiling::for_rows(
            tasks.len(),
            1,
            &mut results,
            1,
            &mut [(); 0],
            0,
            |i, res, _| {
                let (c, heads) = &tasks[i];
                let (part, amx) = &chunks[*c];
                res[0] = if *amx {
                    attention_amx::attend_prompt_bf16(
                        part,
                        heads.clone(),
                        &q.data,
                        kl,
                        vl,
                        shape,
                        bs,
                    )
                } else {
                    attention::attend(part, heads.start, &q.data, kl, vl, shape, bs)
                };
            },
        );
        let d = shape.head_dim;
        for ((c, heads), res) in tasks.iter().zip(results) {
            let part = &chunks[*c].0;
            let n = part.query_len * d;
            for (h, res) in heads.clone().zip(res.chunks_exact(n)) {
                for j in 0..part.query_len {
                    let t = part.query_start + j;
                    out[t * width + h * d..t * width + (h + 1) * d]
                        .copy_from_slice(&res[j * d..(j + 1) * d]);
                }
            }
        }
        CpuTensor {
            rows: q.rows,
            cols: width,
            data: out,
        }
    }

    fn silu_mul(&mut self, gate: &CpuTensor, up: &CpuTensor) -> CpuTensor {
        let cols = gate.cols;
        let mut data = vec![0.0f32; gate.rows * cols];
        tiling::for_rows(
            gate.rows,
            16,
            &mut data,
            cols,
            &mut [(); 0],
            0,
            |t, out, _| {
                let r = t * cols..(t + 1) * cols;
                kernels::silu_mul_row(&gate.data[r.clone()], &up.data[r], out)
            },
        );
        CpuTensor {
            rows: gate.rows,
            cols,
            data,
        }
    }

    fn gather_logit_rows(&mut self, x: &CpuTensor) -> CpuTensor {
        let mut data = Vec::with_capacity(self.step.logit_rows.len() * x.cols);
        for &r in &self.step.logit_rows {
            data.extend_from_slice(&x.data[r * x.cols..(r + 1) * x.cols]);
        }
        CpuTensor {
            rows: self.step.logit_rows.len(),
            cols: x.cols,
            data,
        }
    }

    fn to_host(&mut self, x: &CpuTensor) -> Vec<f32> {
        x.data.clone()
    }

    fn group_ranks(&self) -> usize {
        self.comm.as_ref().map_or(1, |c| c.ranks())
    }

    fn all_reduce_sum(&mut self, x: &mut CpuTensor) {
        let Some(comm) = &self.comm else { return };
        if self.comm_error.is_none() {
            if let Err(e) = comm.all_reduce_sum(&mut x.data) {
                self.comm_error = Some(e);
            }
        }
    }

    fn embed_vocab_shard(&mut self, table: &CpuMatrix, first: usize) -> CpuTensor {
        let (rows, cols) = table.shape();
        let mut data = Vec::with_capacity(self.step.tokens.len() * cols);
        for &t in &self.step.tokens {
            match (t as usize).checked_sub(first).filter(|&r| r < rows) {
                Some(r) => Self::push_row(table, r, &mut data),
                None => data.resize(data.len() + cols, 0.0),
            }
        }
        CpuTensor {
            rows: self.step.tokens.len(),
            cols,
            data,
        }
    }

    fn finish_step(&mut self) -> Result<()> {
        match self.comm_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One matmul for q|k|v and one for gate|up: each output value is still one row's
    /// dot product (the same bits as separate matmuls), but the activations are
    /// quantised once and a layer has 5 parallel regions instead of 8.
    fn fuses_projections(&self) -> bool {
        true
    }

    fn qkv_rope(
        &mut self,
        _layer: usize,
        x: &CpuTensor,
        w: &CpuMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CpuTensor, CpuTensor, CpuTensor) {
        let fused = self.linear(x, w, None);
        let (qd, kvd) = (
            shape.n_heads * shape.head_dim,
            shape.n_kv_heads * shape.head_dim,
        );
        assert_eq!(fused.cols, qd + 2 * kvd, "qkv_rope: fused rows");
        let columns = |from: usize, width: usize| CpuTensor {
            rows: fused.rows,
            cols: width,
            data: fused
                .data
                .chunks_exact(fused.cols)
                .flat_map(|r| &r[from..from + width])
                .copied()
                .collect(),
        };
        let (mut q, mut k, v) = (columns(0, qd), columns(qd, kvd), columns(qd + kvd, kvd));
        self.rope(&mut q, shape.n_heads, shape.head_dim, rope);
        self.rope(&mut k, shape.n_kv_heads, shape.head_dim, rope);
        (q, k, v)
    }

    fn supports(&self, op: ExtraOp) -> bool {
        match op {
            ExtraOp::HeadRmsNorm
            | ExtraOp::MixtureOfExperts
            | ExtraOp::LatentAttention
            | ExtraOp::GroupLimitedRouting => true,
        }
    }

    fn head_rms_norm(&mut self, x: &mut CpuTensor, n_heads: usize, w: &CpuVector, eps: f32) {
        let d = w.0.len();
        assert_eq!(x.cols, n_heads * d, "head_rms_norm: {n_heads} heads of {d}");
        tiling::for_rows(
            x.rows,
            16,
            &mut x.data,
            x.cols,
            &mut [(); 0],
            0,
            |_, row, _| {
                for head in row.chunks_exact_mut(d) {
                    kernels::rms_norm_inplace(head, &w.0, eps);
                }
            },
        );
    }

    /// The tokens of each expert in one matrix (its gate|up, SiLU·mul, down: each row a
    /// dot product of its own, whatever rows share the matrix), experts in ascending
    /// order, so every token's sum is taken in ascending expert order: the same bits
    /// for a token whatever else the step holds. Shared experts run on every row and are
    /// added last.
    fn moe_ffn(&mut self, x: &CpuTensor, layer: &MoeLayer<CpuVector, CpuMatrix>) -> CpuTensor {
        let (t, h) = (x.rows, x.cols);
        let n = layer.experts.len();
        assert_eq!(layer.router.0.len(), n * h, "moe_ffn: router shape");
        let logits = kernels::matmul_t(&x.data, t, &layer.router.0, n, h);
        let bias = layer.correction_bias.as_ref().map(|b| b.0.as_slice());
        let per_expert = crate::moe::tokens_per_expert(&logits, n, layer.routing, bias);
        let mut out = vec![0.0f32; t * h];
        for (expert, tokens) in layer.experts.iter().zip(&per_expert) {
            if tokens.is_empty() {
                continue;
            }
            let mut rows = Vec::with_capacity(tokens.len() * h);
            for &(tok, _) in tokens {
                rows.extend_from_slice(&x.data[tok * h..(tok + 1) * h]);
            }
            let input = CpuTensor {
                rows: tokens.len(),
                cols: h,
                data: rows,
            };
            let m = self.gate_up_silu(&input, &expert.gate_up);
            let y = self.linear(&m, &expert.down, None);
            for (&(tok, w), yr) in tokens.iter().zip(y.data.chunks_exact(h)) {
                for (o, v) in out[tok * h..(tok + 1) * h].iter_mut().zip(yr) {
                    *o += w * v;
                }
            }
        }
        let mut out = CpuTensor {
            rows: t,
            cols: h,
            data: out,
        };
        if let Some(shared) = &layer.shared {
            let m = self.gate_up_silu(x, &shared.gate_up);
            let y = self.linear(&m, &shared.down, None);
            self.add_assign(&mut out, &y);
        }
        out
    }

    /// Composed from the CPU's own ops (each row computed on its own, so the bits of a
    /// token do not depend on its step): the projections, RoPE on the rope parts, the
    /// heads assembled in cache layout ([`crate::mla::assemble_row`]), [`Backend::attention`]
    /// over the materialised K/V, and each head's value columns kept.
    fn latent_attention(
        &mut self,
        layer: usize,
        x: &CpuTensor,
        w: &MlaLayer<CpuVector, CpuMatrix>,
        rope: &RopeSpec,
    ) -> CpuTensor {
        let s = w.shape;
        let (t, heads, qk, d) = (x.rows, s.n_heads, s.qk_dim(), s.cache_dim());
        let q = match &w.q {
            MlaQuery::Direct(m) => self.linear(x, m, None),
            MlaQuery::LowRank { a, norm, b } => {
                let qa = self.linear(x, a, None);
                let qa = self.rms_norm(&qa, norm, s.eps);
                self.linear(&qa, b, None)
            }
        };
        assert_eq!(q.cols, heads * qk, "latent_attention: q width");
        let ckv = self.linear(x, &w.kv_a, None);
        let r = s.kv_lora_rank;
        assert_eq!(ckv.cols, r + s.rope, "latent_attention: kv_a width");
        let latent = CpuTensor {
            rows: t,
            cols: r,
            data: crate::mla::columns(&ckv.data, ckv.cols, 0, r),
        };
        let latent = self.rms_norm(&latent, &w.kv_norm, s.eps);
        let kv = self.linear(&latent, &w.kv_b, None);
        assert_eq!(
            kv.cols,
            heads * (s.nope + s.v),
            "latent_attention: kv_b width"
        );
        let mut q_rope = CpuTensor {
            rows: t,
            cols: heads * s.rope,
            data: crate::mla::head_columns(&q.data, heads, qk, s.nope, s.rope),
        };
        let mut k_rope = CpuTensor {
            rows: t,
            cols: s.rope,
            data: crate::mla::columns(&ckv.data, ckv.cols, r, s.rope),
        };
        self.rope(&mut q_rope, heads, s.rope, rope);
        self.rope(&mut k_rope, 1, s.rope, rope);
        let width = heads * d;
        let (mut qc, mut kc, mut vc) = (
            vec![0.0f32; t * width],
            vec![0.0f32; t * width],
            vec![0.0f32; t * width],
        );
        for (i, ((oq, ok), ov)) in qc
            .chunks_exact_mut(width)
            .zip(kc.chunks_exact_mut(width))
            .zip(vc.chunks_exact_mut(width))
            .enumerate()
        {
            crate::mla::assemble_row(
                &s,
                &q.data[i * q.cols..(i + 1) * q.cols],
                &q_rope.data[i * q_rope.cols..(i + 1) * q_rope.cols],
                &kv.data[i * kv.cols..(i + 1) * kv.cols],
                &k_rope.data[i * s.rope..(i + 1) * s.rope],
                (oq, ok, ov),
            );
        }
        let tensor = |data| CpuTensor {
            rows: t,
            cols: width,
            data,
        };
        // One materialised KV head per query head.
        let shape = AttnShape {
            n_heads: heads,
            n_kv_heads: heads,
            head_dim: d,
        };
        let a = self.attention(layer, &tensor(qc), &tensor(kc), &tensor(vc), shape);
        CpuTensor {
            rows: t,
            cols: heads * s.v,
            data: crate::mla::head_columns(&a.data, heads, d, 0, s.v),
        }
    }

    fn gate_up_silu(&mut self, x: &CpuTensor, w: &CpuMatrix) -> CpuTensor {
        let fused = self.linear(x, w, None);
        let i = fused.cols / 2;
        let mut data = vec![0.0f32; fused.rows * i];
        tiling::for_rows(
            fused.rows,
            16,
            &mut data,
            i,
            &mut [(); 0],
            0,
            |t, out, _| {
                let r = &fused.data[t * fused.cols..(t + 1) * fused.cols];
                kernels::silu_mul_row(&r[..i], &r[i..], out)
            },
        );
        CpuTensor {
            rows: fused.rows,
            cols: i,
            data,
        }
    }
}

/// `tasks` reordered for the team's split (each thread takes one contiguous share and
/// then steals single tasks from the back of the others'): sorted by `cost`, largest
/// first, and dealt round-robin into one share per thread, so every share starts with
/// large tasks and ends with the small ones a thief takes last. Attention tasks of a
/// long prompt differ by their context length; in prompt order the later, costlier half
/// fell to one thread. Only the order changes, never what a task computes.
fn balanced_order<T>(mut tasks: Vec<T>, cost: impl Fn(&T) -> usize) -> Vec<T> {
    let n = tasks.len();
    let shares = team::shares();
    // The team's shares: `[i·n/shares, (i+1)·n/shares)` (some empty when n < shares).
    let size = |i: usize| (i + 1) * n / shares - i * n / shares;
    tasks.sort_by_key(|t| std::cmp::Reverse(cost(t)));
    let mut dealt: Vec<Vec<T>> = (0..shares).map(|i| Vec::with_capacity(size(i))).collect();
    let mut next = 0;
    for t in tasks {
        while dealt[next].len() == size(next) {
            next = (next + 1) % shares;
        }
        dealt[next].push(t);
        next = (next + 1) % shares;
    }
    dealt.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::attention::testing::data;
    use super::*;

    #[test]
    fn balanced_order_gives_every_share_large_tasks_first_and_keeps_all() {
        let tasks: Vec<usize> = (0..23).collect();
        let order = balanced_order(tasks.clone(), |&t| t);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, tasks, "a permutation");
        let shares = team::shares().min(23);
        for i in 0..shares {
            let share = &order[i * 23 / shares..(i + 1) * 23 / shares];
            assert!(
                share.windows(2).all(|w| w[0] >= w[1]),
                "share {i}: {share:?}"
            );
            assert!(share[0] >= 23 - shares, "share {i} starts large: {share:?}");
        }
    }

    fn tensor(rows: usize, cols: usize, seed: usize) -> CpuTensor {
        CpuTensor {
            rows,
            cols,
            data: data(rows * cols, seed),
        }
    }

    /// With bf16 prompt attention on, the rows of a sequence below `prompt_len` take the
    /// AMX kernel and the rest (generated tokens: decode, verify, a recompute's tail) the
    /// f32 one, bit for bit, whatever chunks they fall in. On a CPU without AMX every row
    /// is f32.
    #[test]
    fn prompt_rows_and_generated_rows_take_their_own_attention() {
        let shape = AttnShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 64,
        };
        let bs = 16;
        let spec = KvSpec {
            layers: 1,
            num_blocks: 12,
            block_size: bs,
            n_kv_heads: 2,
            head_dim: 64,
        };
        let table: Vec<u32> = (0..12).rev().collect();
        // 30 positions cached, then 100 new rows: positions 30..100 are prompt (70 rows:
        // chunks of 64 and 6), 100..130 generated (30 rows).
        let (cached, new, prompt_len) = (30, 100, 100);
        let mut be =
            CpuBackend::new(CpuWeights::F32).with_prefill_attention(PrefillAttention::Bf16);
        be.alloc_kv(spec).unwrap();
        let step = |start: usize, rows: usize| StepInput {
            tokens: vec![1; rows],
            positions: (start as u32..(start + rows) as u32).collect(),
            seqs: vec![SeqInput {
                query_start: 0,
                query_len: rows,
                context_len: start + rows,
                block_table: table.clone(),
                prompt_len,
            }],
            logit_rows: vec![rows - 1],
        };
        let (kw, qw) = (2 * 64, 6 * 64);
        be.begin_step(&step(0, cached)).unwrap();
        be.attention(
            0,
            &tensor(cached, qw, 1),
            &tensor(cached, kw, 2),
            &tensor(cached, kw, 3),
            shape,
        );
        be.begin_step(&step(cached, new)).unwrap();
        let q = tensor(new, qw, 4);
        let out = be.attention(0, &q, &tensor(new, kw, 5), &tensor(new, kw, 6), shape);
        let kv = be.kv.as_ref().unwrap();
        let (kp, vp) = (&kv.k[0], &kv.v[0]);
        let part = |from: usize, to: usize| SeqInput {
            query_start: from,
            query_len: to - from,
            context_len: cached + to,
            block_table: table.clone(),
            prompt_len,
        };
        let (prompt, generated) = (part(0, 70), part(70, 100));
        let amx = attention_amx::available();
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let rows_of = |h: usize, from: usize, to: usize| -> Vec<f32> {
            (from..to)
                .flat_map(|j| out.data[j * qw + h * 64..j * qw + (h + 1) * 64].to_vec())
                .collect()
        };
        for h in 0..shape.n_heads {
            let tiles =
                attention_amx::attend_prompt_bf16(&prompt, h..h + 1, &q.data, kp, vp, shape, bs);
            let f32_prompt = attention::attend(&prompt, h, &q.data, kp, vp, shape, bs);
            let f32_generated = attention::attend(&generated, h, &q.data, kp, vp, shape, bs);
            let want_prompt = if amx { &tiles } else { &f32_prompt };
            assert_eq!(
                bits(&rows_of(h, 0, 70)),
                bits(want_prompt),
                "prompt rows, head {h}"
            );
            assert_eq!(
                bits(&rows_of(h, 70, 100)),
                bits(&f32_generated),
                "generated rows, head {h}"
            );
            if amx {
                // The two kernels differ, so the checks above tell the routes apart.
                assert_ne!(bits(&tiles), bits(&f32_prompt));
                let tiles_gen = attention_amx::attend_prompt_bf16(
                    &generated,
                    h..h + 1,
                    &q.data,
                    kp,
                    vp,
                    shape,
                    bs,
                );
                assert_ne!(bits(&tiles_gen), bits(&f32_generated));
            }
        }
    }
}
