// RMSNorm of the f32 residual stream into a GEMM input, one block per row.
// `add_rms_norm` first adds `y` into the residual (x += y) in the same pass.
//
// FP8 W8A8 (fp8.cuh): with `q` non-null the normalised row is written as E4M3 codes
// `q[r][cols]` plus its per-token scale `qs[r]` instead of bf16 `out`: the codes
// fp8_quantize_rows makes from the bf16 row (each value is rounded to bf16 first), so the
// FP8 GEMM that reads them needs no pass of its own. With `ys` non-null, `y` is an FP8
// GEMM's unscaled output: y[r][c] * (ys[r] * yw[c]) is what is added (fp8_rescale's
// product; __fmul_rn keeps it from being contracted into the add, so the bits are the
// unfused path's).

__device__ __forceinline__ float norm_value(float x, float scale, float w) {
    return bf2f(f2bf(x * scale * w));
}

__device__ __forceinline__ void rms_norm_row(const float* x, const float* w, bf16_t* out,
                                             unsigned char* q, float* qs, int cols, float eps) {
    __shared__ float scratch[32];
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / (float)cols + eps);
    if (q == nullptr) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = f2bf(x[c] * scale * w[c]);
        return;
    }
    float amax = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        amax = fmaxf(amax, fabsf(norm_value(x[c], scale, w[c])));
    amax = block_max(amax, scratch);
    const float s = fp8_row_scale(amax);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        q[c] = (unsigned char)f32_to_e4m3(norm_value(x[c], scale, w[c]) * inv);
    if (threadIdx.x == 0) *qs = s;
}

extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    bf16_t* __restrict__ out, int cols, float eps,
                                    unsigned char* __restrict__ q, float* __restrict__ qs) { pdl_entry();
    const size_t r = blockIdx.x;
    rms_norm_row(x + r * cols, w, out + r * cols, q ? q + r * cols : nullptr, q ? qs + r : nullptr, cols, eps);
}

// Qwen3's q/k norms: RMSNorm of every head_dim slice of the f32 rows in place, all heads with
// the same weights w; one warp a head (blockIdx.x the token row, blockIdx.y a group of
// blockDim.x / 32 heads), the sum of squares reduced in one fixed butterfly order, so a
// head's bits never depend on the step it is in.
extern "C" __global__ void head_rms_norm(float* __restrict__ x, const float* __restrict__ w,
                                         int n_heads, int head_dim, float eps) { pdl_entry();
    const int head = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (head >= n_heads) return;
    float* h = x + ((size_t)blockIdx.x * n_heads + head) * head_dim;
    float ss = 0.0f;
    for (int c = lane; c < head_dim; c += 32) ss += h[c] * h[c];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = rsqrtf(ss / (float)head_dim + eps);
    for (int c = lane; c < head_dim; c += 32) h[c] = h[c] * scale * w[c];
}

extern "C" __global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, bf16_t* __restrict__ out,
                                        int cols, float eps, const float* __restrict__ ys,
                                        const float* __restrict__ yw, unsigned char* __restrict__ q,
                                        float* __restrict__ qs) { pdl_entry();
    const size_t r = blockIdx.x;
    float* xr = x + r * cols;
    const float* yr = y + r * cols;
    const float yr_scale = ys ? ys[r] : 1.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        xr[c] += ys ? __fmul_rn(yr[c], __fmul_rn(yr_scale, yw[c])) : yr[c];
    __syncthreads();
    rms_norm_row(xr, w, out + r * cols, q ? q + r * cols : nullptr, q ? qs + r : nullptr, cols, eps);
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
                                                  bf16_t* __restrict__ out, int cols, float eps,
                                                  const float* __restrict__ ys,
                                                  const float* __restrict__ yw,
                                                  unsigned char* __restrict__ q,
                                                  float* __restrict__ qs) {
    __shared__ float scratch[32];
    const size_t r = blockIdx.x;
    float* xr = x + r * cols;
    const float* yr = y + r * cols;
    bf16_t* orow = out + r * cols;
    float xv[REGS], yv[REGS], wv[REGS];
    const float yr_scale = ys ? ys[r] : 1.0f;
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = min((int)(threadIdx.x + k * blockDim.x), cols - 1);
        xv[k] = xr[c];
        yv[k] = yr[c];
        wv[k] = w[c];
        if (ys) yv[k] = __fmul_rn(yv[k], __fmul_rn(yr_scale, yw[c]));
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
    if (q == nullptr) {
#pragma unroll
        for (int k = 0; k < REGS; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c < cols) orow[c] = f2bf(xv[k] * scale * wv[k]);
        }
        return;
    }
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < cols) {
            yv[k] = norm_value(xv[k], scale, wv[k]);
            amax = fmaxf(amax, fabsf(yv[k]));
        }
    }
    amax = block_max(amax, scratch);
    const float s = fp8_row_scale(amax);
    const float inv = 1.0f / s;
    unsigned char* qrow = q + r * cols;
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < cols) qrow[c] = (unsigned char)f32_to_e4m3(yv[k] * inv);
    }
    if (threadIdx.x == 0) qs[r] = s;
}

extern "C" __global__ void add_rms_norm_r4(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps, const float* __restrict__ ys,
                                          const float* __restrict__ yw, unsigned char* __restrict__ q,
                                          float* __restrict__ qs) { pdl_entry();
    add_rms_norm_regs<4>(x, y, w, out, cols, eps, ys, yw, q, qs);
}
extern "C" __global__ void add_rms_norm_r8(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps, const float* __restrict__ ys,
                                          const float* __restrict__ yw, unsigned char* __restrict__ q,
                                          float* __restrict__ qs) { pdl_entry();
    add_rms_norm_regs<8>(x, y, w, out, cols, eps, ys, yw, q, qs);
}
extern "C" __global__ void add_rms_norm_r16(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps, const float* __restrict__ ys,
                                          const float* __restrict__ yw, unsigned char* __restrict__ q,
                                          float* __restrict__ qs) { pdl_entry();
    add_rms_norm_regs<16>(x, y, w, out, cols, eps, ys, yw, q, qs);
}
extern "C" __global__ void add_rms_norm_r32(float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ w, bf16_t* __restrict__ out,
                                          int cols, float eps, const float* __restrict__ ys,
                                          const float* __restrict__ yw, unsigned char* __restrict__ q,
                                          float* __restrict__ qs) { pdl_entry();
    add_rms_norm_regs<32>(x, y, w, out, cols, eps, ys, yw, q, qs);
}
