//! One GEMM call's operands and shape, shared by the cuBLAS (`blas.rs`) and cuBLASLt
//! (`blaslt.rs`) paths.

/// One GEMM `y[t][o] = Σ_i x[t][i] · w[o][i]`: device addresses of bf16 `x` `[tokens][n_in]`,
/// bf16 `w` `[n_out][n_in]` and f32 `y` (row-major), and the shape.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub x: u64,
    pub w: u64,
    pub y: u64,
    pub tokens: usize,
    pub n_in: usize,
    pub n_out: usize,
}

impl Gemm {
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.tokens, self.n_in, self.n_out)
    }
}
