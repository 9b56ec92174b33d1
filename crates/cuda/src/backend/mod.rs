//! [`CudaBackend`]: the op set of `wring_backend::Backend` on an NVIDIA GPU.
//!
//! Memory: weights in their own allocations (bf16 matrices, f32 vectors); one KV pool
//! (bf16, `[layer][K|V][block][slot][kv_head][head_dim]`, plus scratch blocks for padded
//! sequences); one activation arena (deterministic free list); one metadata buffer.
//! Residual stream and GEMM outputs are f32; GEMM inputs (norm, attention and SiLU
//! outputs) are bf16.
//!
//! Ops cannot return errors (the trait is infallible); the first failure is kept, later
//! ops become no-ops, and `finish_step` reports it.

mod argmax;
mod attention;
mod fp8;
mod linear;
mod moe;
mod persistent;
mod qlinear;
mod rows;
mod small_step;
mod step_path;
mod tensor;
mod tensor_parallel;
mod transfer;

pub use step_path::SmallStepChoice;
pub use tensor::{CudaMatrix, CudaTensor, CudaVector};
pub use transfer::measure_copy_bandwidth;
use transfer::{copy_to_host, to_bf16_bits, upload_f32, upload_slice};

use crate::arena::Arena;
use crate::blas::Blas;
use crate::blaslt::BlasLt;
use crate::device::{launch, launch_struct_smem, Arg, DeviceBuffer, PinnedBuffer};
use crate::graphs::{GraphKey, Graphs};
use crate::kernels::Kernels;
use crate::meta::{stage_step, Padding, StepLayout};
use crate::options::{
    chunk_short_query_len, AttentionKernel, CudaOptions, GraphMode, SmallStepPath,
};
use crate::params::PREFILL_MIN_Q;
use crate::qweights::{quantize_for_load, DeviceMatrix};
use anyhow::{anyhow, bail, ensure, Context, Result};
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::sync::Arc;
use tensor::{DType, Weights};
use wring_backend::{
    AttnShape, Backend, ExtraOp, HostMatrix, KvSpec, MoeLayer, RopeSpec, RowMasks, StepInput,
};

struct KvPool {
    buf: DeviceBuffer,
    spec: KvSpec,
    /// Bytes of one layer's K (or V) part.
    part_bytes: usize,
    scratch_first_block: u32,
    /// Tokens the scratch blocks past the real pool hold (pad sequences write there).
    scratch_tokens: usize,
}

struct StepBuffers {
    device: DeviceBuffer,
    host: PinnedBuffer,
    capacity: usize,
}

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Kernels,
    blas: Blas,
    opts: CudaOptions,
    name: String,
    kv: Option<KvPool>,
    arena: Option<(DeviceBuffer, Arena)>,
    meta: Option<StepBuffers>,
    /// Argmax output, one id per logit row (outside the arena: graph outputs live there).
    ids: Option<DeviceBuffer>,
    /// A greedy step's grammar masks (`argmax_rows_masked`), grown to the largest seen.
    masks: Option<(DeviceBuffer, usize)>,
    layout: StepLayout,
    /// Most query tokens any sequence of the current step carries (padding included).
    max_query_len: usize,
    /// Most query tokens of the current step's sequences shorter than `PREFILL_MIN_Q`
    /// (those attention_mma runs beside a prefill chunk; 0: none).
    short_query_len: usize,
    /// The layer whose K/V this step's `qkv_rope` already wrote into the pool (its
    /// `attention` then skips `kv_store`).
    kv_stored: Option<usize>,
    key: Option<GraphKey>,
    graphs: Graphs,
    rope_freqs: Vec<(Vec<f32>, DeviceBuffer)>,
    /// Largest dimension of any non-vocabulary matrix and the vocabulary (rows of the
    /// tallest matrix): they size the activation arena.
    widest: usize,
    vocab: usize,
    error: Option<anyhow::Error>,
    arch: (i32, i32),
    /// cuBLASLt for FP8 weights (sm_89+), created at the first FP8 upload; None when
    /// unavailable (FP8 weights then run through the dequantising path).
    lt: Option<BlasLt>,
    lt_tried: bool,
    /// bf16 tile that quantized weights are dequantised into for large steps.
    scratch: Option<DeviceBuffer>,
    scratch_bytes: usize,
    /// Bytes of weights resident on the device (matrices and vectors).
    weight_bytes: usize,
    /// Streaming multiprocessors (sizes grids that must fill the GPU).
    sm_count: usize,
    /// Arrival counters of the gemv kernels' split reduction (one per row group, zeroed at
    /// allocation with the KV pool; each launch leaves them zero) and how many there are.
    gemv_counters: Option<DeviceBuffer>,
    gemv_counter_words: usize,
    /// gemv kernels launched so far (checks tell the gemv path from a silent fallback).
    gemv_launches: u64,
    /// Split partials and counters of the tensor-core attention kernel.
    mma_ws: Option<crate::params::MmaWorkspace>,
    /// Set on a rank of a tensor-parallel group (`join_group`, tensor_parallel.rs), with
    /// the `[row][index, value bits]` buffer of its `max_rows` (allocated at first use).
    group: Option<Arc<crate::nccl::NcclComm>>,
    row_maxima: Option<DeviceBuffer>,
    /// `Backend::next_input_for`: (n_in, n_out) of the FP8 weight the next GEMM input
    /// feeds, taken by the op that produces it (`fp8.rs`).
    fp8_next: Option<(usize, usize)>,
    /// The persistent step kernel's programs and the capture recording for it
    /// (`persistent.rs`; None until a persistent step is first recorded).
    persistent: Option<crate::persistent::Persistent>,
    /// This step's linear path (`small_step.rs`), set by `begin_step` and the captures.
    path: step_path::StepPath,
    /// `SmallStepPath::Auto`'s choices and the variants of the key being captured.
    small: step_path::SmallSteps,
    /// When this step's `begin_step` started, and how long the host then took to queue its
    /// work up to the synchronising copy back (`last_step_enqueue_seconds`): a step whose
    /// enqueue time is its whole time is host-bound.
    step_started: Option<std::time::Instant>,
    last_enqueue_s: f64,
    /// Arena bytes the largest mixture-of-experts layer's op holds in a step of `max_tokens`
    /// tokens (`moe.rs`, recorded by `prepare_moe` before the arena is sized).
    moe_scratch: usize,
}

impl CudaBackend {
    /// The ops beyond the Llama family's ([`ExtraOp`]) this backend runs by default: Qwen3's
    /// q/k norms, not yet mixture-of-experts layers, so Qwen3-MoE and Mixtral are refused at
    /// load, before the device is opened, with a message naming the `model_type`.
    /// `WRING_CUDA_MOE=on` adds them ([`Self::runs`]) until the op has been checked on a GPU.
    pub const EXTRA_OPS: &'static [ExtraOp] = &[ExtraOp::HeadRmsNorm];

    /// Whether a backend opened with `opts` runs `op` (what its `supports` answers; known
    /// before the device is opened).
    pub fn runs(opts: &CudaOptions, op: ExtraOp) -> bool {
        Self::EXTRA_OPS.contains(&op) || (op == ExtraOp::MixtureOfExperts && opts.moe)
    }

    /// Opens GPU `ordinal`, loads the kernels and cuBLAS. Errors (never panics) when the
    /// CUDA libraries or the device are missing.
    pub fn new(ordinal: usize, opts: CudaOptions) -> Result<Self> {
        crate::loader::ensure_cuda_libraries()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| {
            anyhow!("cannot open CUDA device {ordinal}: {e:?} (is there an NVIDIA GPU with a working driver?)")
        })?;
        // Allocations here are raw; cudarc's event tracking must not run inside captures.
        // SAFETY: called before any cudarc allocation on this context.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| anyhow!("cannot create a CUDA stream: {e:?}"))?;
        let arch = ctx
            .compute_capability()
            .map_err(|e| anyhow!("cannot read the compute capability: {e:?}"))?;
        let kernels = Kernels::load(arch).context("loading the CUDA kernels")?;
        // Programmatic dependent launch needs sm_90 (the instructions are no-ops below).
        let mut opts = opts;
        opts.pdl &= arch.0 >= 9;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| anyhow!("cannot read the multiprocessor count: {e:?}"))?
            .max(1) as usize;
        let blas = Blas::new(stream.cu_stream(), opts.gemm_tune, opts.gemm_lt)?;
        let name = format!(
            "cuda:{ordinal} ({}, sm_{}{})",
            ctx.name().unwrap_or_else(|_| "unknown GPU".into()),
            arch.0,
            arch.1
        );
        Ok(Self {
            ctx,
            stream,
            kernels,
            blas,
            opts,
            name,
            kv: None,
            arena: None,
            meta: None,
            ids: None,
            masks: None,
            layout: StepLayout::default(),
            max_query_len: 0,
            short_query_len: 0,
            kv_stored: None,
            key: None,
            graphs: Graphs::default(),
            rope_freqs: vec![],
            widest: 0,
            vocab: 0,
            error: None,
            arch,
            lt: None,
            lt_tried: false,
            scratch: None,
            scratch_bytes: 0,
            weight_bytes: 0,
            sm_count,
            gemv_counters: None,
            gemv_counter_words: 0,
            gemv_launches: 0,
            mma_ws: None,
            group: None,
            row_maxima: None,
            persistent: None,
            fp8_next: None,
            path: Default::default(),
            small: Default::default(),
            step_started: None,
            last_enqueue_s: 0.0,
            moe_scratch: 0,
        })
    }

    pub fn options(&self) -> &CudaOptions {
        &self.opts
    }

    /// The weight-streaming gemv kernels for steps of at most `t` tokens (capped at 8; 0:
    /// cuBLAS and the quantized GEMMs always), forced (`SmallStepPath::Gemv`, or `Cublas`
    /// for 0) as `WRING_CUDA_SMALL_LINEAR_MAX_T` alone does; captured graphs are dropped
    /// and captured again.
    pub fn set_small_linear_max_t(&mut self, t: usize) {
        self.set_gemv_max_t(t, t);
        self.set_small_step_path(if t > 0 {
            SmallStepPath::Gemv
        } else {
            SmallStepPath::Cublas
        });
    }

    /// As [`Self::set_small_linear_max_t`], with a separate bound for int4/nvfp4 weights.
    pub fn set_gemv_max_t(&mut self, t: usize, four_bit: usize) {
        let (t, four_bit) = (t.min(32), four_bit.min(crate::params::GEMV_4BIT_LIMIT));
        if (self.opts.small_linear_max_t, self.opts.gemv_4bit_max_t) != (t, four_bit) {
            self.drop_graphs();
        }
        self.opts.small_linear_max_t = t;
        self.opts.gemv_4bit_max_t = four_bit;
    }

    /// gemv kernels launched so far (eager launches and captures, not graph replays).
    pub fn gemv_launches(&self) -> u64 {
        self.gemv_launches
    }

    /// Programmatic dependent launch on or off for steps run from now on (captured graphs
    /// are dropped and captured again).
    pub fn set_pdl(&mut self, on: bool) {
        let on = on && self.arch.0 >= 9;
        if self.opts.pdl != on {
            self.drop_graphs();
        }
        self.opts.pdl = on;
    }

    /// The attention kernel for steps run from now on; captured graphs are dropped (they
    /// hold the previous kernel) and captured again.
    pub fn set_attention(&mut self, kernel: AttentionKernel) {
        if self.opts.attention != kernel {
            self.drop_graphs();
        }
        self.opts.attention = kernel;
    }

    /// How attention_mma splits keys for steps run from now on (graphs dropped, as above).
    pub fn set_mma_splits(&mut self, splits: crate::options::MmaSplits) {
        if self.opts.mma_splits != splits {
            self.drop_graphs();
        }
        self.opts.mma_splits = splits;
    }

    /// Whether the fused q/k/v split stores K/V into the pool itself (eager steps; a
    /// captured graph keeps what it was captured with).
    pub fn set_fused_kv_store(&mut self, on: bool) {
        self.opts.fused_kv_store = on;
    }

    /// Chunk graphs for chunk buckets up to `max` tokens from now on (0: off), within what the
    /// KV pool's scratch blocks were sized for; captured graphs are kept.
    pub fn set_chunk_graph_max(&mut self, max: usize) -> Result<()> {
        if let Some(kv) = &self.kv {
            ensure!(
                max.saturating_sub(1) <= kv.scratch_tokens,
                "chunk graphs up to {max} tokens need scratch blocks for {} tokens; the pool has {}",
                max.saturating_sub(1),
                kv.scratch_tokens
            );
        }
        self.opts.chunk_graph_max = max;
        Ok(())
    }

    /// Switches how uniform steps run; captured graphs are kept for when it is `On` again.
    pub fn set_graph_mode(&mut self, mode: GraphMode) {
        self.opts.graphs = mode;
    }

    /// An f32 activation `[rows][cols]` holding `data`, for checks that drive single ops
    /// (the KV pool must be allocated: activations live in its arena).
    pub fn upload_activation(
        &mut self,
        rows: usize,
        cols: usize,
        data: &[f32],
    ) -> Result<CudaTensor> {
        ensure!(
            data.len() == rows * cols,
            "activation data has the wrong length"
        );
        self.bind()?;
        let t = self.alloc(rows, cols, DType::F32, rows);
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // SAFETY: t holds rows * cols f32.
        unsafe { crate::device::copy_htod_landed(t.ptr, data) }
            .map_err(|e| anyhow!("copying an activation to the GPU failed: {e:?}"))?;
        Ok(t)
    }

    /// Seconds the host spent queueing the last step's work, from `begin_step` to its
    /// synchronising copy back (or graph launch); against the step's wall time this tells a
    /// host-bound step from a GPU-bound one.
    pub fn last_step_enqueue_seconds(&self) -> f64 {
        self.last_enqueue_s
    }

    fn note_enqueued(&mut self) {
        if let Some(t0) = self.step_started.take() {
            self.last_enqueue_s = t0.elapsed().as_secs_f64();
        }
    }

    /// The GEMM shapes tuned so far (`WRING_CUDA_GEMM_TUNE=on`).
    pub fn gemm_tune_reports(&self) -> &[crate::blas::GemmTuneReport] {
        self.blas.tune_reports()
    }

    /// Nodes (kernel launches and memory ops) of the graph captured for `bucket` sequences
    /// of `query_len` tokens: the launches one replayed step costs.
    pub fn graph_nodes(&self, bucket: usize, query_len: usize) -> Option<usize> {
        self.graphs.nodes(GraphKey::uniform(bucket, query_len))
    }

    /// (captured graphs, replays, captures that failed).
    pub fn graph_stats(&self) -> (usize, u64, usize) {
        self.graphs.stats()
    }

    /// Bytes of weights resident on the device (quantized matrices at their packed size).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Activation arena (bytes in use, peak bytes, capacity).
    pub fn arena_usage(&self) -> Option<(usize, usize, usize)> {
        self.arena.as_ref().map(|(_, a)| a.usage())
    }

    /// The stream, for work about to be queued on it: a run of launches recorded for the
    /// persistent kernel goes first (`persistent.rs`).
    fn cu_stream(&mut self) -> sys::CUstream {
        self.persistent_flush();
        self.stream.cu_stream()
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| anyhow!("cannot make the CUDA context current: {e:?}"))
    }

    fn fail(&mut self, e: anyhow::Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// A `[rows][cols]` activation; an empty tensor (and a kept error) when the arena is full.
    fn alloc(&mut self, rows: usize, cols: usize, dtype: DType, valid_rows: usize) -> CudaTensor {
        if !self.ok() {
            return CudaTensor::empty();
        }
        let Some((_, arena)) = &self.arena else {
            self.fail(anyhow!(
                "CUDA backend: an op ran before the KV pool was allocated"
            ));
            return CudaTensor::empty();
        };
        match arena.alloc(rows * cols * dtype.size()) {
            Some(block) => CudaTensor {
                ptr: block.ptr,
                _block: Some(block),
                rows,
                cols,
                valid_rows,
                dtype,
                aux: None,
                pending: Default::default(),
            },
            None => {
                let (used, _, cap) = arena.usage();
                self.fail(anyhow!(
                    "the CUDA activation arena ({} MiB, {} MiB in use) cannot hold a {rows}x{cols} tensor; lower the step size or raise WRING_CUDA_MAX_TOKENS",
                    cap >> 20,
                    used >> 20
                ));
                CudaTensor::empty()
            }
        }
    }

    fn launch(
        &mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
        what: &str,
    ) {
        // An empty grid has nothing to compute (a step whose tokens need no logits gathers
        // zero rows for the final norm); the driver would reject it as an invalid value.
        if !self.ok() || grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return;
        }
        let stream = self.cu_stream();
        if let Err(e) = launch(f, grid, block, stream, args, self.opts.pdl) {
            self.fail(anyhow!("launching {what} failed: {e:?}"));
        }
    }

    /// Launches a kernel whose one parameter is the C struct `args` mirrors.
    fn launch_args<T: Copy>(
        &mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        args: &T,
        what: &str,
    ) {
        self.launch_args_smem(f, grid, block, 0, args, what);
    }

    /// [`Self::launch_args`] with `smem` bytes of dynamic shared memory.
    fn launch_args_smem<T: Copy>(
        &mut self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &T,
        what: &str,
    ) {
        if !self.ok() || grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return;
        }
        if block == 128 && self.persistent_record(f, grid, smem, args) {
            return;
        }
        let stream = self.cu_stream();
        if let Err(e) = launch_struct_smem(f, grid, block, smem, stream, args, self.opts.pdl) {
            self.fail(anyhow!("launching {what} failed: {e:?}"));
        }
    }

    /// Whether `t` is a live `dtype` tensor (else the step fails); an f32 tensor with a
    /// pending FP8 rescale is settled first, so every reader sees scaled values.
    fn expect(&mut self, t: &CudaTensor, dtype: DType, op: &str) -> bool {
        if !self.ok() {
            return false;
        }
        if dtype == DType::F32 {
            self.settle(t);
        }
        if t.dtype != dtype || t.ptr == 0 {
            self.fail(anyhow!(
                "CUDA backend: {op} got a {:?} tensor, expected {dtype:?}",
                t.dtype
            ));
            return false;
        }
        true
    }

    fn meta_ptr(&self, off: usize) -> u64 {
        self.meta
            .as_ref()
            .map_or(0, |m| m.device.ptr() + 4 * off as u64)
    }

    fn rope_freqs_ptr(&mut self, rope: &RopeSpec) -> Option<u64> {
        if let Some((_, buf)) = self.rope_freqs.iter().find(|(f, _)| *f == rope.inv_freq) {
            return Some(buf.ptr());
        }
        if self.graphs.capturing() {
            self.fail(anyhow!(
                "rope frequencies first seen inside a graph capture"
            ));
            return None;
        }
        match upload_f32(&rope.inv_freq, "rope frequencies") {
            Ok(buf) => {
                let p = buf.ptr();
                self.rope_freqs.push((rope.inv_freq.clone(), buf));
                Some(p)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// Grid-stride launch size for `n` elements.
    fn grid_for(n: usize) -> (u32, u32, u32) {
        (n.div_ceil(256).clamp(1, 132 * 16) as u32, 1, 1)
    }

    fn sync(&self) -> Result<()> {
        // SAFETY: the stream belongs to this backend.
        unsafe { result::stream::synchronize(self.stream.cu_stream()) }
            .map_err(|e| anyhow!("CUDA stream synchronisation failed: {e:?}"))
    }

    /// Bytes of the activation arena: what one step of `max_tokens` tokens holds at its
    /// peak. Inside a layer at most ~6 f32 values per token per unit of the widest
    /// non-vocabulary dimension are live (the residual, the normed input, a stacked
    /// gate|up and its product, or q|k|v and the attention output); the logits and the
    /// rows gathered for them take (vocab + 2 · widest) f32 per row, and any token may be a
    /// logit row. The vocabulary is never the widest dimension: a separate lm head has as
    /// many rows as the embedding (`note_dims`). A mixture-of-experts layer's op takes its
    /// scratch on top (`moe.rs`: router logits, routing, expert lists, per-pair rows).
    fn arena_bytes(&self) -> usize {
        let t = self.opts.max_tokens;
        let w = self.widest.max(1);
        t * 6 * 4 * w + t * (self.vocab.max(1) + 2 * w) * 4 + self.moe_scratch + (64 << 20)
    }

    /// Device memory a step needs besides the KV pool and the weights: the arena, the
    /// dequantisation scratch, the attention kernel's split partials for `attn`, the step
    /// metadata and ids, and room for captured graphs and the libraries' own allocations.
    fn step_memory_bytes(&self, attn: AttnShape, kv_blocks: usize) -> usize {
        let scratch = if self.scratch.is_none() {
            self.scratch_bytes
        } else {
            0
        };
        let meta =
            4 * (5 * self.opts.max_tokens + 4 * kv_blocks + (1 << 16) + self.opts.max_tokens);
        const GRAPHS_AND_LIBRARIES: usize = 768 << 20;
        self.arena_bytes() + scratch + self.mma_workspace_bytes(attn) + meta + GRAPHS_AND_LIBRARIES
    }

    /// A weight upload that failed, with what is on the device and the flags that help.
    fn weights_do_not_fit(&self, e: anyhow::Error) -> anyhow::Error {
        let total = result::mem_get_info().map_or(0, |(_, t)| t);
        e.context(format!(
            "the weights do not fit on {}: {} MiB were uploaded before this matrix, the device has {} MiB; \
 use smaller weights (--gpu-weights fp8 or int4) or split the model (--tensor-parallel-size)",
            self.name,
            self.weight_bytes >> 20,
            total >> 20
        ))
    }

    fn alloc_arena(&mut self) -> Result<()> {
        let bytes = self.arena_bytes();
        let buf = DeviceBuffer::alloc(bytes, "activations").with_context(|| {
            format!(
                "activations for steps of up to {} tokens; lower --max-num-batched-tokens",
                self.opts.max_tokens
            )
        })?;
        let arena = Arena::new(buf.ptr(), bytes);
        self.arena = Some((buf, arena));
        if self.scratch_bytes > 0 && self.scratch.is_none() {
            self.scratch = Some(DeviceBuffer::alloc(
                self.scratch_bytes,
                "the dequantisation scratch",
            )?);
        }
        Ok(())
    }

    /// Records the dimensions of an uploaded matrix (they size the activation arena).
    fn note_dims(&mut self, rows: usize, cols: usize) {
        // The tallest matrix is the vocabulary (embedding / lm head, which has as many
        // rows); others size activations.
        if rows > self.vocab {
            self.widest = self.widest.max(self.vocab);
            self.vocab = rows;
        } else if rows < self.vocab {
            self.widest = self.widest.max(rows);
        }
        self.widest = self.widest.max(cols);
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Matrix = CudaMatrix;
    type Vector = CudaVector;

    fn name(&self) -> String {
        self.name.clone()
    }

    fn supports(&self, op: ExtraOp) -> bool {
        Self::runs(&self.opts, op)
    }

    fn upload_matrix(&mut self, m: HostMatrix) -> Result<CudaMatrix> {
        ensure!(
            m.data.len() == m.rows * m.cols,
            "matrix data has {} values, expected {}x{}",
            m.data.len(),
            m.rows,
            m.cols
        );
        self.bind()?;
        // Quantisation at load: every matrix but the vocabulary-sized ones (the embedding
        // is uploaded first; a separate lm head has as many rows).
        let vocab_sized = self.vocab == 0 || m.rows >= self.vocab;
        self.note_dims(m.rows, m.cols);
        if let Some(scheme) = self.opts.weights.filter(|_| !vocab_sized) {
            let d = quantize_for_load(scheme, &m)?;
            drop(m);
            return self
                .upload_device(d)
                .map_err(|e| self.weights_do_not_fit(e));
        }
        let bits = to_bf16_bits(&m.data);
        drop(m.data);
        let buf = upload_slice(&bits, "weights").map_err(|e| self.weights_do_not_fit(e))?;
        self.weight_bytes += bits.len() * 2;
        Ok(CudaMatrix {
            w: Weights::Bf16(buf),
            rows: m.rows,
            cols: m.cols,
        })
    }

    fn upload_quantized(&mut self, m: wring_backend::quant::QuantMatrix) -> Result<CudaMatrix> {
        self.bind()?;
        let (rows, cols) = (m.rows, m.cols);
        // Kept quantized where a kernel runs the scheme (and the kernels are enabled);
        // int8, odd shapes, or kernels off: dequantised to bf16.
        if !self.opts.runs_quant_kernels() || !DeviceMatrix::supports(&m) {
            let data = m.dequantize();
            drop(m);
            let saved = self.opts.weights.take();
            let r = self.upload_matrix(HostMatrix { rows, cols, data });
            self.opts.weights = saved;
            return r;
        }
        let d = DeviceMatrix::from_quant(m).expect("supported");
        self.note_dims(rows, cols);
        self.upload_device(d)
            .map_err(|e| self.weights_do_not_fit(e))
    }

    fn upload_vector(&mut self, v: &[f32]) -> Result<CudaVector> {
        self.bind()?;
        self.weight_bytes += 4 * v.len();
        Ok(CudaVector {
            buf: upload_f32(v, "weights")?,
            len: v.len(),
        })
    }

    fn alloc_kv(&mut self, spec: KvSpec) -> Result<()> {
        self.bind()?;
        ensure!(
            matches!(spec.head_dim, 64 | 128 | 256),
            "the CUDA attention kernel supports head_dim 64, 128 or 256 (got {})",
            spec.head_dim
        );
        let scratch = self.opts.scratch_tokens().div_ceil(spec.block_size);
        let total_blocks = spec.num_blocks + scratch;
        let part_bytes = total_blocks * spec.block_size * spec.n_kv_heads * spec.head_dim * 2;
        let buf = DeviceBuffer::alloc(2 * spec.layers * part_bytes, "the KV cache")?;
        self.kv = Some(KvPool {
            buf,
            spec,
            part_bytes,
            scratch_first_block: spec.num_blocks as u32,
            scratch_tokens: scratch * spec.block_size,
        });
        // Metadata: 4 arrays of up to max_tokens, seq offsets, and block tables.
        let capacity = 5 * self.opts.max_tokens + 4 * total_blocks + (1 << 16);
        self.meta = Some(StepBuffers {
            device: DeviceBuffer::alloc(capacity * 4, "step metadata")?,
            host: PinnedBuffer::alloc(capacity)?,
            capacity,
        });
        self.ids = Some(DeviceBuffer::alloc(4 * self.opts.max_tokens, "token ids")?);
        if self.gemv_counters.is_none() {
            // One per row group (64 rows) of the tallest matrix uploaded so far.
            let words = self.vocab.max(self.widest).div_ceil(64) + 64;
            let buf = DeviceBuffer::alloc(4 * words, "gemv counters")?;
            buf.zero(4 * words)?;
            self.gemv_counters = Some(buf);
            self.gemv_counter_words = words;
        }
        self.alloc_arena()
    }

    fn kv_blocks_for_memory(&self, utilization: f32, kv: KvSpec, attn: AttnShape) -> Result<usize> {
        ensure!(
            utilization > 0.0 && utilization <= 1.0,
            "--gpu-memory-utilization must be in (0, 1]; got {utilization}"
        );
        self.bind()?;
        let (free, total) = result::mem_get_info()
            .map_err(|e| anyhow!("cannot read the GPU's free memory: {e:?}"))?;
        let mib = |b: usize| b >> 20;
        let cap = (total as f64 * utilization as f64) as usize;
        let used = total - free;
        let block_bytes = 2 * kv.layers * kv.block_size * kv.n_kv_heads * kv.head_dim * 2;
        let scratch = self.opts.scratch_tokens().div_ceil(kv.block_size);
        // The step's needs grow a little with the pool (block tables): size them for a
        // pool of everything that is left, an upper bound.
        let left = cap.saturating_sub(used);
        let step = self.step_memory_bytes(attn, left / block_bytes.max(1));
        let Some(for_kv) = left
            .checked_sub(step)
            .filter(|&b| b >= (scratch + 1) * block_bytes)
        else {
            bail!(
                "{}: {} MiB of {} MiB may be used (--gpu-memory-utilization {utilization}); the weights ({} MiB), the CUDA context and other processes already take {} MiB and a step of up to {} tokens needs {} MiB (activations, workspaces, graphs), which leaves nothing for the KV cache. Raise --gpu-memory-utilization, lower --max-num-batched-tokens, use smaller weights (--gpu-weights fp8) or split the model (--tensor-parallel-size)",
                self.name,
                mib(cap),
                mib(total),
                mib(self.weight_bytes),
                mib(used),
                self.opts.max_tokens,
                mib(step)
            );
        };
        let blocks = for_kv / block_bytes - scratch;
        tracing::info!(
            "{}: KV cache {} MiB ({blocks} blocks of {} tokens): {utilization} × {} MiB, less {} MiB in use (weights {} MiB) and {} MiB for steps of up to {} tokens",
            self.name,
            mib(blocks * block_bytes),
            kv.block_size,
            mib(total),
            mib(used),
            mib(self.weight_bytes),
            mib(step),
            self.opts.max_tokens
        );
        Ok(blocks)
    }

    fn begin_step(&mut self, step: &StepInput) -> Result<()> {
        self.step_started = Some(std::time::Instant::now());
        self.bind()?;
        self.error = None;
        self.kv_stored = None;
        self.fp8_next = None;
        let (num_blocks, block_size, scratch) = match &self.kv {
            Some(kv) => (
                kv.spec.num_blocks,
                kv.spec.block_size,
                kv.scratch_first_block,
            ),
            None => bail!("KV pool not allocated"),
        };
        step.validate(num_blocks, block_size)?;
        ensure!(
            step.tokens.len() <= self.opts.max_tokens,
            "a step of {} tokens exceeds the CUDA backend's limit of {} (WRING_CUDA_MAX_TOKENS)",
            step.tokens.len(),
            self.opts.max_tokens
        );
        let key = crate::graphs::key_for(step, &self.opts);
        let eager_extra = match key {
            Some(_) => 0,
            None => self.opts.eager_tokens(step.tokens.len()) - step.tokens.len(),
        };
        let pad = match key {
            Some(k) => Some(Padding::for_key(k, step, scratch)),
            None if eager_extra > 0 => Some(Padding::eager(step, eager_extra, scratch)),
            None => None,
        };
        if let Some(k) = key {
            ensure!(
                k.tokens() <= self.opts.max_tokens,
                "graph {k:?} exceeds WRING_CUDA_MAX_TOKENS"
            );
        }
        let meta = self.meta.as_mut().expect("allocated with the KV pool");
        let layout = stage_step(step, block_size, pad.as_ref(), meta.host.as_mut_slice())?;
        debug_assert!(layout.len <= meta.capacity);
        // SAFETY: host is pinned and not written again until this copy has completed
        // (every step ends with a synchronising copy back).
        unsafe {
            result::memcpy_htod_async(
                meta.device.ptr(),
                &meta.host.as_slice()[..layout.len],
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| anyhow!("copying step metadata to the GPU failed: {e:?}"))?;
        self.layout = layout;
        self.clear_pending_variants();
        self.path = self.resolve_step_path(self.layout.tokens, key);
        // An eager step's pad sequence is one of the step's sequences for the kernels.
        let eager_pad = (eager_extra > 0).then_some(eager_extra);
        let query_lens = || step.seqs.iter().map(|s| s.query_len).chain(eager_pad);
        // A graph's kernel grids follow its key alone: a chunk step's as if its chunk filled
        // the bucket and some sequence were a single token (both attention kernels run).
        // Its short sequences' kernel is sized by the key too (`chunk_short_query_len`).
        let short = |q: usize| if q < PREFILL_MIN_Q { q } else { 0 };
        let (max_q, short_q) = match key {
            Some(k) if k.chunk > 0 => (k.chunk, chunk_short_query_len(k.chunk, k.query_len)),
            Some(k) => (k.query_len, short(k.query_len)),
            None => (
                query_lens().max().unwrap_or(0),
                query_lens().map(short).max().unwrap_or(0),
            ),
        };
        self.max_query_len = max_q;
        self.short_query_len = short_q;
        self.key = key;
        Ok(())
    }

    fn embed(&mut self, table: &CudaMatrix) -> CudaTensor {
        self.embed_op(table)
    }

    fn rms_norm(&mut self, x: &CudaTensor, w: &CudaVector, eps: f32) -> CudaTensor {
        self.rms_norm_op(x, w, eps)
    }

    fn add_rms_norm(
        &mut self,
        x: &mut CudaTensor,
        y: &CudaTensor,
        w: &CudaVector,
        eps: f32,
    ) -> CudaTensor {
        self.add_rms_norm_op(x, y, w, eps)
    }

    fn add_assign(&mut self, x: &mut CudaTensor, y: &CudaTensor) {
        self.add_assign_op(x, y)
    }

    fn linear(&mut self, x: &CudaTensor, w: &CudaMatrix, bias: Option<&CudaVector>) -> CudaTensor {
        self.any_linear_op(x, w, bias)
    }

    fn head_rms_norm(&mut self, x: &mut CudaTensor, n_heads: usize, w: &CudaVector, eps: f32) {
        self.head_rms_norm_op(x, n_heads, w, eps)
    }

    fn prepare_moe(&mut self, layer: &MoeLayer<CudaVector, CudaMatrix>) -> Result<()> {
        self.prepare_moe_op(layer)
    }

    fn moe_ffn(&mut self, x: &CudaTensor, layer: &MoeLayer<CudaVector, CudaMatrix>) -> CudaTensor {
        self.moe_ffn_op(x, layer)
    }

    fn rope(&mut self, x: &mut CudaTensor, n_heads: usize, head_dim: usize, rope: &RopeSpec) {
        self.rope_op(x, n_heads, head_dim, rope)
    }

    fn attention(
        &mut self,
        layer: usize,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        shape: AttnShape,
    ) -> CudaTensor {
        // The attention output stays bf16 (an FP8 o projection quantises it itself).
        self.fp8_next = None;
        self.attention_op(layer, q, k, v, shape)
    }

    fn silu_mul(&mut self, gate: &CudaTensor, up: &CudaTensor) -> CudaTensor {
        self.fp8_next = None;
        self.silu_mul_op(gate, up)
    }

    fn gather_logit_rows(&mut self, x: &CudaTensor) -> CudaTensor {
        self.gather_logit_rows_op(x)
    }

    fn to_host(&mut self, x: &CudaTensor) -> Vec<f32> {
        if !self.ok() || x.ptr == 0 {
            return vec![];
        }
        self.settle(x);
        self.note_enqueued();
        match copy_to_host(self.cu_stream(), x.ptr, x.valid_rows * x.cols, x.dtype) {
            Ok(v) => v,
            Err(e) => {
                self.fail(e);
                vec![]
            }
        }
    }

    fn replay(&mut self) -> Result<Option<CudaTensor>> {
        let Some(key) = self.key.filter(|_| self.opts.graphs == GraphMode::On) else {
            return Ok(None);
        };
        let Some(out) = self.graphs.launch(key)? else {
            return Ok(None);
        };
        // A view of where the graph left the logits; the arena is otherwise empty now.
        Ok(Some(CudaTensor {
            _block: None,
            ptr: out.ptr,
            rows: self.layout.logit_rows,
            cols: out.cols,
            valid_rows: self.layout.real_logit_rows,
            dtype: DType::F32,
            aux: None,
            pending: Default::default(),
        }))
    }

    fn argmax_rows(&mut self, logits: &CudaTensor) -> Option<Vec<u32>> {
        self.argmax_launch(logits, None)
    }

    fn argmax_rows_masked(&mut self, logits: &CudaTensor, masks: &RowMasks) -> Option<Vec<u32>> {
        self.argmax_launch(logits, Some(masks))
    }

    fn begin_capture(&mut self) -> bool {
        let Some(key) = self.key.filter(|_| self.opts.graphs == GraphMode::On) else {
            return false;
        };
        if !self.ok() || !self.graphs.should_capture(key) {
            return false;
        }
        // Everything queued so far (metadata copy) must land before capture starts.
        if let Err(e) = self.sync() {
            self.fail(e);
            return false;
        }
        self.begin_variant_captures();
        match self.graphs.begin(&self.stream, key) {
            Ok(()) => {
                self.persistent_begin();
                true
            }
            Err(e) => {
                tracing::warn!(
                    "CUDA graph capture for {key:?} could not start: {e:#}; running eagerly"
                );
                self.abandon_variant_captures();
                false
            }
        }
    }

    fn end_capture(&mut self, out: &CudaTensor) -> bool {
        // The persistent kernel's programs are copied in between the end of the capture
        // and the graph's first launch (no copy may run while the stream is captured).
        let programs = self.persistent_end_recording();
        let op_error = self.error.take();
        let done = self
            .graphs
            .end(&self.stream, op_error, out.ptr, out.cols, || {
                crate::persistent::upload(programs)
            });
        match done {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "CUDA graph capture failed: {e:#}; this shape runs eagerly from now on"
                );
                self.abandon_variant_captures();
                false
            }
        }
    }

    fn capture_again(&mut self) -> bool {
        self.capture_again_op()
    }

    fn fuses_norm_into_linear(&self) -> bool {
        self.path.fused_norm
    }

    fn linear_add_residual(&mut self, x: &mut CudaTensor, input: &CudaTensor, w: &CudaMatrix) {
        self.linear_add_residual_op(x, input, w)
    }

    fn rms_norm_qkv_rope(
        &mut self,
        layer: usize,
        x: &CudaTensor,
        norm: &CudaVector,
        eps: f32,
        w: &CudaMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        self.rms_norm_qkv_rope_op(layer, x, norm, eps, w, shape, rope)
    }

    fn rms_norm_gate_up_silu(
        &mut self,
        x: &CudaTensor,
        norm: &CudaVector,
        eps: f32,
        w: &CudaMatrix,
    ) -> CudaTensor {
        self.rms_norm_gate_up_silu_op(x, norm, eps, w)
    }

    fn finish_step(&mut self) -> Result<()> {
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn fuses_projections(&self) -> bool {
        self.opts.fused
    }

    /// The query lengths uniform steps are captured for (`WRING_CUDA_GRAPH_K`), so the
    /// engine's adaptive K only picks shapes that replay a graph; none when graphs are off.
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        (self.opts.graphs == GraphMode::On).then(|| self.opts.query_lens.clone())
    }

    fn warm_up_steps(
        &self,
        query_lens: &[usize],
        max_seqs: usize,
        max_tokens: usize,
    ) -> Vec<wring_backend::WarmUpStep> {
        crate::warm_up::warm_up_steps(&self.opts, query_lens, max_seqs, max_tokens)
    }

    fn qkv_rope(
        &mut self,
        layer: usize,
        x: &CudaTensor,
        w: &CudaMatrix,
        shape: AttnShape,
        rope: &RopeSpec,
    ) -> (CudaTensor, CudaTensor, CudaTensor) {
        self.qkv_rope_op(layer, x, w, shape, rope)
    }

    fn group_ranks(&self) -> usize {
        self.group_ranks_op()
    }

    fn all_reduce_sum(&mut self, x: &mut CudaTensor) {
        self.all_reduce_op(x)
    }

    fn embed_vocab_shard(&mut self, table: &CudaMatrix, first: usize) -> CudaTensor {
        self.embed_shard_op(table, first)
    }

    fn max_rows(&mut self, logits: &CudaTensor) -> Option<Vec<(f32, u32)>> {
        self.max_rows_op(logits)
    }

    fn gate_up_silu(&mut self, x: &CudaTensor, w: &CudaMatrix) -> CudaTensor {
        self.gate_up_silu_op(x, w)
    }

    fn next_input_for(&mut self, w: &CudaMatrix) {
        self.next_input_for_op(w)
    }
}
