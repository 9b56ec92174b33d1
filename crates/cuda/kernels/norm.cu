// RMSNorm of the f32 residual stream into a bf16 GEMM input, one block per row.
// `add_rms_norm` first adds `y` into the residual (x += y) in the same pass.

__device__ __forceinline__ void rms_norm_row(const float* x, const float* w, bf16_t* out,
                                             int cols, float eps) {
    __shared__ float scratch[32];
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = f2bf(x[c] * scale * w[c]);
}

extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    bf16_t* __restrict__ out, int cols, float eps) { pdl_entry();
    const size_t r = blockIdx.x;
    rms_norm_row(x + r * cols, w, out + r * cols, cols, eps);
}

extern "C" __global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, bf16_t* __restrict__ out,
                                        int cols, float eps) { pdl_entry();
    const size_t r = blockIdx.x;
    float* xr = x + r * cols;
    const float* yr = y + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) xr[c] += yr[c];
    __syncthreads();
    rms_norm_row(xr, w, out + r * cols, cols, eps);
}

// `add_rms_norm` for rows of at most REGS * blockDim.x columns, held in registers: every load
// of x, y and w is issued first (indices clamped into the row, so no branch stands between
// them), then the add, the sum of squares and the scaled write run from registers. The loop
// version above waits for memory once per element per pass (a 4096-wide row at batch 1 took
// ~15 us on the H200). Thread t still owns columns t, t + blockDim.x, ... and sums them in
// that order, so the bits are the loop version's. The host picks the smallest REGS that fits.
template <int REGS>
__device__ __forceinline__ void add_rms_norm_regs(float* __restrict__ x, const float* __restrict__ y,
                                                  const float* __restrict__ w,
                                                  bf16_t* __restrict__ out, int cols, float eps) {
    __shared__ float scratch[32];
    const size_t r = blockIdx.x;
    float* xr = x + r * cols;
    const float* yr = y + r * cols;
    bf16_t* orow = out + r * cols;
    float xv[REGS], yv[REGS], wv[REGS];
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = min((int)(threadIdx.x + k * blockDim.x), cols - 1);
        xv[k] = xr[c];
        yv[k] = yr[c];
        wv[k] = w[c];
    }
    __syncthreads();  // every thread has read its x before any writes the sum back
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < cols) {
            xv[k] += yv[k];
            xr[c] = xv[k];
            ss += xv[k] * xv[k];
        }
    }
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / (float)cols + eps);
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < cols) orow[c] = f2bf(xv[k] * scale * wv[k]);
    }
}

extern "C" __global__ void add_rms_norm_r4(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps) { pdl_entry();
    add_rms_norm_regs<4>(x, y, w, out, cols, eps);
}
extern "C" __global__ void add_rms_norm_r8(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps) { pdl_entry();
    add_rms_norm_regs<8>(x, y, w, out, cols, eps);
}
extern "C" __global__ void add_rms_norm_r16(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps) { pdl_entry();
    add_rms_norm_regs<16>(x, y, w, out, cols, eps);
}
extern "C" __global__ void add_rms_norm_r32(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps) { pdl_entry();
    add_rms_norm_regs<32>(x, y, w, out, cols, eps);
}
