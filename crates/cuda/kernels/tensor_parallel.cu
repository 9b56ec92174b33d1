// Kernels of a tensor-parallel rank (its collectives are NCCL's). Like every wring kernel
// they begin with pdl_entry(): the backend launches them with programmatic dependent launch.

// Vocabulary-parallel embedding: the rows of ids first..first + rows from this rank's
// table, zero rows for the ids other ranks hold (the all-reduce that follows adds them).
extern "C" __global__ void embed_rows_shard(const u32* __restrict__ tokens,
                                            const bf16_t* __restrict__ table,
                                            float* __restrict__ out, int cols, int first,
                                            int rows) {
    pdl_entry();
    const u32 tok = tokens[blockIdx.x];
    float* dst = out + (size_t)blockIdx.x * cols;
    if (tok >= (u32)first && tok - (u32)first < (u32)rows) {
        const bf16_t* src = table + (size_t)(tok - (u32)first) * cols;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = bf2f(src[c]);
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = 0.0f;
    }
}

// The largest value of each logit row and its first index (NaN never wins), as
// out[2 * row] = index, out[2 * row + 1] = the value's bits: what a rank of a
// vocabulary-parallel LM head contributes to the greedy choice across ranks.
extern "C" __global__ void max_rows(const float* __restrict__ logits, int vocab,
                                    u32* __restrict__ out) {
    pdl_entry();
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    const float* row = logits + (size_t)blockIdx.x * vocab;
    float v = (-WRING_INF);
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float x = row[i];
        if (x > v) { v = x; idx = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) { best_v[warp] = v; best_i[warp] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nwarps; ++w)
            if (best_v[w] > v || (best_v[w] == v && best_i[w] < idx)) { v = best_v[w]; idx = best_i[w]; }
        out[2 * blockIdx.x] = idx == 0x7fffffff ? 0u : (u32)idx;
        out[2 * blockIdx.x + 1] = __float_as_uint(v);
    }
}
