// Small elementwise kernels: residual add, bias add, SiLU-gated product, row gather.

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

// silu(gate) * up from the fused gate|up projection `[T][2n]`, written as bf16 `[T][n]`.
extern "C" __global__ void silu_mul_fused(const float* __restrict__ gu, bf16_t* __restrict__ out,
                                          int n, long total) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const long r = i / n, c = i % n;
        const float g = gu[r * 2 * n + c];
        out[i] = f2bf(g / (1.0f + __expf(-g)) * gu[r * 2 * n + n + c]);
    }
}
