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
                                    bf16_t* __restrict__ out, int cols, float eps) {
    const size_t r = blockIdx.x;
    rms_norm_row(x + r * cols, w, out + r * cols, cols, eps);
}

extern "C" __global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, bf16_t* __restrict__ out,
                                        int cols, float eps) {
    const size_t r = blockIdx.x;
    float* xr = x + r * cols;
    const float* yr = y + r * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) xr[c] += yr[c];
    __syncthreads();
    rms_norm_row(xr, w, out + r * cols, cols, eps);
}
