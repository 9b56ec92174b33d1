// Greedy sampling on the device: the first index of the maximum of each logit row.
extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int vocab,
                                       u32* __restrict__ out) { pdl_entry();
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
        out[blockIdx.x] = idx == 0x7fffffff ? 0u : (u32)idx;
    }
}

// argmax_rows under structured output: row r's ids are restricted to the bits of table
// row_table[r] (words_per_row words, bit i%32 of word i/32) unless it is 0xffffffff
// (unmasked). Same rule as argmax_rows: first index of the largest allowed value, NaN never
// wins, 0 when nothing allowed is above -inf.
extern "C" __global__ void argmax_rows_masked(const float* __restrict__ logits, int vocab,
                                              u32* __restrict__ out,
                                              const u32* __restrict__ row_table,
                                              const u32* __restrict__ tables,
                                              int words_per_row) { pdl_entry();
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    const float* row = logits + (size_t)blockIdx.x * vocab;
    const u32 t = row_table[blockIdx.x];
    const u32* bits = t == 0xffffffffu ? nullptr : tables + (size_t)t * words_per_row;
    float v = (-WRING_INF);
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (bits && !((bits[i >> 5] >> (i & 31)) & 1u)) continue;
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
        out[blockIdx.x] = idx == 0x7fffffff ? 0u : (u32)idx;
    }
}
