//! GEMMs through cuBLASLt: FP8 (E4M3 × E4M3) and bf16 × bf16, f32 accumulation, f32
//! output, a fixed workspace (nothing allocates inside a captured graph), one plan per
//! shape cached at its first use. bf16 plans keep several heuristic candidates so that
//! [`crate::blas::Blas`] can time them against plain cuBLAS and keep the fastest. Hopper's FP8 kernels need the "TN" layout (weights transposed, activations
//! not) and leading dimensions that are multiples of 16: callers pad the token count and
//! fall back to a dequantising path for matrices whose dimensions do not fit.

use crate::device::DeviceBuffer;
use anyhow::{anyhow, bail, Result};
use cudarc::cublaslt::{result, sys};
use std::collections::HashMap;
use std::ffi::c_void;

const WORKSPACE_BYTES: usize = 32 << 20;

struct Plan {
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

pub struct BlasLt {
    handle: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    pref: sys::cublasLtMatmulPreference_t,
    workspace: DeviceBuffer,
    /// Keyed by (tokens, n_in, n_out); None: cuBLASLt has no algorithm for the shape.
    plans: HashMap<(usize, usize, usize), Option<Plan>>,
    /// bf16 plans, same key; each holds up to [`BF16_CANDIDATES`] algorithms.
    bf16_plans: HashMap<(usize, usize, usize), Option<Bf16Plan>>,
}

/// Heuristic candidates kept per bf16 shape (timed by the caller).
pub const BF16_CANDIDATES: usize = 12;

struct Bf16Plan {
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algos: Vec<sys::cublasLtMatmulAlgo_t>,
}

// SAFETY: used by one backend on one thread at a time.
unsafe impl Send for BlasLt {}

fn lt<T>(r: std::result::Result<T, result::CublasError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("cuBLASLt {what} failed: {e:?}"))
}

/// Whether the FP8 GEMM can run on `(n_in, n_out)` weights at all.
pub fn fp8_shape_ok(n_in: usize, n_out: usize) -> bool {
    n_in.is_multiple_of(16) && n_out.is_multiple_of(16) && n_in > 0 && n_out > 0
}

/// Tokens padded to what the FP8 GEMM takes.
pub fn fp8_pad_tokens(tokens: usize) -> usize {
    tokens.div_ceil(16).max(1) * 16
}

impl BlasLt {
    /// Errors (never panics) when libcublasLt cannot be loaded.
    pub fn new() -> Result<Self> {
        // SAFETY: only dlopen()s candidate names.
        if !unsafe { sys::is_culib_present() } {
            bail!("libcublasLt could not be loaded (it ships with libcublas)");
        }
        let handle = lt(result::create_handle(), "create")?;
        let desc = lt(
            result::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType::CUDA_R_32F,
            ),
            "matmul descriptor",
        )?;
        // cublasOperation_t: 1 = CUBLAS_OP_T.
        let trans: i32 = 1;
        let pref = lt(result::create_matmul_pref(), "preference")?;
        let ws = WORKSPACE_BYTES as u64;
        // SAFETY: attribute buffers are live locals of the documented types.
        unsafe {
            lt(
                result::set_matmul_desc_attribute(
                    desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    &trans as *const _ as *const c_void,
                    std::mem::size_of_val(&trans),
                ),
                "TRANSA",
            )?;
            lt(
                result::set_matmul_pref_attribute(
                    pref,
                    sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &ws as *const u64 as *const c_void,
                    8,
                ),
                "workspace preference",
            )?;
        }
        Ok(Self {
            handle,
            desc,
            pref,
            workspace: DeviceBuffer::alloc(WORKSPACE_BYTES, "the cuBLASLt workspace")?,
            plans: HashMap::new(),
            bf16_plans: HashMap::new(),
        })
    }

    /// Whether cuBLASLt has an FP8 algorithm for the shape (planned here, host only).
    pub fn supports(&mut self, tokens: usize, n_in: usize, n_out: usize) -> bool {
        self.plan(tokens, n_in, n_out).is_ok()
    }

    fn plan(&mut self, tokens: usize, n_in: usize, n_out: usize) -> Result<&Plan> {
        let key = (tokens, n_in, n_out);
        if !self.plans.contains_key(&key) {
            let plan = self.make_plan(tokens, n_in, n_out);
            if let Err(e) = &plan {
                tracing::warn!("no cuBLASLt FP8 plan for {key:?}: {e:#}");
            }
            self.plans.insert(key, plan.ok());
        }
        self.plans[&key].as_ref().ok_or_else(|| {
            anyhow!("cuBLASLt has no FP8 algorithm for tokens {tokens}, in {n_in}, out {n_out}")
        })
    }

    fn make_plan(&self, tokens: usize, n_in: usize, n_out: usize) -> Result<Plan> {
        let [a, b, d] = Self::layouts(sys::cudaDataType::CUDA_R_8F_E4M3, tokens, n_in, n_out)?;
        // SAFETY: descriptors created above and in new().
        let heur = unsafe {
            result::get_matmul_algo_heuristic(self.handle, self.desc, a, b, d, d, self.pref)
        };
        match heur {
            Ok(h) => Ok(Plan {
                a,
                b,
                d,
                algo: h.algo,
            }),
            Err(e) => {
                // SAFETY: created above, not used elsewhere.
                unsafe {
                    let _ = result::destroy_matrix_layout(a);
                    let _ = result::destroy_matrix_layout(b);
                    let _ = result::destroy_matrix_layout(d);
                }
                bail!("heuristic: {e:?}")
            }
        }
    }

    /// Column-major layouts of one GEMM: A = weights (n_in × n_out, ld n_in, transposed by
    /// the op), B = activations (n_in × tokens, ld n_in), D = y (n_out × tokens, ld n_out).
    fn layouts(
        input: sys::cudaDataType,
        tokens: usize,
        n_in: usize,
        n_out: usize,
    ) -> Result<[sys::cublasLtMatrixLayout_t; 3]> {
        let a = lt(
            result::create_matrix_layout(input, n_in as u64, n_out as u64, n_in as i64),
            "layout A",
        )?;
        let b = lt(
            result::create_matrix_layout(input, n_in as u64, tokens as u64, n_in as i64),
            "layout B",
        )?;
        let d = lt(
            result::create_matrix_layout(
                sys::cudaDataType::CUDA_R_32F,
                n_out as u64,
                tokens as u64,
                n_out as i64,
            ),
            "layout D",
        )?;
        Ok([a, b, d])
    }

    /// How many bf16 algorithms cuBLASLt offers for the shape (0: none; planned here,
    /// host only, cached).
    pub fn bf16_candidates(&mut self, tokens: usize, n_in: usize, n_out: usize) -> usize {
        let key = (tokens, n_in, n_out);
        if !self.bf16_plans.contains_key(&key) {
            let plan = self.make_bf16_plan(tokens, n_in, n_out);
            if let Err(e) = &plan {
                tracing::debug!("no cuBLASLt bf16 plan for {key:?}: {e:#}");
            }
            self.bf16_plans.insert(key, plan.ok());
        }
        self.bf16_plans[&key].as_ref().map_or(0, |p| p.algos.len())
    }

    fn make_bf16_plan(&self, tokens: usize, n_in: usize, n_out: usize) -> Result<Bf16Plan> {
        let [a, b, d] = Self::layouts(sys::cudaDataType::CUDA_R_16BF, tokens, n_in, n_out)?;
        let mut found = [std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::uninit();
            BF16_CANDIDATES];
        let mut count: i32 = 0;
        // SAFETY: descriptors are live; `found` holds BF16_CANDIDATES results and
        // cuBLASLt writes at most that many (count says how many).
        let status = unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                self.handle,
                self.desc,
                a,
                b,
                d,
                d,
                self.pref,
                BF16_CANDIDATES as i32,
                found.as_mut_ptr() as *mut sys::cublasLtMatmulHeuristicResult_t,
                &mut count,
            )
        };
        let algos: Vec<_> = if status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            found[..count.clamp(0, BF16_CANDIDATES as i32) as usize]
                .iter()
                // SAFETY: the first `count` entries were written by cuBLASLt.
                .map(|r| unsafe { r.assume_init() })
                .filter(|r| {
                    r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                        && r.workspaceSize <= WORKSPACE_BYTES
                })
                .map(|r| r.algo)
                .collect()
        } else {
            vec![]
        };
        if algos.is_empty() {
            // SAFETY: created above, not used elsewhere.
            unsafe {
                let _ = result::destroy_matrix_layout(a);
                let _ = result::destroy_matrix_layout(b);
                let _ = result::destroy_matrix_layout(d);
            }
            bail!("heuristic: {status:?}, no usable algorithm");
        }
        Ok(Bf16Plan { a, b, d, algos })
    }

    /// `g` (bf16 in, f32 out) with candidate `algo` of the shape's plan
    /// ([`BlasLt::bf16_candidates`] first).
    pub fn bf16_linear(
        &mut self,
        stream: cudarc::driver::sys::CUstream,
        g: crate::gemm::Gemm,
        algo: usize,
    ) -> Result<()> {
        let crate::gemm::Gemm {
            x,
            w,
            y,
            tokens,
            n_in,
            n_out,
        } = g;
        let plan = self
            .bf16_plans
            .get(&(tokens, n_in, n_out))
            .and_then(Option::as_ref)
            .filter(|p| algo < p.algos.len())
            .ok_or_else(|| {
                anyhow!("no cuBLASLt bf16 algorithm {algo} planned for {tokens}x{n_in}x{n_out}")
            })?;
        self.matmul(stream, [plan.a, plan.b, plan.d], &plan.algos[algo], w, x, y)
            .map_err(|e| {
                anyhow!("cublasLtMatmul bf16 ({tokens}x{n_in} · {n_out}x{n_in}ᵀ) failed: {e:?}")
            })
    }

    /// `D = W·X` on the planned layouts `[a, b, d]` with `algo` (beta 0, D in place of C).
    fn matmul(
        &self,
        stream: cudarc::driver::sys::CUstream,
        [a, b, d]: [sys::cublasLtMatrixLayout_t; 3],
        algo: &sys::cublasLtMatmulAlgo_t,
        w: u64,
        x: u64,
        y: u64,
    ) -> std::result::Result<(), result::CublasError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: pointers address live device buffers of the planned shapes; the
        // workspace is fixed and WORKSPACE_BYTES long.
        unsafe {
            result::matmul(
                self.handle,
                self.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                w as *const c_void,
                a,
                x as *const c_void,
                b,
                y as *const c_void,
                d,
                y as *mut c_void,
                d,
                algo,
                self.workspace.ptr() as *mut c_void,
                WORKSPACE_BYTES,
                stream as sys::cudaStream_t,
            )
        }
    }

    /// `y[t][o] = Σ_i xq[t][i] · wq[o][i]` for E4M3 `xq` `[tokens][n_in]` and `wq`
    /// `[n_out][n_in]` (row-major), f32 `y` `[tokens][n_out]`; scales are applied by the
    /// caller. `tokens` must already be padded ([`fp8_pad_tokens`]).
    #[allow(clippy::too_many_arguments)]
    pub fn fp8_linear(
        &mut self,
        stream: cudarc::driver::sys::CUstream,
        xq: u64,
        wq: u64,
        y: u64,
        tokens: usize,
        n_in: usize,
        n_out: usize,
    ) -> Result<()> {
        self.plan(tokens, n_in, n_out)?;
        let plan = self.plans[&(tokens, n_in, n_out)]
            .as_ref()
            .expect("planned just above");
        self.matmul(stream, [plan.a, plan.b, plan.d], &plan.algo, wq, xq, y)
            .map_err(|e| {
                anyhow!("cublasLtMatmul FP8 ({tokens}x{n_in} · {n_out}x{n_in}ᵀ) failed: {e:?}")
            })
    }
}

impl Drop for BlasLt {
    fn drop(&mut self) {
        // SAFETY: everything was created by this struct and is destroyed once.
        unsafe {
            let fp8 = self.plans.values().flatten().map(|p| [p.a, p.b, p.d]);
            let bf16 = self.bf16_plans.values().flatten().map(|p| [p.a, p.b, p.d]);
            for layout in fp8.chain(bf16).flatten() {
                let _ = result::destroy_matrix_layout(layout);
            }
            let _ = result::destroy_matmul_pref(self.pref);
            let _ = result::destroy_matmul_desc(self.desc);
            let _ = result::destroy_handle(self.handle);
        }
    }
}
