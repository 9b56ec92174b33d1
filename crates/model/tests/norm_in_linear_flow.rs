//! The layer flow with the norms inside the projections (`Backend::fuses_norm_into_linear`):
//! taken exactly when the backend asks, on one rank with stacked projections, and, through
//! the trait's default compositions, the same logits bit for bit as the plain flow on the CPU.
//! Also the runner's side of `Backend::capture_again` (a step captured once per variant, the
//! kept variant's replay returned).

use anyhow::Result;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use wring_backend::cpu::{CpuBackend, CpuMatrix, CpuTensor, CpuVector};
use wring_backend::{AttnShape, Backend, HostMatrix, KvSpec, RopeSpec};
use wring_model::llama::{takes_norm_in_linear_flow, LlamaRunner};
use wring_model::weights::WeightSource;
use wring_model::{CpuWeights, ModelConfig, ModelRunner, RopeScaling, SeqInput, StepInput};

/// The CPU backend, answering `fuses_norm_into_linear` with `asks` and counting the calls
/// of the fused hooks (left to their default compositions).
struct Asking {
    inner: CpuBackend,
    asks: bool,
    fused_calls: Arc<AtomicUsize>,
    /// Pretend captures: variants to capture per step (0: none), captures so far, the
    /// first variant's output (the one "kept"), `embed` calls (one per `compute`), and
    /// whether `replay` handed the kept output back.
    variants: usize,
    captured: usize,
    kept: Option<CpuTensor>,
    computes: Arc<AtomicUsize>,
    replayed: Arc<AtomicUsize>,
}

impl Backend for Asking {
    type Tensor = CpuTensor;
    type Matrix = CpuMatrix;
    type Vector = CpuVector;

    fn name(&self) -> String {
        "cpu (asks for the norm-in-linear flow)".into()
    }
    fn upload_matrix(&mut self, m: HostMatrix) -> Result<CpuMatrix> {
        self.inner.upload_matrix(m)
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
    fn embed(&mut self, table: &CpuMatrix) -> CpuTensor {
        self.computes.fetch_add(1, Ordering::Relaxed);
        self.inner.embed(table)
    }
    fn begin_capture(&mut self) -> bool {
        self.captured < self.variants
    }
    fn end_capture(&mut self, out: &CpuTensor) -> bool {
        self.captured += 1;
        if self.captured == 1 {
            self.kept = Some(out.clone());
        }
        true
    }
    fn capture_again(&mut self) -> bool {
        self.captured < self.variants
    }
    fn replay(&mut self) -> Result<Option<CpuTensor>> {
        if self.variants > 1 && self.captured == self.variants {
            self.replayed.fetch_add(1, Ordering::Relaxed);
            return Ok(self.kept.take());
        }
        Ok(None)
    }
    fn rms_norm(&mut self, x: &CpuTensor, w: &CpuVector, eps: f32) -> CpuTensor {
        self.inner.rms_norm(x, w, eps)
    }
    fn add_assign(&mut self, x: &mut CpuTensor, y: &CpuTensor) {
        self.inner.add_assign(x, y)
    }
    fn linear(&mut self, x: &CpuTensor, w: &CpuMatrix, bias: Option<&CpuVector>) -> CpuTensor {
        self.inner.linear(x, w, bias)
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
    fn fuses_projections(&self) -> bool {
        self.inner.fuses_projections()
    }
    fn qkv_rope(
        &mut self,
        layer: usize,
        x: &CpuTensor,
        w: &CpuMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CpuTensor, CpuTensor, CpuTensor) {
        self.inner.qkv_rope(layer, x, w, shape, rope)
    }
    fn gate_up_silu(&mut self, x: &CpuTensor, w: &CpuMatrix) -> CpuTensor {
        self.inner.gate_up_silu(x, w)
    }
    fn fuses_norm_into_linear(&self) -> bool {
        self.asks
    }
    fn linear_add_residual(&mut self, x: &mut CpuTensor, input: &CpuTensor, w: &CpuMatrix) {
        self.fused_calls.fetch_add(1, Ordering::Relaxed);
        let y = self.inner.linear(input, w, None);
        self.inner.add_assign(x, &y);
    }
}

fn tiny_config() -> ModelConfig {
    ModelConfig {
        architecture: "llama".into(),
        hidden_size: 64,
        intermediate_size: 96,
        num_layers: 3,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        vocab_size: 101,
        max_position_embeddings: 256,
        rms_norm_eps: 1e-5,
        rope_theta: 10000.0,
        rope_scaling: RopeScaling::None,
        rope_interleaved: false,
        tie_word_embeddings: true,
        attention_bias: false,
        qk_norm: false,
        moe: None,
        mla: None,
    }
}

/// Prefill of two sequences, then a decode step and a 3-token verify-shaped step each: every
/// step's logits.
fn run_steps(r: &mut dyn ModelRunner) -> Vec<Vec<f32>> {
    let prompts: [Vec<u32>; 2] = [vec![3, 14, 15, 92, 65], vec![35, 89, 79]];
    let mut out = vec![];
    let mut lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let tables: Vec<Vec<u32>> = vec![vec![0, 1], vec![2, 3]];
    let step_of = |news: &[Vec<u32>], lens: &[usize]| {
        let mut s = StepInput::default();
        for (i, new) in news.iter().enumerate() {
            let start = lens[i] - new.len();
            s.seqs.push(SeqInput {
                query_start: s.tokens.len(),
                query_len: new.len(),
                context_len: lens[i],
                block_table: tables[i].clone(),
                prompt_len: 0,
            });
            s.positions.extend(start as u32..lens[i] as u32);
            s.tokens.extend_from_slice(new);
            for j in 0..new.len() {
                s.logit_rows.push(s.tokens.len() - new.len() + j);
            }
        }
        s
    };
    out.push(r.forward(&step_of(&prompts, &lens)).unwrap().data);
    for new in [
        vec![vec![7u32], vec![8]],
        vec![vec![9, 10, 11], vec![12, 13, 14]],
    ] {
        for (l, n) in lens.iter_mut().zip(&new) {
            *l += n.len();
        }
        out.push(r.forward(&step_of(&new, &lens)).unwrap().data);
    }
    out
}

fn asking(asks: bool, variants: usize) -> Asking {
    Asking {
        inner: CpuBackend::new(CpuWeights::F32),
        asks,
        fused_calls: Arc::new(AtomicUsize::new(0)),
        variants,
        captured: 0,
        kept: None,
        computes: Arc::new(AtomicUsize::new(0)),
        replayed: Arc::new(AtomicUsize::new(0)),
    }
}

fn runner(asks: bool) -> (LlamaRunner<Asking>, Arc<AtomicUsize>) {
    let b = asking(asks, 0);
    let calls = b.fused_calls.clone();
    let src = WeightSource::Dummy { seed: 11 };
    (
        LlamaRunner::new(b, tiny_config(), &src, 8, 16).unwrap(),
        calls,
    )
}

#[test]
fn the_flow_is_taken_only_when_the_backend_asks_on_one_rank_with_stacked_projections() {
    assert!(takes_norm_in_linear_flow(false, true, true));
    assert!(!takes_norm_in_linear_flow(false, true, false));
    assert!(
        !takes_norm_in_linear_flow(true, true, true),
        "never on a tensor-parallel rank"
    );
    assert!(
        !takes_norm_in_linear_flow(false, false, true),
        "needs stacked q|k|v and gate|up"
    );
}

#[test]
fn norm_in_linear_flow_gives_the_plain_flows_logits_bit_for_bit_on_the_cpu() {
    let mut plain = LlamaRunner::new(
        CpuBackend::new(CpuWeights::F32),
        tiny_config(),
        &WeightSource::Dummy { seed: 11 },
        8,
        16,
    )
    .unwrap();
    let want = run_steps(&mut plain);
    let (mut not_asked, calls) = runner(false);
    assert_eq!(run_steps(&mut not_asked), want);
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "plain flow when not asked"
    );
    let (mut asked, calls) = runner(true);
    let got = run_steps(&mut asked);
    // o and down of every layer, every step.
    assert_eq!(calls.load(Ordering::Relaxed), 3 * 2 * 3);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(g.iter().all(|v| v.is_finite()));
        assert_eq!(
            g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            w.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_step_captured_as_two_variants_runs_both_and_returns_the_kept_ones_replay() {
    let step = || {
        let mut s = StepInput::default();
        s.seqs.push(SeqInput {
            query_start: 0,
            query_len: 4,
            context_len: 4,
            block_table: vec![0],
            prompt_len: 0,
        });
        s.tokens = vec![5, 6, 7, 8];
        s.positions = vec![0, 1, 2, 3];
        s.logit_rows = vec![3];
        s
    };
    let src = WeightSource::Dummy { seed: 3 };
    let mut plain =
        LlamaRunner::new(CpuBackend::new(CpuWeights::F32), tiny_config(), &src, 8, 16).unwrap();
    let want = plain.forward(&step()).unwrap().data;
    for variants in [1usize, 2, 3] {
        let b = asking(false, variants);
        let (computes, replayed) = (b.computes.clone(), b.replayed.clone());
        let mut r = LlamaRunner::new(b, tiny_config(), &src, 8, 16).unwrap();
        let got = r.forward(&step()).unwrap().data;
        assert_eq!(got, want, "{variants} variant(s)");
        assert_eq!(
            computes.load(Ordering::Relaxed),
            variants,
            "one compute per variant"
        );
        let replays = replayed.load(Ordering::Relaxed);
        assert_eq!(
            replays,
            usize::from(variants > 1),
            "the kept variant is replayed"
        );
    }
}
