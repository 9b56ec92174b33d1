//! bf16 GEMMs through cuBLAS with a fixed workspace (so nothing allocates inside a
//! captured graph), f32 accumulation and f32 output.
//!
//! Optional per-shape tuning (`WRING_CUDA_GEMM_TUNE=on`): the first time a shape runs
//! outside a capture, cuBLAS's default choice is timed against cuBLASLt's heuristic
//! candidates and the fastest is kept for that (tokens, n_in, n_out) from then on, so an
//! eager step and the graph captured from the same shape run the same algorithm.
//! Why: cuBLAS's default for skinny decode GEMMs (a few tokens × a large weight) reads the
//! weights well below the HBM bandwidth on an H200 (results/2026-11-30-cuda-h200: the 8B roofline numbers).

use crate::blaslt::BlasLt;
use crate::gemm::Gemm;

use crate::device::DeviceBuffer;
use anyhow::{anyhow, Result};
use cudarc::cublas::{result, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use std::time::Instant;

const WORKSPACE_BYTES: usize = 32 << 20;

pub struct Blas {
    handle: sys::cublasHandle_t,
    _workspace: DeviceBuffer,
    stream: cudarc::driver::sys::CUstream,
    tune: bool,
    /// Every bf16 GEMM through cuBLASLt's first heuristic algorithm, planned once per shape
    /// (`WRING_CUDA_GEMM_LT`): cuBLAS's own call redoes its per-call setup, and an eager
    /// 135M step of ~120 GEMMs is bound by the host's enqueue time.
    lt_first: bool,
    /// Created by the first tuning or the first GEMM with `lt_first` (needs libcublasLt).
    lt: Option<BlasLt>,
    choices: HashMap<(usize, usize, usize), Choice>,
    reports: Vec<GemmTuneReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    GemmEx,
    Lt(usize),
}

/// One tuned shape: microseconds per GEMM (host clock over back-to-back runs) of plain
/// cuBLAS and of each cuBLASLt candidate, and which candidate was kept (None: cuBLAS).
#[derive(Debug, Clone)]
pub struct GemmTuneReport {
    pub tokens: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub gemm_ex_us: f64,
    pub lt_us: Vec<f64>,
    pub chosen: Option<usize>,
}

/// A cuBLASLt candidate replaces cuBLAS only when it is this much faster (timing noise).
const MIN_GAIN: f64 = 0.97;

// SAFETY: the handle is used by one backend on one thread at a time.
unsafe impl Send for Blas {}

impl Blas {
    pub fn new(stream: cudarc::driver::sys::CUstream, tune: bool, lt_first: bool) -> Result<Self> {
        let handle = result::create_handle().map_err(|e| anyhow!("cublasCreate failed: {e:?}"))?;
        let workspace = DeviceBuffer::alloc(WORKSPACE_BYTES, "the cuBLAS workspace")?;
        // SAFETY: handle is fresh; stream and workspace outlive it (owned by the backend).
        unsafe {
            result::set_stream(handle, stream as _)
                .map_err(|e| anyhow!("cublasSetStream failed: {e:?}"))?;
            sys::cublasSetWorkspace_v2(handle, workspace.ptr() as *mut c_void, WORKSPACE_BYTES)
                .result()
                .map_err(|e| anyhow!("cublasSetWorkspace failed: {e:?}"))?;
        }
        Ok(Self {
            handle,
            _workspace: workspace,
            stream,
            tune,
            lt_first,
            lt: None,
            choices: HashMap::new(),
            reports: vec![],
        })
    }

    /// Shapes tuned so far (empty unless tuning is on).
    pub fn tune_reports(&self) -> &[GemmTuneReport] {
        &self.reports
    }

    /// Runs `g` (f32 accumulation). `may_tune`: the stream is not capturing, so an
    /// untuned shape may be timed now.
    pub fn linear(&mut self, g: Gemm, may_tune: bool) -> Result<()> {
        if self.lt_first {
            let stream = self.stream;
            if let Some(lt) = self.lt_handle() {
                if lt.bf16_candidates(g.tokens, g.n_in, g.n_out) > 0 {
                    return lt.bf16_linear(stream, g, 0);
                }
            }
        }
        // Tuning off (the default): straight to cuBLAS, no lookup per GEMM.
        if !self.tune && self.choices.is_empty() {
            return self.linear_ld(g, g.n_out);
        }
        let choice = match self.choices.get(&g.shape()) {
            Some(&c) => c,
            None if self.tune && may_tune => {
                let c = self.tune_shape(g)?;
                self.choices.insert(g.shape(), c);
                c
            }
            None => Choice::GemmEx,
        };
        match choice {
            Choice::GemmEx => self.linear_ld(g, g.n_out),
            Choice::Lt(i) => {
                let lt = self
                    .lt
                    .as_mut()
                    .expect("a cuBLASLt choice implies a handle");
                lt.bf16_linear(self.stream, g, i)
            }
        }
    }

    /// The cuBLASLt handle, created on first use; None (and `lt_first` off, with a warning)
    /// when libcublasLt cannot be loaded.
    fn lt_handle(&mut self) -> Option<&mut BlasLt> {
        if self.lt.is_none() {
            match BlasLt::new() {
                Ok(lt) => self.lt = Some(lt),
                Err(e) => {
                    tracing::warn!("bf16 GEMMs stay on cuBLAS: {e:#}");
                    self.lt_first = false;
                    return None;
                }
            }
        }
        self.lt.as_mut()
    }

    fn sync(&self) -> Result<()> {
        // SAFETY: the stream outlives the backend that owns this handle.
        unsafe { cudarc::driver::result::stream::synchronize(self.stream) }
            .map_err(|e| anyhow!("stream synchronize while tuning a GEMM: {e:?}"))
    }

    /// Times `run` over back-to-back repetitions (after warm-up), in microseconds.
    fn time(&mut self, mut run: impl FnMut(&mut Self) -> Result<()>) -> Result<f64> {
        const WARM: usize = 3;
        const REPS: usize = 10;
        for _ in 0..WARM {
            run(self)?;
        }
        self.sync()?;
        let t0 = Instant::now();
        for _ in 0..REPS {
            run(self)?;
        }
        self.sync()?;
        Ok(t0.elapsed().as_secs_f64() * 1e6 / REPS as f64)
    }

    fn tune_shape(&mut self, g: Gemm) -> Result<Choice> {
        let (tokens, n_in, n_out) = g.shape();
        if self.lt_handle().is_none() {
            self.tune = false;
            return Ok(Choice::GemmEx);
        }
        self.sync()?;
        let gemm_ex_us = self.time(|b| b.linear_ld(g, n_out))?;
        let n = self
            .lt
            .as_mut()
            .map_or(0, |lt| lt.bf16_candidates(tokens, n_in, n_out));
        let mut lt_us = Vec::with_capacity(n);
        for i in 0..n {
            let stream = self.stream;
            let t = self.time(|b| {
                let lt = b.lt.as_mut().expect("created above");
                lt.bf16_linear(stream, g, i)
            });
            // A candidate that fails to launch is skipped, not fatal.
            lt_us.push(t.unwrap_or(f64::INFINITY));
        }
        let best = (0..n).min_by(|&a, &b| lt_us[a].total_cmp(&lt_us[b]));
        let chosen = best.filter(|&i| lt_us[i] < MIN_GAIN * gemm_ex_us);
        tracing::debug!(
            "GEMM {tokens}x{n_in}x{n_out}: cuBLAS {gemm_ex_us:.1} us, cuBLASLt best {:?}, kept {chosen:?}",
            best.map(|i| lt_us[i])
        );
        self.reports.push(GemmTuneReport {
            tokens,
            n_in,
            n_out,
            gemm_ex_us,
            lt_us,
            chosen,
        });
        Ok(chosen.map_or(Choice::GemmEx, Choice::Lt))
    }

    /// `g` through cuBLAS's default algorithm, output rows `ldy` apart (`n_out` for a
    /// whole output, more for a tile of a wider one).
    pub fn linear_ld(&self, g: Gemm, ldy: usize) -> Result<()> {
        let Gemm {
            x,
            w,
            y,
            tokens,
            n_in,
            n_out,
        } = g;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Column-major view: y (n_out × tokens) = wᵀ-of-(n_in × n_out) · x (n_in × tokens).
        // SAFETY: pointers address live device buffers of the stated shapes.
        unsafe {
            result::gemm_ex(
                self.handle,
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                n_out as i32,
                tokens as i32,
                n_in as i32,
                &alpha as *const f32 as *const c_void,
                w as *const c_void,
                sys::cudaDataType::CUDA_R_16BF,
                n_in as i32,
                x as *const c_void,
                sys::cudaDataType::CUDA_R_16BF,
                n_in as i32,
                &beta as *const f32 as *const c_void,
                y as *mut c_void,
                sys::cudaDataType::CUDA_R_32F,
                ldy as i32,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| anyhow!("cublasGemmEx ({tokens}x{n_in} · {n_out}x{n_in}ᵀ) failed: {e:?}"))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe {
            let _ = result::destroy_handle(self.handle);
        }
    }
}
