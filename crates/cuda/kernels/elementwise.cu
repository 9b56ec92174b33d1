// Small elementwise kernels: residual add, bias add, SiLU-gated product (also straight to FP8), row gather.

extern "C" __global__ void add_f32(float* __restrict__ x, const float* __restrict__ y, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        x[i] += y[i];
}

// x[r][c] += b[c] for every row.
extern "C" __global__ void add_bias_f32(float* __restrict__ x, const float* __restrict__ b,
                                        int cols, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        x[i] += b[i % cols];
}

// silu(gate) * up, written as bf16 for the down projection.
extern "C" __global__ void silu_mul(const float* __restrict__ gate, const float* __restrict__ up,
                                    bf16_t* __restrict__ out, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = f2bf(g / (1.0f + __expf(-g)) * up[i]);
    }
}

// out[i] = x[rows[i]], one block per output row.
extern "C" __global__ void gather_rows(const float* __restrict__ x, const u32* __restrict__ rows,
                                       float* __restrict__ out, int cols) { pdl_entry();
    const float* src = x + (size_t)rows[blockIdx.x] * cols;
    float* dst = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// silu(gate) * up from the fused gate|up projection `[T][2n]`, written as bf16 `[T][n]`: row
// blockIdx.y, columns blockIdx.x * blockDim.x + threadIdx.x (a 2-D grid: the flat index's
// 64-bit division per value made this kernel ~3x slower than its bytes in prefill steps).
extern "C" __global__ void silu_mul_fused(const float* __restrict__ gu, bf16_t* __restrict__ out,
                                          int n) { pdl_entry();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    const float* row = gu + (size_t)blockIdx.y * 2 * n;
    const float g = row[c];
    out[(size_t)blockIdx.y * n + c] = f2bf(g / (1.0f + __expf(-g)) * row[n + c]);
}

// ---- FP8 W8A8 (fp8.cuh): silu(gate) * up of the fused gate|up output `[T][2n]`, one block
// per token row, for the down projection. `xs` non-null: `gu` is an FP8 GEMM's unscaled
// output, each value times (xs[t] * ws[col]) (fp8_rescale's product, kept out of any
// contraction by __fmul_rn). `q` non-null: the row is written as E4M3 codes `q[t][n]` plus
// its per-token scale `qs[t]` (the codes fp8_quantize_rows makes from the bf16 row), else
// as bf16 `out[t][n]`. Bits equal silu_mul_fused after fp8_rescale (and fp8_quantize_rows).

__device__ __forceinline__ float silu_mul_value(float g, float u) {
    return bf2f(f2bf(g / (1.0f + __expf(-g)) * u));
}

__device__ __forceinline__ float fp8_scaled(float v, float row_scale, const float* ws, int col) {
    return ws ? __fmul_rn(v, __fmul_rn(row_scale, ws[col])) : v;
}

// Rows of at most REGS * blockDim.x values held in registers (loads issued first).
template <int REGS>
__device__ __forceinline__ void silu_mul_row_regs(const float* __restrict__ gu, const float* __restrict__ xs,
                                                  const float* __restrict__ ws, bf16_t* __restrict__ out,
                                                  unsigned char* __restrict__ q, float* __restrict__ qs, int n) {
    __shared__ float scratch[32];
    const size_t t = blockIdx.x;
    const float* row = gu + t * 2 * (size_t)n;
    const float rs = xs ? xs[t] : 1.0f;
    const float* wsc = xs ? ws : nullptr;
    float g[REGS], u[REGS];
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = min((int)(threadIdx.x + k * blockDim.x), n - 1);
        g[k] = fp8_scaled(row[c], rs, wsc, c);
        u[k] = fp8_scaled(row[n + c], rs, wsc, n + c);
    }
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < n) {
            g[k] = silu_mul_value(g[k], u[k]);
            amax = fmaxf(amax, fabsf(g[k]));
        }
    }
    if (q == nullptr) {
#pragma unroll
        for (int k = 0; k < REGS; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c < n) out[t * n + c] = f2bf(g[k]);
        }
        return;
    }
    amax = block_max(amax, scratch);
    const float s = fp8_row_scale(amax);
    const float inv = 1.0f / s;
#pragma unroll
    for (int k = 0; k < REGS; ++k) {
        const int c = threadIdx.x + k * blockDim.x;
        if (c < n) q[t * n + c] = (unsigned char)f32_to_e4m3(g[k] * inv);
    }
    if (threadIdx.x == 0) qs[t] = s;
}

extern "C" __global__ void __launch_bounds__(1024) silu_mul_row_r4(const float* __restrict__ gu, const float* __restrict__ xs,
                                       const float* __restrict__ ws, bf16_t* __restrict__ out,
                                       unsigned char* __restrict__ q, float* __restrict__ qs, int n) { pdl_entry();
    silu_mul_row_regs<4>(gu, xs, ws, out, q, qs, n);
}
extern "C" __global__ void __launch_bounds__(1024) silu_mul_row_r8(const float* __restrict__ gu, const float* __restrict__ xs,
                                       const float* __restrict__ ws, bf16_t* __restrict__ out,
                                       unsigned char* __restrict__ q, float* __restrict__ qs, int n) { pdl_entry();
    silu_mul_row_regs<8>(gu, xs, ws, out, q, qs, n);
}
extern "C" __global__ void __launch_bounds__(1024) silu_mul_row_r16(const float* __restrict__ gu, const float* __restrict__ xs,
                                       const float* __restrict__ ws, bf16_t* __restrict__ out,
                                       unsigned char* __restrict__ q, float* __restrict__ qs, int n) { pdl_entry();
    silu_mul_row_regs<16>(gu, xs, ws, out, q, qs, n);
}

// Any row width: the values are computed twice (amax, then the codes) instead of held.
extern "C" __global__ void __launch_bounds__(1024) silu_mul_row(const float* __restrict__ gu, const float* __restrict__ xs,
                                   const float* __restrict__ ws, bf16_t* __restrict__ out,
                                   unsigned char* __restrict__ q, float* __restrict__ qs, int n) { pdl_entry();
    __shared__ float scratch[32];
    const size_t t = blockIdx.x;
    const float* row = gu + t * 2 * (size_t)n;
    const float rs = xs ? xs[t] : 1.0f;
    const float* wsc = xs ? ws : nullptr;
    float amax = 0.0f;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = silu_mul_value(fp8_scaled(row[c], rs, wsc, c), fp8_scaled(row[n + c], rs, wsc, n + c));
        if (q == nullptr) out[t * n + c] = f2bf(v);
        amax = fmaxf(amax, fabsf(v));
    }
    if (q == nullptr) return;
    amax = block_max(amax, scratch);
    const float s = fp8_row_scale(amax);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = silu_mul_value(fp8_scaled(row[c], rs, wsc, c), fp8_scaled(row[n + c], rs, wsc, n + c));
        q[t * n + c] = (unsigned char)f32_to_e4m3(v * inv);
    }
    if (threadIdx.x == 0) qs[t] = s;
}
