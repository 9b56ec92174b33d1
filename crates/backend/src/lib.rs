//! Compute backends behind one trait. The Llama-family forward pass in `wring-model`
//! is written once against [`Backend`]; `cpu` is the pure-Rust reference and default.
//!
//! A backend owns its weights, its paged KV pool and its activation memory. Ops take
//! and return opaque tensors; per-step metadata (positions, block tables) is handed
//! over once per step in [`Backend::begin_step`], so a device backend can stage it in
//! fixed buffers before anything is launched (what a captured graph needs).

pub mod cpu;
pub mod mla;
pub mod moe;
pub mod quant;
mod step;

pub use mla::{MlaLayer, MlaQuery, MlaShape};
pub use moe::{Expert, MoeLayer, MoeRouting, MoeScoring};
pub use step::{Logits, RowMasks, SeqInput, StepInput};

/// Ops some architectures need beyond the Llama family's. The model asks
/// [`Backend::supports`] for each one its configuration needs before it uploads a
/// weight, so a backend without one refuses the model at load, naming the op, and never
/// runs it wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraOp {
    /// [`Backend::head_rms_norm`] (Qwen3's q/k norms).
    HeadRmsNorm,
    /// [`Backend::moe_ffn`] (Qwen3-MoE, Mixtral).
    MixtureOfExperts,
    /// [`Backend::latent_attention`] (DeepSeek-V3's multi-head latent attention).
    LatentAttention,
    /// [`Backend::moe_ffn`] of layers with sigmoid scores, a correction bias, expert
    /// groups, a routed scale or shared experts (DeepSeek-V3; [`moe`]).
    GroupLimitedRouting,
}

impl std::fmt::Display for ExtraOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExtraOp::HeadRmsNorm => "q/k norms (per-head RMSNorm)",
            ExtraOp::MixtureOfExperts => "mixture-of-experts layers",
            ExtraOp::LatentAttention => "multi-head latent attention (MLA) layers",
            ExtraOp::GroupLimitedRouting => {
                "sigmoid group-limited expert routing with shared experts"
            }
        })
    }
}

/// One step shape a server meets cold at first (`--warm-up`): `rows` sequences of
/// `query_len` tokens each (decode or verify rows), then, when `chunk` > 0, one prompt
/// chunk of `chunk` tokens. No rows and a chunk: a prompt alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmUpStep {
    pub rows: usize,
    pub query_len: usize,
    pub chunk: usize,
}

/// How positions rotate query/key pairs.
#[derive(Debug, Clone)]
pub struct RopeSpec {
    /// Per pair frequency (length head_dim/2), scaling (e.g. llama3) already applied.
    pub inv_freq: Vec<f32>,
    /// true: rotate adjacent pairs (x[2i], x[2i+1]) — GGUF's layout for llama.
    /// false: rotate halves (x[i], x[i+d/2]) — Hugging Face's layout.
    pub interleaved: bool,
}

/// Shape of the attention of one layer.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// A weight matrix `[rows=out][cols=in]` handed to a backend for upload.
#[derive(Debug, Clone)]
pub struct HostMatrix {
    pub rows: usize,
    pub cols: usize,
    /// Row-major f32 (already dequantised).
    pub data: Vec<f32>,
}

/// KV pool geometry.
#[derive(Debug, Clone, Copy)]
pub struct KvSpec {
    pub layers: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl KvSpec {
    /// Bytes per block across all layers at `elem_bytes` per value (K and V).
    pub fn bytes_per_block(
        layers: usize,
        block_size: usize,
        n_kv_heads: usize,
        head_dim: usize,
        elem_bytes: usize,
    ) -> usize {
        2 * layers * block_size * n_kv_heads * head_dim * elem_bytes
    }
}

/// The op set the model forward is written against.
pub trait Backend: Send {
    type Tensor: Send;
    type Matrix: Send + Sync;
    type Vector: Send + Sync;

    fn name(&self) -> String;
    fn upload_matrix(&mut self, m: HostMatrix) -> anyhow::Result<Self::Matrix>;
    /// Uploads a quantized weight. The default dequantises it to f32 and calls
    /// [`Backend::upload_matrix`] (correct everywhere, no memory saved); backends with
    /// kernels for the scheme keep it quantized.
    fn upload_quantized(&mut self, m: quant::QuantMatrix) -> anyhow::Result<Self::Matrix> {
        let data = m.dequantize();
        self.upload_matrix(HostMatrix {
            rows: m.rows,
            cols: m.cols,
            data,
        })
    }
    fn upload_vector(&mut self, v: &[f32]) -> anyhow::Result<Self::Vector>;
    /// Allocates the paged KV pool once.
    fn alloc_kv(&mut self, spec: KvSpec) -> anyhow::Result<()>;
    /// How many KV blocks of `kv`'s geometry (its `num_blocks` ignored) fit in this
    /// device's memory so that all of it in use stays within `utilization` of its total:
    /// the weights already uploaded, other processes, and what steps need beside the pool
    /// (activations for the step token cap, attention workspaces, graphs) counted. Called
    /// after the weights are uploaded and before [`Backend::alloc_kv`]. Devices whose
    /// memory is not theirs to size from (the CPU) refuse.
    fn kv_blocks_for_memory(
        &self,
        utilization: f32,
        kv: KvSpec,
        attn: AttnShape,
    ) -> anyhow::Result<usize> {
        let _ = (utilization, kv, attn);
        anyhow::bail!(
            "{} has no device memory to size the KV cache from; give its size (--kv-cache-memory)",
            self.name()
        )
    }
    /// Gives the KV pool's memory back and continues on new, zeroed memory of the same
    /// size. Called while no sequence holds a block, after start-up probes (the adaptive
    /// policy's calibration, warm-up). The CPU needs it: decode steps of 30+ sequences
    /// whose K/V lay in pages the probes had written ran 8–10 % slower than on new pages
    /// (results/2026-12-05-cpu-spec-renew-kv). Elsewhere a no-op.
    fn renew_kv(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// Validates and stages the step's metadata; every op below refers to it.
    fn begin_step(&mut self, step: &StepInput) -> anyhow::Result<()>;

    /// Rows of `table` for the step's tokens: `[T][cols]`.
    fn embed(&mut self, table: &Self::Matrix) -> Self::Tensor;
    fn rms_norm(&mut self, x: &Self::Tensor, w: &Self::Vector, eps: f32) -> Self::Tensor;
    fn add_assign(&mut self, x: &mut Self::Tensor, y: &Self::Tensor);
    /// `x · Wᵀ (+ bias)`: `[T][in]` → `[T][out]`.
    fn linear(
        &mut self,
        x: &Self::Tensor,
        w: &Self::Matrix,
        bias: Option<&Self::Vector>,
    ) -> Self::Tensor;
    /// Rotates `x` (`[T][n_heads*head_dim]`) in place at the step's positions.
    fn rope(&mut self, x: &mut Self::Tensor, n_heads: usize, head_dim: usize, rope: &RopeSpec);
    /// Writes this step's K/V into the pool for `layer`, then attends every query over
    /// its sequence's cached context (causal). Returns `[T][n_heads*head_dim]`.
    fn attention(
        &mut self,
        layer: usize,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        shape: AttnShape,
    ) -> Self::Tensor;
    /// `silu(gate) * up`, elementwise.
    fn silu_mul(&mut self, gate: &Self::Tensor, up: &Self::Tensor) -> Self::Tensor;
    /// The step's `logit_rows` of `x`.
    fn gather_logit_rows(&mut self, x: &Self::Tensor) -> Self::Tensor;
    fn to_host(&mut self, x: &Self::Tensor) -> Vec<f32>;

    // Hooks with defaults: a backend that fuses ops or replays CUDA graphs overrides
    // them; the defaults keep every other backend's behaviour exactly as it was.

    /// `x += y`, then `rms_norm(x)`, in one pass where the backend can.
    fn add_rms_norm(
        &mut self,
        x: &mut Self::Tensor,
        y: &Self::Tensor,
        w: &Self::Vector,
        eps: f32,
    ) -> Self::Tensor {
        self.add_assign(x, y);
        self.rms_norm(x, w, eps)
    }
    /// Names the matrix that reads the next GEMM input this backend produces (the output
    /// of the next `rms_norm`, `add_rms_norm`, `attention`, `silu_mul` or
    /// `gate_up_silu`), so a backend may write it in the format that matrix's kernel reads
    /// (CUDA: E4M3 codes and per-token scales for FP8 weights). Values are unchanged;
    /// the default ignores it.
    fn next_input_for(&mut self, _w: &Self::Matrix) {}
    /// Called after `begin_step`: when a graph captured for this step's shape exists,
    /// replays it and returns the step's logits tensor (as `compute` would have).
    fn replay(&mut self) -> anyhow::Result<Option<Self::Tensor>> {
        Ok(None)
    }
    /// Query lengths per sequence (1 + K for a verify step) for which the backend
    /// captures step graphs; a step of another shape runs its ops eagerly. None: the
    /// backend captures no graphs. The engine's adaptive K policy picks K among these.
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        None
    }
    /// The step shapes whose first use costs this backend more than later ones (graph
    /// captures, per-shape library set-up), for rows of `query_lens` tokens, at most
    /// `max_seqs` sequences and `max_tokens` tokens a step; running each a few times
    /// before serving moves that cost to start-up. Empty: nothing to warm (the CPU).
    fn warm_up_steps(
        &self,
        _query_lens: &[usize],
        _max_seqs: usize,
        _max_tokens: usize,
    ) -> Vec<WarmUpStep> {
        Vec::new()
    }
    /// Index of the largest value of each row of `logits` (first on ties), computed
    /// where the logits live so only ids travel; None when the backend has no such op.
    fn argmax_rows(&mut self, _logits: &Self::Tensor) -> Option<Vec<u32>> {
        None
    }
    /// [`Backend::argmax_rows`] under structured output: each masked row's largest
    /// allowed value ([`RowMasks::argmax`]'s rule), the masks applied where the logits live
    /// so only the masks go there and only ids come back. None when the backend has no
    /// such op.
    fn argmax_rows_masked(
        &mut self,
        _logits: &Self::Tensor,
        _masks: &RowMasks,
    ) -> Option<Vec<u32>> {
        None
    }
    /// Called when `replay` returned None: true when the backend starts capturing the
    /// ops that follow (nothing runs until `end_capture`).
    fn begin_capture(&mut self) -> bool {
        false
    }
    /// Ends a capture begun by `begin_capture` with `out` as the step's output and runs
    /// the graph once. False when capturing failed (the backend logs why): the caller
    /// must then run the step's ops again, eagerly.
    fn end_capture(&mut self, _out: &Self::Tensor) -> bool {
        true
    }
    /// Reports any error an op hit during the step (ops themselves cannot fail).
    fn finish_step(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// True when the backend runs the q|k|v and gate|up projections as one GEMM each
    /// ([`Backend::qkv_rope`], [`Backend::gate_up_silu`]) over weights whose rows were
    /// stacked before [`Backend::upload_matrix`]. The model only calls those two then.
    fn fuses_projections(&self) -> bool {
        false
    }
    /// `x · Wᵀ` for `w` = the q, k and v rows stacked, split into q
    /// (`[T][n_heads*head_dim]`), k and v (`[T][n_kv_heads*head_dim]`), RoPE applied to
    /// q and k: the same values as three `linear`s and two `rope`s. `layer` is the layer
    /// whose `attention` comes next: a backend may already store k and v in its KV pool
    /// (then that `attention` does not store them again).
    fn qkv_rope(
        &mut self,
        _layer: usize,
        _x: &Self::Tensor,
        _w: &Self::Matrix,
        _shape: AttnShape,
        _rope: &RopeSpec,
    ) -> (Self::Tensor, Self::Tensor, Self::Tensor) {
        unreachable!("qkv_rope is only called when fuses_projections() is true")
    }
    /// `silu(x · gateᵀ) * (x · upᵀ)` for `w` = the gate and up rows stacked.
    fn gate_up_silu(&mut self, _x: &Self::Tensor, _w: &Self::Matrix) -> Self::Tensor {
        unreachable!("gate_up_silu is only called when fuses_projections() is true")
    }

    /// True when this step should run the layer flow with the RMSNorms inside the q|k|v
    /// and gate|up projections and the residual adds inside the o and down projections
    /// ([`Backend::rms_norm_qkv_rope`], [`Backend::rms_norm_gate_up_silu`],
    /// [`Backend::linear_add_residual`]); asked after `begin_step`. Only consulted with
    /// fused projections on one rank. The defaults below compose the plain ops, so the
    /// answer changes launches, never values the default composition would not give.
    fn fuses_norm_into_linear(&self) -> bool {
        false
    }
    /// `x += input · Wᵀ` (the residual add after the o and down projections).
    fn linear_add_residual(
        &mut self,
        x: &mut Self::Tensor,
        input: &Self::Tensor,
        w: &Self::Matrix,
    ) {
        let y = self.linear(input, w, None);
        self.add_assign(x, &y);
    }
    /// [`Backend::qkv_rope`] of `rms_norm(x, norm, eps)`.
    #[allow(clippy::too_many_arguments)]
    fn rms_norm_qkv_rope(
        &mut self,
        layer: usize,
        x: &Self::Tensor,
        norm: &Self::Vector,
        eps: f32,
        w: &Self::Matrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (Self::Tensor, Self::Tensor, Self::Tensor) {
        let h = self.rms_norm(x, norm, eps);
        self.qkv_rope(layer, &h, w, shape, rope)
    }
    /// [`Backend::gate_up_silu`] of `rms_norm(x, norm, eps)`.
    fn rms_norm_gate_up_silu(
        &mut self,
        x: &Self::Tensor,
        norm: &Self::Vector,
        eps: f32,
        w: &Self::Matrix,
    ) -> Self::Tensor {
        let h = self.rms_norm(x, norm, eps);
        self.gate_up_silu(&h, w)
    }
    /// Called after a successful `end_capture`: true when the backend wants the same step
    /// captured once more (another variant of the same shape, to time them). When it
    /// answers false after several captures of one step, `replay` gives the step's output
    /// (the variant it kept).
    fn capture_again(&mut self) -> bool {
        false
    }

    // Tensor parallelism (`wring_model::shard`). The defaults are one rank, which needs
    // no collective; a backend that joins a group of ranks overrides all of them.

    /// Ranks of the collective group this backend belongs to (1: none). The model only
    /// builds a rank of an N-way split on a backend of a group of N.
    fn group_ranks(&self) -> usize {
        1
    }
    /// Sums `x` over every rank of the group, in place, leaving the same values on every
    /// rank. A failure is reported by `finish_step`, like any op's.
    fn all_reduce_sum(&mut self, _x: &mut Self::Tensor) {}
    /// The step's token rows of a vocabulary-parallel embedding shard holding the rows
    /// of ids `first..first + rows`: ids outside it get zero rows (the all-reduce that
    /// follows adds the row from the rank that holds it).
    fn embed_vocab_shard(&mut self, _table: &Self::Matrix, _first: usize) -> Self::Tensor {
        unreachable!("embed_vocab_shard is only called on a group of several ranks")
    }
    /// (largest value, its index) of each row of `logits` (first on ties, NaN never
    /// wins), computed where the logits live; None: the caller copies the rows back.
    fn max_rows(&mut self, _logits: &Self::Tensor) -> Option<Vec<(f32, u32)>> {
        None
    }

    // Ops of architectures beyond the Llama family ([`ExtraOp`]). None composes from the
    // ops above (each needs a per-head or per-token view of a tensor the trait does not
    // expose), so the defaults support none and the model refuses at load.

    /// Whether this backend runs `op`. The default: none of them.
    fn supports(&self, _op: ExtraOp) -> bool {
        false
    }
    /// RMSNorm of every head of `x` (`[T][n_heads*head_dim]`, `head_dim` = `w`'s
    /// length) in place, all heads with the same weights: Qwen3's q and k norms, before
    /// RoPE. Called only when `supports(ExtraOp::HeadRmsNorm)`.
    fn head_rms_norm(
        &mut self,
        _x: &mut Self::Tensor,
        _n_heads: usize,
        _w: &Self::Vector,
        _eps: f32,
    ) {
        unreachable!("head_rms_norm is only called when supports(ExtraOp::HeadRmsNorm)")
    }
    /// Checks one mixture-of-experts layer once its weights are uploaded, before any step:
    /// a backend refuses here, at load, a layer its `moe_ffn` cannot run (a weight format,
    /// a size past its limits) and may size its step memory for it. Called only when
    /// `supports(ExtraOp::MixtureOfExperts)`. The default accepts every layer.
    fn prepare_moe(&mut self, _layer: &MoeLayer<Self::Vector, Self::Matrix>) -> anyhow::Result<()> {
        Ok(())
    }
    /// The mixture-of-experts feed-forward of `x` (`[T][hidden]`, already normed):
    /// per token, its experts by [`moe::route`] of its router logits (and the layer's
    /// correction bias), and the weighted sum of their SwiGLU outputs, added in ascending
    /// expert order, then the shared experts' output when the layer has them. A token's
    /// result must not depend on the other tokens of the step (which experts they pick,
    /// how many share an expert). Called only when `supports(ExtraOp::MixtureOfExperts)`
    /// (and `supports(ExtraOp::GroupLimitedRouting)` for a layer that is not
    /// [`MoeLayer::is_plain_softmax`]).
    fn moe_ffn(
        &mut self,
        _x: &Self::Tensor,
        _layer: &MoeLayer<Self::Vector, Self::Matrix>,
    ) -> Self::Tensor {
        unreachable!("moe_ffn is only called when supports(ExtraOp::MixtureOfExperts)")
    }
    /// Multi-head latent attention of `x` (`[T][hidden]`, already normed) for `layer`
    /// ([`mla`]): the q and latent projections, RoPE on the rope parts at the step's
    /// positions, this step's K/V stored in the layer's pool (one KV head of
    /// [`MlaShape::cache_dim`] per query head) and causal
    /// attention over the cached context. Returns `[T][heads·v]`, the input of the output
    /// projection. Called only when `supports(ExtraOp::LatentAttention)`.
    fn latent_attention(
        &mut self,
        _layer: usize,
        _x: &Self::Tensor,
        _w: &MlaLayer<Self::Vector, Self::Matrix>,
        _rope: &RopeSpec,
    ) -> Self::Tensor {
        unreachable!("latent_attention is only called when supports(ExtraOp::LatentAttention)")
    }
}
