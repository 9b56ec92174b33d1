// Token embedding: one block per token row, bf16 table to the f32 residual stream.
extern "C" __global__ void embed_rows(const u32* __restrict__ tokens,
                                      const bf16_t* __restrict__ table,
                                      float* __restrict__ out, int cols) { pdl_entry();
    const u32 tok = tokens[blockIdx.x];
    const bf16_t* src = table + (size_t)tok * cols;
    float* dst = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = bf2f(src[c]);
}
