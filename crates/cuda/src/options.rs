//! Backend settings, read from the environment so that every caller of
//! `--device cuda` (server, benchmarks, tests) gets them without new plumbing.

use anyhow::{bail, Context, Result};

use crate::params::PREFILL_MIN_Q;

/// How uniform steps (every sequence has the same query length) are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphMode {
    /// Every step eager, never padded.
    Off,
    /// Uniform steps padded to a bucket exactly as for graphs, but run eagerly
    /// (the reference that graph replay must reproduce bit for bit).
    PadOnly,
    /// Uniform steps padded and replayed from captured CUDA graphs.
    On,
}

/// Which kernel runs attention (`WRING_CUDA_ATTENTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Tensor cores, each K/V tile loaded once per (sequence, KV head): every step shape,
    /// head_dim 64 and 128 (others fall back to `Reference`); with head_dim 64 each warp's
    /// next K/V tile loaded while it computes this one (where it measured faster), and
    /// sequences of more than 16 query tokens (prefill chunks) on `attention_flash`
    /// (kernels/attention/flash.cu: 16 query rows a warp, 64-key stages in shared memory).
    Mma,
    /// `Mma` with each warp's K/V tiles copied by cp.async into its own ring in shared
    /// memory (no tile held in registers, one barrier to merge the warps). Faster than `Mma`
    /// at batch 1 and at 32 × 13, slower at 32 × 1 (both models, graph replay;
    /// results/2026-12-02-flash-prefill), so not the default. (Its one failed check in
    /// results/2026-12-02-staged-attention was, by every sign, the upload race
    /// `copy_htod_landed` closes: the same kind of failure later showed in every kernel.)
    MmaStaged,
    /// `Mma` with prefill chunks on the decode/verify kernel too (head_dim 64 prefill
    /// before attention_flash), kept to measure against.
    MmaOnly,
    /// Prefill chunks on the decode/verify kernel too, each tile's K/V loads waited for
    /// before its math (the default before results/2026-12-01-prefill-attention), kept to measure against.
    MmaSerial,
    /// One block per (token, head) with the keys split over 4 blocks plus a combine
    /// kernel for decode/verify steps: the default before `Mma`, kept to measure against.
    Split,
    /// One block per (token, head), unsplit: any head_dim; the reference for checks.
    Reference,
}

/// The default of `WRING_CUDA_SMALL_LINEAR_MAX_T`: bf16/fp8 steps of up to 8 tokens may take
/// the gemv kernels; whether they do is [`SmallStepPath`]'s call.
pub const DEFAULT_SMALL_LINEAR_MAX_T: usize = 8;

/// How bf16/fp8 (dense) linears of steps of at most `small_linear_max_t` tokens run
/// (`WRING_CUDA_SMALL_STEP_PATH`). The gemv path is faster than cuBLAS for the 135M model at
/// batch 1 and slower at batch 8 and for the 8B model (results/2026-12-01-gemv). Default cuBLAS: `auto`
/// may keep gemv for a key whose first (eager) step ran on cuBLAS, so that step's bits
/// differ from its replays (`gpu_check graphs`: batch 1 × q 1 and q 2 DIFFERENT, results/2026-12-01-fused-norm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallStepPath {
    /// Each captured graph key of at most 8 tokens is captured on both paths, each replayed
    /// and timed, and the faster kept for good (`backend/small_step.rs`); steps that replay
    /// no graph take cuBLAS unless their key already chose gemv.
    Auto,
    /// Always the gemv kernels (with the norm fused when `fused_norm`).
    Gemv,
    /// Always cuBLAS (the default).
    Cublas,
}

/// Whether captured small steps on the gemv path with the fused norm take the persistent
/// step kernel (`WRING_CUDA_PERSISTENT`). Its steps need the gemv path
/// (`WRING_CUDA_SMALL_STEP_PATH` gemv or auto) and `WRING_CUDA_FUSED_NORM=on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistentMode {
    Off,
    /// Every qualifying captured step.
    On,
    /// Each qualifying graph key is captured with and without it (beside cuBLAS under
    /// `SmallStepPath::Auto`), each graph replayed and timed, and the fastest kept
    /// (`backend/small_step.rs`).
    Auto,
}

/// The default of `WRING_CUDA_GEMV_4BIT_MAX_T`: int4 and nvfp4 weights take the gemv kernels
/// for steps of up to 8 tokens (H200, dummy Llama-3.1-8B decode: 1.37× and 1.81× faster than
/// the tensor-core dequantising kernel at batch 1; results/2026-12-01-gemv), and steps of 9 to 64 may take the multi-tile builds ([`MultiGemvPath`]).
pub const DEFAULT_GEMV_4BIT_MAX_T: usize = 64;

/// How int4/nvfp4 linears of steps of 9 to `gemv_4bit_max_t` (at most 64) tokens run
/// (`WRING_CUDA_GEMV_4BIT_PATH`): the multi-tile gemv (kernels/gemv_multi.cu) or the
/// dequantising tensor-core kernel (quant_gemm.cu) they took before. Not yet measured on a
/// GPU. Default `Gemv` (eager steps and replays on the same kernels); `Auto` times each
/// captured shape both ways but its first (eager) step may have run the other path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiGemvPath {
    /// Each captured graph key of 9 to 64 tokens of a 4-bit model is captured on both paths,
    /// timed, and the faster kept (`backend/small_step.rs`); steps that replay no graph take
    /// the tensor-core kernel unless their key already chose the gemv.
    Auto,
    /// Always the multi-tile gemv (the default: 1.3–1.9× faster whole 8B steps at 16–32
    /// tokens than the tensor-core kernel, results/2026-12-01-gemv-multi).
    Gemv,
    /// Always the tensor-core kernel.
    TensorCore,
}

#[derive(Debug, Clone)]
pub struct CudaOptions {
    pub graphs: GraphMode,
    /// Batch sizes graphs are captured for, ascending; a batch is padded up to the next.
    pub buckets: Vec<usize>,
    /// Query lengths per sequence that count as uniform: 1 (decode) and 1+K (verify).
    pub query_lens: Vec<usize>,
    /// Most tokens one step may carry (sizes the activation arena).
    pub max_tokens: usize,
    /// `max_tokens` came from `WRING_CUDA_MAX_TOKENS` (the engine's step cap then leaves it).
    pub max_tokens_from_env: bool,
    /// The attention kernel (`WRING_CUDA_ATTENTION` = mma | mma-staged | mma-only | mma-serial | split | reference).
    pub attention: AttentionKernel,
    /// Steps of at most this many tokens (capped at 8, the largest gemv token bucket) run
    /// every linear, bf16 or quantized, through the weight-streaming kernels of
    /// kernels/gemv.cu (RoPE + K/V store and SiLU·mul in the GEMV's launch) instead of
    /// cuBLAS and the quantized GEMMs (`WRING_CUDA_SMALL_LINEAR_MAX_T`, 0 = off; default
    /// [`DEFAULT_SMALL_LINEAR_MAX_T`]).
    pub small_linear_max_t: usize,
    /// The same for int4 and nvfp4 weights (`WRING_CUDA_GEMV_4BIT_MAX_T`; default
    /// [`DEFAULT_GEMV_4BIT_MAX_T`]); `WRING_CUDA_SMALL_LINEAR_MAX_T` sets both.
    pub gemv_4bit_max_t: usize,
    /// Which path 4-bit linears of 9 to `gemv_4bit_max_t` tokens take
    /// (`WRING_CUDA_GEMV_4BIT_PATH` = auto | gemv | tensor-core; default gemv).
    pub multi_gemv: MultiGemvPath,
    /// Which path dense linears of small steps take (`WRING_CUDA_SMALL_STEP_PATH` = auto |
    /// gemv | cublas; default cublas). Setting `WRING_CUDA_SMALL_LINEAR_MAX_T` alone forces
    /// gemv (0: cublas), what it meant before `auto`.
    pub small_step_path: SmallStepPath,
    /// On the gemv path, the RMSNorm runs in the prologue of the q|k|v and gate|up gemv and
    /// the residual add in the epilogue of the o and down gemv (`Backend::fuses_norm_into_linear`:
    /// 5 launches a layer instead of 7; `WRING_CUDA_FUSED_NORM` = on | off, default off). Never
    /// on a tensor-parallel rank. Off by default because it measured no faster anywhere on the
    /// H200 (135M batch 1: 1.009 vs 0.989 ms; batch 8: 1.726 vs 1.382; dummy 8B int4 at 8
    /// tokens 9.83 vs 6.08 ms — every block re-reads the residual rows; results/2026-12-01-gemv-multi).
    pub fused_norm: bool,
    /// The same fusion on 4-bit steps of 9 to 64 tokens (the multi-tile gemv;
    /// `WRING_CUDA_MULTI_FUSED_NORM` = on | off, default off): every block of the prologue
    /// computes the RMS of every token row over all of K, which at 16 to 64 tokens reads
    /// several times the weight bytes from L2, so by default those steps run the norm and
    /// the residual add as their own kernels (kept to measure: not yet run on a GPU).
    pub multi_fused_norm: bool,
    /// Launch wring's kernels with programmatic dependent launch (sm_90+): each may start
    /// while the previous kernel drains (`WRING_CUDA_PDL` = on | off).
    pub pdl: bool,
    /// Whether captured steps of at most 8 tokens on the bf16 gemv path with the fused norm
    /// run their layers as one launch of the persistent step kernel (kernels/persistent.cu,
    /// backend/persistent.rs; `WRING_CUDA_PERSISTENT` = off | on | auto, default off until
    /// measured on a GPU).
    pub persistent: PersistentMode,
    /// q|k|v and gate|up weights concatenated at upload: one GEMM each, RoPE fused into
    /// the q/k/v split and SiLU·mul reading the gate|up halves (`WRING_CUDA_FUSED`; on by
    /// default: 135M decode 1.67 → 1.37 ms, 8B 7.34 → 6.70 ms, results/2026-11-30-cuda-h200/runs/run6).
    pub fused: bool,
    /// With `fused`: the q/k/v split writes K and V straight into the layer's KV pool
    /// slots (bf16, the values `kv_store` would write), one launch less per layer
    /// (`WRING_CUDA_FUSED_KV_STORE` = on | off).
    pub fused_kv_store: bool,
    /// Quantise dense weights at load (`WRING_CUDA_WEIGHTS` = bf16 | fp8 | int4 | nvfp4;
    /// round-to-nearest; the embedding and a vocabulary-sized lm head stay bf16). None: bf16.
    pub weights: Option<wring_backend::quant::Scheme>,
    /// Largest step (tokens) that runs int4/nvfp4 weights through the small-T tensor-core
    /// kernel; larger steps dequantise to a bf16 tile and use cuBLAS
    /// (`WRING_CUDA_QGEMM_MAX_T`, 0..=32, default 32).
    pub qgemm_max_t: usize,
    /// Run a quantized checkpoint's weights through the quantized kernels (fp8 cuBLASLt,
    /// int4/nvfp4 dequantising GEMM) instead of dequantising them to bf16 at upload
    /// (`WRING_CUDA_QUANT_KERNELS` = on; implied by `weights`: [`Self::runs_quant_kernels`]). The kernels
    /// match a host reference on the H200 (`gpu_check qgemm`, results/2026-11-30-cuda-h200, run 9) but are
    /// slower than bf16 there, so a checkpoint runs dequantised to bf16 unless asked.
    pub quant_kernels: bool,
    /// FP8 W8A8 without passes of its own (`WRING_CUDA_FP8_FUSED` = on | off, default on):
    /// the RMSNorm and SiLU·mul before an FP8 GEMM write E4M3 codes + per-token scales,
    /// and the kernel after it (q/k/v split, SiLU·mul, add + RMSNorm) applies the per-token
    /// × per-channel rescale. Off: a quantise and a rescale launch around every FP8 GEMM,
    /// the same bits (kept as the reference `gpu_check fp8-fused` compares against).
    pub fp8_fused: bool,
    /// Time cuBLAS against cuBLASLt candidates per GEMM shape at its first eager use and
    /// keep the fastest (`blas.rs`).
    pub gemm_tune: bool,
    /// Every bf16 GEMM on cuBLASLt's first heuristic algorithm, planned once per shape
    /// (`WRING_CUDA_GEMM_LT` = off | on): less host time per GEMM than cublasGemmEx.
    pub gemm_lt: bool,
    /// How `attention_mma` splits keys (`WRING_CUDA_MMA_SPLITS`).
    pub mma_splits: MmaSplits,
    /// Steps that replay no graph (those with prompt tokens) are padded to a token bucket
    /// ([`eager_token_bucket`]) by one extra sequence writing to scratch blocks
    /// (`WRING_CUDA_EAGER_PAD` = on | off). Why: the first step of each new token count
    /// cost 2–13 ms more than its repeats on the H200 (cuBLAS's per-shape first use; not
    /// module loading), and serving makes a new count with nearly every prompt.
    pub eager_pad: bool,
    /// Steps of decode/verify rows plus one prompt chunk replay graphs too, keyed by the
    /// decode bucket, the rows' query length and the chunk's token bucket
    /// ([`chunk_token_bucket`]: its length and a pad of at least 17 tokens), for chunk
    /// buckets up to this many tokens (`WRING_CUDA_CHUNK_GRAPHS` = off | tokens, default
    /// off). Why they exist: such steps run eagerly, and a 135M step's ~275 launches make
    /// them host-bound; a chunk graph step ran 1.02–2.03× faster than the eager one (135M, H200).
    /// Why off: through the server (c=32, 128 prompts a corpus) bestKpad measured 0.93–1.00×
    /// of off in four runs (c=1 K=4: 0.98–1.02×) — likely the captures of a short run's many
    /// keys, each paid back only after ~6 replays (results/2026-12-04-chunk-graphs); on the 8B
    /// graphs of chunks over 256 tokens lost to the eager step (pad and grid of the bucket).
    pub chunk_graph_max: usize,
    /// Run mixture-of-experts layers (Qwen3-MoE, Mixtral; `backend/moe.rs`) instead of
    /// refusing those models (`WRING_CUDA_MOE` = off | on, default off). Off until the op has
    /// been compared with the CPU on a GPU (`scripts/gpu/check.sh cpu-moe`): it was written
    /// on a machine without one.
    pub moe: bool,
}

/// Steps of more than this many tokens that replay no graph are padded to a bucket.
pub const EAGER_PAD_MIN_TOKENS: usize = 8;
/// The most tokens [`eager_token_bucket`] ever adds (its widest step, less one).
pub const EAGER_PAD_MAX_EXTRA: usize = 127;

/// The token count an eager step of `tokens` tokens is padded to: multiples of 32 up to
/// 512, of 64 up to 2048, of 128 beyond (GEMMs of a few hundred rows are weight-bound, so
/// the padding is nearly free where it is widest relative to the step). Steps of at most
/// [`EAGER_PAD_MIN_TOKENS`] tokens stay as they are (the gemv path takes them).
pub fn eager_token_bucket(tokens: usize) -> usize {
    let step = match tokens {
        0..=EAGER_PAD_MIN_TOKENS => return tokens,
        9..=512 => 32,
        513..=2048 => 64,
        _ => 128,
    };
    tokens.div_ceil(step) * step
}

/// The token bucket of a prompt chunk in a chunk graph: the chunk and one pad sequence of
/// at least [`PREFILL_MIN_Q`] tokens (so the pad always runs on the prefill attention
/// kernel and the decode/verify rows' kernel is sized for them alone), rounded as
/// [`eager_token_bucket`] rounds (multiples of 32 to 512, of 64 to 2048, of 128 beyond).
pub fn chunk_token_bucket(chunk_tokens: usize) -> usize {
    let t = chunk_tokens + PREFILL_MIN_Q;
    t.div_ceil(bucket_step(t)) * bucket_step(t)
}

fn bucket_step(tokens: usize) -> usize {
    match tokens {
        0..=512 => 32,
        513..=2048 => 64,
        _ => 128,
    }
}

/// The longest query of a sequence below [`PREFILL_MIN_Q`] tokens in a chunk graph of chunk
/// bucket `bucket` whose rows have `rows_q` tokens: the rows' own length when every chunk of
/// this bucket is long enough for the prefill kernel, else [`PREFILL_MIN_Q`] − 1 (a short
/// chunk runs beside the rows on their kernel). 0: no such sequence.
pub fn chunk_short_query_len(bucket: usize, rows_q: usize) -> usize {
    let below = bucket.saturating_sub(bucket_step(bucket));
    let shortest_chunk = (below + 1).saturating_sub(PREFILL_MIN_Q);
    if shortest_chunk >= PREFILL_MIN_Q {
        rows_q
    } else {
        PREFILL_MIN_Q - 1
    }
}

/// How `attention_mma` splits a sequence's keys over blocks (`WRING_CUDA_MMA_SPLITS` =
/// `per_q=512,prefill=0,grid=fill,prefill_nt=6`, any subset). Where splits fall depends
/// only on a sequence's own query length and context; `grid` and `prefill_nt` decide which
/// block computes what, never the arithmetic of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaSplits {
    /// Keys per split of a decode/verify sequence, per query token (512: decode steps at
    /// batch 1–32 and contexts 256–1024 faster than with 128, verify steps the same;
    /// results/2026-12-02-staged-attention).
    pub per_q: usize,
    /// Keys per split of a prefill chunk that runs on `attention_mma` (0: unsplit).
    pub prefill: usize,
    /// Blocks per split: `Fill` runs several splits one after another in a block once the
    /// step has blocks enough to fill the GPU twice; `All` gives every split its own block.
    pub grid: SplitGrid,
    /// Most row tiles (8 rows each) per block in steps with prefill chunks.
    pub prefill_nt: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitGrid {
    Fill,
    All,
}

impl Default for MmaSplits {
    fn default() -> Self {
        Self {
            per_q: 512,
            prefill: 0,
            grid: SplitGrid::Fill,
            prefill_nt: 6,
        }
    }
}

impl MmaSplits {
    pub fn parse(v: &str) -> Result<Self> {
        let mut m = Self::default();
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, val) = item
                .split_once('=')
                .with_context(|| format!("WRING_CUDA_MMA_SPLITS: {item:?} is not key=value"))?;
            let num = || {
                val.parse::<usize>().with_context(|| {
                    format!("WRING_CUDA_MMA_SPLITS: {key}={val:?} is not a number")
                })
            };
            match key {
                "per_q" => m.per_q = num()?.max(16),
                "prefill" => m.prefill = num()?,
                "prefill_nt" => m.prefill_nt = num()?.max(1),
                "grid" => {
                    m.grid = match val {
                        "fill" => SplitGrid::Fill,
                        "all" => SplitGrid::All,
                        other => bail!("WRING_CUDA_MMA_SPLITS: grid={other:?}: expected fill or all"),
                    }
                }
                other => bail!(
                    "WRING_CUDA_MMA_SPLITS: unknown key {other:?} (per_q, prefill, grid, prefill_nt)"
                ),
            }
        }
        Ok(m)
    }
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            graphs: GraphMode::On,
            buckets: vec![1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128],
            // 1 + K for every K the engine's adaptive policy may pick (its CAPTURED_KS:
            // 0, 1, 4, 6, 8, 12); a K outside this set runs its step eagerly.
            query_lens: vec![1, 2, 5, 7, 9, 13],
            max_tokens: 8192,
            max_tokens_from_env: false,
            attention: AttentionKernel::Mma,
            pdl: true,
            persistent: PersistentMode::Off,
            small_linear_max_t: DEFAULT_SMALL_LINEAR_MAX_T,
            gemv_4bit_max_t: DEFAULT_GEMV_4BIT_MAX_T,
            multi_gemv: MultiGemvPath::Gemv,
            small_step_path: SmallStepPath::Cublas,
            fused_norm: false,
            multi_fused_norm: false,
            fused: true,
            fused_kv_store: true,
            weights: None,
            qgemm_max_t: 32,
            quant_kernels: false,
            fp8_fused: true,
            gemm_tune: false,
            gemm_lt: false,
            mma_splits: MmaSplits::default(),
            eager_pad: true,
            chunk_graph_max: 0,
            moe: false,
        }
    }
}

fn list(name: &str, v: &str) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = v
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("{name}={v:?}: expected comma-separated integers"))?;
    out.sort_unstable();
    out.dedup();
    if out.contains(&0) {
        bail!("{name}={v:?}: zero is not allowed");
    }
    Ok(out)
}

/// An on/off setting: on | 1 | true, off | 0 | false.
fn switch(name: &str, v: &str) -> Result<bool> {
    match v.trim() {
        "on" | "1" | "true" => Ok(true),
        "off" | "0" | "false" => Ok(false),
        other => bail!("{name}={other:?}: expected on or off"),
    }
}

/// off | on | auto.
fn parse_persistent(v: &str) -> Result<PersistentMode> {
    Ok(match v.trim() {
        "auto" => PersistentMode::Auto,
        other => match switch("WRING_CUDA_PERSISTENT", other) {
            Ok(true) => PersistentMode::On,
            Ok(false) => PersistentMode::Off,
            Err(_) => bail!("WRING_CUDA_PERSISTENT={other:?}: expected off, on or auto"),
        },
    })
}

/// auto | gemv | cublas.
fn parse_small_step_path(v: &str) -> Result<SmallStepPath> {
    Ok(match v.trim() {
        "auto" => SmallStepPath::Auto,
        "gemv" => SmallStepPath::Gemv,
        "cublas" => SmallStepPath::Cublas,
        other => bail!("WRING_CUDA_SMALL_STEP_PATH={other:?}: expected auto, gemv or cublas"),
    })
}

/// auto | gemv | tensor-core.
fn parse_multi_gemv_path(v: &str) -> Result<MultiGemvPath> {
    Ok(match v.trim() {
        "auto" => MultiGemvPath::Auto,
        "gemv" => MultiGemvPath::Gemv,
        "tensor-core" => MultiGemvPath::TensorCore,
        other => {
            bail!("WRING_CUDA_GEMV_4BIT_PATH={other:?}: expected auto, gemv or tensor-core")
        }
    })
}

impl CudaOptions {
    /// `WRING_CUDA_GRAPHS` = on | off | pad-only, `WRING_CUDA_GRAPH_BUCKETS` = 1,2,4,...,
    /// `WRING_CUDA_GRAPH_K` = 1,4,6,8,12 (verify lengths 1+K; decode is always included),
    /// `WRING_CUDA_MAX_TOKENS` = 8192, `WRING_CUDA_ATTENTION` = mma | mma-staged | mma-only | mma-serial | split | reference, `WRING_CUDA_PDL` = on | off, `WRING_CUDA_SMALL_LINEAR_MAX_T` = 0..=32,
    /// `WRING_CUDA_SMALL_STEP_PATH` = auto | gemv | cublas, `WRING_CUDA_FUSED_NORM` = on | off,
    /// `WRING_CUDA_GEMV_4BIT_MAX_T` = 0..=64, `WRING_CUDA_GEMV_4BIT_PATH` = auto | gemv | tensor-core,
    /// `WRING_CUDA_MULTI_FUSED_NORM` = off | on,
    /// `WRING_CUDA_FUSED` = on | off, `WRING_CUDA_FUSED_KV_STORE` = on | off, `WRING_CUDA_WEIGHTS` = bf16 | fp8 | int4 | nvfp4, `WRING_CUDA_QUANT_KERNELS` = off | on,
    /// `WRING_CUDA_QGEMM_MAX_T` = 0..=32, `WRING_CUDA_FP8_FUSED` = on | off, `WRING_CUDA_GEMM_TUNE` = off | on,
    /// `WRING_CUDA_MMA_SPLITS` = per_q=512,prefill=0,grid=fill,prefill_nt=6 ([`MmaSplits`]),
    /// `WRING_CUDA_EAGER_PAD` = on | off, `WRING_CUDA_GEMM_LT` = off | on,
    /// `WRING_CUDA_CHUNK_GRAPHS` = off | tokens (default off), `WRING_CUDA_MOE` = off | on,
    /// `WRING_CUDA_PERSISTENT` = off | on | auto.
    pub fn from_env() -> Result<Self> {
        let mut o = Self::default();
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        if let Some(v) = var("WRING_CUDA_GRAPHS") {
            o.graphs = match v.trim() {
                "on" | "1" | "true" => GraphMode::On,
                "off" | "0" | "false" => GraphMode::Off,
                "pad-only" => GraphMode::PadOnly,
                other => bail!("WRING_CUDA_GRAPHS={other:?}: expected on, off or pad-only"),
            };
        }
        if let Some(v) = var("WRING_CUDA_GRAPH_BUCKETS") {
            o.buckets = list("WRING_CUDA_GRAPH_BUCKETS", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_GRAPH_K") {
            let ks = list("WRING_CUDA_GRAPH_K", &v)?;
            o.query_lens = std::iter::once(1).chain(ks.iter().map(|k| k + 1)).collect();
        }
        if let Some(v) = var("WRING_CUDA_ATTENTION") {
            o.attention = match v.trim() {
                "mma" => AttentionKernel::Mma,
                "mma-only" => AttentionKernel::MmaOnly,
                "mma-serial" => AttentionKernel::MmaSerial,
                "mma-staged" => AttentionKernel::MmaStaged,
                "split" => AttentionKernel::Split,
                "reference" => AttentionKernel::Reference,
                other => {
                    bail!("WRING_CUDA_ATTENTION={other:?}: expected mma, mma-staged, mma-only, mma-serial, split or reference")
                }
            };
        }
        if let Some(v) = var("WRING_CUDA_SMALL_LINEAR_MAX_T") {
            o.small_linear_max_t = v
                .trim()
                .parse()
                .ok()
                .filter(|&t: &usize| t <= 32)
                .with_context(|| {
                    format!("WRING_CUDA_SMALL_LINEAR_MAX_T={v:?}: expected an integer from 0 to 32")
                })?;
            o.gemv_4bit_max_t = o.small_linear_max_t;
            // What the setting meant before `auto`: gemv up to N tokens, or cuBLAS.
            o.small_step_path = if o.small_linear_max_t > 0 {
                SmallStepPath::Gemv
            } else {
                SmallStepPath::Cublas
            };
        }
        if let Some(v) = var("WRING_CUDA_SMALL_STEP_PATH") {
            o.small_step_path = parse_small_step_path(&v)?;
        }
        if let Some(v) = var("WRING_CUDA_FUSED_NORM") {
            o.fused_norm = switch("WRING_CUDA_FUSED_NORM", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_MULTI_FUSED_NORM") {
            o.multi_fused_norm = switch("WRING_CUDA_MULTI_FUSED_NORM", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_GEMV_4BIT_MAX_T") {
            o.gemv_4bit_max_t = v
                .trim()
                .parse()
                .ok()
                .filter(|&t: &usize| t <= 64)
                .with_context(|| {
                    format!("WRING_CUDA_GEMV_4BIT_MAX_T={v:?}: expected an integer from 0 to 64")
                })?;
        }
        if let Some(v) = var("WRING_CUDA_GEMV_4BIT_PATH") {
            o.multi_gemv = parse_multi_gemv_path(&v)?;
        }
        if let Some(v) = var("WRING_CUDA_PDL") {
            o.pdl = switch("WRING_CUDA_PDL", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_PERSISTENT") {
            o.persistent = parse_persistent(&v)?;
        }
        if let Some(v) = var("WRING_CUDA_FUSED") {
            o.fused = switch("WRING_CUDA_FUSED", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_FUSED_KV_STORE") {
            o.fused_kv_store = switch("WRING_CUDA_FUSED_KV_STORE", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_MAX_TOKENS") {
            o.max_tokens = v
                .trim()
                .parse()
                .with_context(|| format!("WRING_CUDA_MAX_TOKENS={v:?}: expected an integer"))?;
            o.max_tokens_from_env = true;
        }
        if let Some(v) = var("WRING_CUDA_WEIGHTS") {
            o.weights = crate::qweights::parse_weights(&v)?;
        }
        if let Some(v) = var("WRING_CUDA_QGEMM_MAX_T") {
            o.qgemm_max_t = v
                .trim()
                .parse()
                .ok()
                .filter(|&t: &usize| t <= 32)
                .with_context(|| {
                    format!("WRING_CUDA_QGEMM_MAX_T={v:?}: expected an integer from 0 to 32")
                })?;
        }
        if let Some(v) = var("WRING_CUDA_MMA_SPLITS") {
            o.mma_splits = MmaSplits::parse(&v)?;
        }
        if let Some(v) = var("WRING_CUDA_GEMM_TUNE") {
            o.gemm_tune = switch("WRING_CUDA_GEMM_TUNE", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_GEMM_LT") {
            o.gemm_lt = switch("WRING_CUDA_GEMM_LT", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_EAGER_PAD") {
            o.eager_pad = switch("WRING_CUDA_EAGER_PAD", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_CHUNK_GRAPHS") {
            o.chunk_graph_max = match v.trim() {
                "off" | "0" | "false" => 0,
                n => n.parse().with_context(|| {
                    format!("WRING_CUDA_CHUNK_GRAPHS={v:?}: expected off or a token count")
                })?,
            };
        }
        if let Some(v) = var("WRING_CUDA_FP8_FUSED") {
            o.fp8_fused = switch("WRING_CUDA_FP8_FUSED", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_QUANT_KERNELS") {
            o.quant_kernels = switch("WRING_CUDA_QUANT_KERNELS", &v)?;
        }
        if let Some(v) = var("WRING_CUDA_MOE") {
            o.moe = switch("WRING_CUDA_MOE", &v)?;
        }
        if *o.query_lens.iter().max().unwrap_or(&1) > 64 {
            bail!("WRING_CUDA_GRAPH_K: draft lengths above 63 are not supported");
        }
        Ok(o)
    }

    /// Dense weights quantised at load to `weights` (None: bf16), whatever
    /// `WRING_CUDA_WEIGHTS` said: the caller's choice (`wring serve --gpu-weights`).
    pub fn with_weights(mut self, weights: Option<wring_backend::quant::Scheme>) -> Self {
        self.weights = weights;
        self
    }

    /// Whether quantized weights run through the quantized kernels: asked for, or implied
    /// by weights quantised at load (which only make sense with the kernels that run them).
    pub fn runs_quant_kernels(&self) -> bool {
        self.quant_kernels || self.weights.is_some()
    }

    /// Steps carry at most `cap` tokens (the engine's `--max-num-batched-tokens`), so the
    /// activations are sized for that rather than the default 8,192, unless
    /// `WRING_CUDA_MAX_TOKENS` says otherwise.
    pub fn with_step_token_cap(mut self, cap: usize) -> Self {
        if !self.max_tokens_from_env && cap > 0 {
            self.max_tokens = cap;
        }
        self
    }

    /// The captured batch size a uniform batch of `seqs` sequences is padded to.
    pub fn bucket_for(&self, seqs: usize) -> Option<usize> {
        self.buckets.iter().copied().find(|&b| b >= seqs)
    }

    pub fn max_query_len(&self) -> usize {
        self.query_lens.iter().copied().max().unwrap_or(1)
    }

    /// Tokens the KV pool's scratch blocks must hold: a graph's padded sequence, or the
    /// extra sequence of an eager step padded to its token bucket.
    pub fn scratch_tokens(&self) -> usize {
        let eager = if self.eager_pad {
            EAGER_PAD_MAX_EXTRA
        } else {
            0
        };
        // A chunk graph's pad sequence holds at most its bucket less one token.
        let chunk_pad = self.chunk_graph_max.saturating_sub(1);
        self.max_query_len().max(eager).max(chunk_pad)
    }

    /// The token count a step of `tokens` tokens that replays no graph runs with.
    pub fn eager_tokens(&self, tokens: usize) -> usize {
        if !self.eager_pad {
            return tokens;
        }
        eager_token_bucket(tokens).min(self.max_tokens).max(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_buckets_round_up_within_the_scratch_and_the_token_limit() {
        assert_eq!(
            eager_token_bucket(8),
            8,
            "gemv-sized steps stay as they are"
        );
        assert_eq!(eager_token_bucket(9), 32);
        assert_eq!(eager_token_bucket(97), 128);
        assert_eq!(eager_token_bucket(512), 512);
        assert_eq!(eager_token_bucket(513), 576);
        assert_eq!(eager_token_bucket(2049), 2176);
        for t in 1..5000 {
            let b = eager_token_bucket(t);
            assert!(b >= t && b - t <= EAGER_PAD_MAX_EXTRA, "{t} -> {b}");
        }
        let mut o = CudaOptions {
            max_tokens: 100,
            chunk_graph_max: 1024,
            ..CudaOptions::default()
        };
        assert_eq!(o.eager_tokens(97), 100, "never past the token limit");
        assert!(o.scratch_tokens() >= EAGER_PAD_MAX_EXTRA);
        assert_eq!(
            o.scratch_tokens(),
            o.chunk_graph_max - 1,
            "a chunk graph's widest pad"
        );
        let widest_chunk = o.chunk_graph_max - PREFILL_MIN_Q;
        assert_eq!(chunk_token_bucket(widest_chunk), o.chunk_graph_max);
        o.eager_pad = false;
        o.chunk_graph_max = 0;
        assert_eq!(o.eager_tokens(97), 97);
        assert_eq!(o.scratch_tokens(), o.max_query_len());
    }

    #[test]
    fn a_chunk_bucket_keeps_its_pad_on_the_prefill_kernel_and_knows_its_short_rows() {
        for c in 0..3000 {
            let b = chunk_token_bucket(c);
            let pad = b - c;
            assert!(pad >= PREFILL_MIN_Q, "chunk {c}: pad {pad}");
            // A bucket holding some chunk shorter than PREFILL_MIN_Q makes the rows' kernel
            // cover 16 tokens; otherwise it is sized for the rows' own length.
            let shortest = (0..=c).find(|&d| chunk_token_bucket(d) == b).unwrap();
            let expect = if shortest < PREFILL_MIN_Q {
                PREFILL_MIN_Q - 1
            } else {
                5
            };
            assert_eq!(
                chunk_short_query_len(b, 5),
                expect,
                "chunk {c} in bucket {b}"
            );
        }
        assert_eq!(chunk_token_bucket(55), 96);
        assert_eq!(chunk_short_query_len(96, 1), 1);
        assert_eq!(
            chunk_short_query_len(64, 1),
            PREFILL_MIN_Q - 1,
            "chunk 16 is in it"
        );
        assert_eq!(chunk_short_query_len(32, 0), PREFILL_MIN_Q - 1);
        assert_eq!(
            chunk_short_query_len(576, 0),
            0,
            "no rows: every sequence on flash"
        );
    }

    #[test]
    fn buckets_round_up_and_lists_parse() {
        let o = CudaOptions::default();
        assert_eq!(o.bucket_for(1), Some(1));
        assert_eq!(o.bucket_for(3), Some(4));
        assert_eq!(o.bucket_for(33), Some(48));
        assert_eq!(o.bucket_for(129), None);
        assert_eq!(list("X", "8, 4,4").unwrap(), vec![4, 8]);
        assert!(list("X", "4,a").is_err());
        assert!(list("X", "0").is_err());
    }

    #[test]
    fn small_step_paths_parse() {
        assert_eq!(parse_small_step_path("auto").unwrap(), SmallStepPath::Auto);
        assert_eq!(parse_small_step_path(" gemv").unwrap(), SmallStepPath::Gemv);
        assert_eq!(
            parse_small_step_path("cublas").unwrap(),
            SmallStepPath::Cublas
        );
        assert!(parse_small_step_path("fast").is_err());
        assert_eq!(
            parse_multi_gemv_path("tensor-core").unwrap(),
            MultiGemvPath::TensorCore
        );
        assert_eq!(parse_multi_gemv_path("gemv").unwrap(), MultiGemvPath::Gemv);
        assert!(parse_multi_gemv_path("cublas").is_err());
        let o = CudaOptions::default();
        assert_eq!(o.small_step_path, SmallStepPath::Cublas);
        assert_eq!(o.multi_gemv, MultiGemvPath::Gemv);
        assert!(!o.fused_norm);
    }

    #[test]
    fn persistent_modes_parse() {
        assert_eq!(parse_persistent("auto").unwrap(), PersistentMode::Auto);
        assert_eq!(parse_persistent("on").unwrap(), PersistentMode::On);
        assert_eq!(parse_persistent("0").unwrap(), PersistentMode::Off);
        let e = parse_persistent("yes").unwrap_err().to_string();
        assert_eq!(e, "WRING_CUDA_PERSISTENT=\"yes\": expected off, on or auto");
    }

    #[test]
    fn switches_reject_typos() {
        assert!(switch("X", "of").is_err());
        assert!(switch("X", "yes").is_err());
        assert!(switch("X", "on").unwrap());
        assert!(!switch("X", "0").unwrap());
    }

    #[test]
    fn mma_splits_parse_any_subset_and_reject_typos() {
        assert_eq!(MmaSplits::parse("").unwrap(), MmaSplits::default());
        let m = MmaSplits::parse("prefill=512, grid=all").unwrap();
        assert_eq!(m.prefill, 512);
        assert_eq!(m.grid, SplitGrid::All);
        assert_eq!(m.per_q, 512);
        assert_eq!(MmaSplits::parse("per_q=4").unwrap().per_q, 16);
        assert!(MmaSplits::parse("grid=some").is_err());
        assert!(MmaSplits::parse("perq=128").is_err());
        assert!(MmaSplits::parse("prefill").is_err());
        assert!(MmaSplits::parse("prefill_nt=x").is_err());
    }
}
