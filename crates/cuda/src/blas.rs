//! bf16 GEMMs through cuBLAS with a fixed workspace (so nothing allocates inside a
//! captured graph), f32 accumulation and f32 output.

use crate::device::DeviceBuffer;
use anyhow::{anyhow, Result};
use cudarc::cublas::{result, sys};
use std::ffi::c_void;

const WORKSPACE_BYTES: usize = 32 << 20;

pub struct Blas {
    handle: sys::cublasHandle_t,
    _workspace: DeviceBuffer,
}

// SAFETY: the handle is used by one backend on one thread at a time.
unsafe impl Send for Blas {}

impl Blas {
    pub fn new(stream: cudarc::driver::sys::CUstream) -> Result<Self> {
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
        })
    }

    /// `y[t][o] = Σ_i x[t][i] · w[o][i]` with x, w bf16 row-major and y f32 row-major.
    pub fn linear(
        &self,
        x: u64,
        w: u64,
        y: u64,
        tokens: usize,
        n_in: usize,
        n_out: usize,
    ) -> Result<()> {
        self.linear_ld(x, w, y, tokens, n_in, n_out, n_out)
    }

    /// As [`Blas::linear`] with output rows `ldy` apart (a tile of a wider output).
    #[allow(clippy::too_many_arguments)]
    pub fn linear_ld(
        &self,
        x: u64,
        w: u64,
        y: u64,
        tokens: usize,
        n_in: usize,
        n_out: usize,
        ldy: usize,
    ) -> Result<()> {
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
