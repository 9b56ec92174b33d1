// Rotary position embedding in place on f32 rows `[T][n_heads*head_dim]`.
// inv_freq is precomputed on the host with any scaling (llama3, linear) applied.
// The angle is formed in double so long positions keep their precision.
extern "C" __global__ void rope(float* __restrict__ x, const u32* __restrict__ positions,
                                const float* __restrict__ inv_freq, int n_heads, int head_dim,
                                int interleaved) { pdl_entry();
    const int half = head_dim / 2;
    const double pos = (double)positions[blockIdx.x];
    float* row = x + (size_t)blockIdx.x * n_heads * head_dim;
    for (int p = threadIdx.x; p < n_heads * half; p += blockDim.x) {
        const int h = p / half, i = p % half;
        double s, c;
        sincos(pos * (double)inv_freq[i], &s, &c);
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        float* head = row + h * head_dim;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * (float)c - x1 * (float)s;
        head[b] = x0 * (float)s + x1 * (float)c;
    }
}

// The fused q|k|v projection `[T][(n_heads + 2 n_kv_heads) * head_dim]` split into contiguous
// q `[T][n_heads*head_dim]`, k and v `[T][n_kv_heads*head_dim]`, with RoPE applied to q and k
// (the same arithmetic as `rope`): one launch instead of two RoPE launches and two extra GEMMs.
// With `k_pool` non-null, k and v go straight into the token's KV slot of the layer's pools as
// bf16 (exactly what `kv_store` would write from them) and the k/v outputs are not written.
// Grid (T, n_heads + 2 n_kv_heads) for steps of few tokens: block y < n_heads + n_kv_heads
// rotates q/k head y, the rest copy one v head each, so a decode step's few tokens still
// spread over many blocks (one block per token took ~11 us for llama-3.1-8b at batch 1 on the
// H200). Grid (T, 1) for long steps: one block per token, each angle's double-precision
// sincos computed once for all heads (per head it was 12 % of a 1,024-token 135M step).
// Same arithmetic either way, so the grid never changes a bit.
// With `xs` non-null (rope_split_qkv_fp8) `qkv` is an FP8 GEMM's unscaled output: each value
// read is first multiplied by (xs[t] * ws[col]), fp8_rescale's product (__fmul_rn keeps it out
// of the rotation's contractions, so the bits are those of fp8_rescale then rope_split_qkv).
__device__ __forceinline__ void rope_split_qkv_row(const float* __restrict__ qkv, float* __restrict__ q,
                                          float* __restrict__ k, float* __restrict__ v,
                                          const u32* __restrict__ positions,
                                          const float* __restrict__ inv_freq, int n_heads,
                                          int n_kv_heads, int head_dim, int interleaved,
                                          bf16_t* __restrict__ k_pool, bf16_t* __restrict__ v_pool,
                                          const u32* __restrict__ token_seq,
                                          const u32* __restrict__ seq_bt_off,
                                          const u32* __restrict__ block_tables, int block_size,
                                          const float* __restrict__ xs, const float* __restrict__ ws) {
    const int half = head_dim / 2;
    const int qd = n_heads * head_dim, kvd = n_kv_heads * head_dim;
    const int rotated = n_heads + n_kv_heads, all = rotated + n_kv_heads;
    const size_t t = blockIdx.x;
    // gridDim.y == all: one head per block; gridDim.y == 1: every head of the token.
    const int h_begin = gridDim.y == 1 ? 0 : blockIdx.y;
    const int h_end = gridDim.y == 1 ? all : blockIdx.y + 1;
    const float* row = qkv + t * (size_t)(qd + 2 * kvd);
    const bool to_pool = k_pool != nullptr;
    const size_t slot = to_pool
        ? (size_t)kv_slot(block_tables, seq_bt_off[token_seq[t]], positions[t], block_size) * kvd
        : 0;
    for (int h = max(h_begin, rotated); h < h_end; ++h) {
        const int off = (h - rotated) * head_dim;
        for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
            const int col = qd + kvd + off + j;
            const float x = xs ? __fmul_rn(row[col], __fmul_rn(xs[t], ws[col])) : row[col];
            if (to_pool) v_pool[slot + off + j] = f2bf(x);
            else v[t * kvd + off + j] = x;
        }
    }
    const double pos = (double)positions[t];
    // Rotated heads: pair i of head h for p = (h - h_begin) * half + i. A thread keeps its
    // angle while i stays the same (always, when blockDim is a multiple of half), so a
    // block per token computes each angle once instead of once per head.
    const int pairs = (min(h_end, rotated) - h_begin) * half;
    int angle_of = -1;
    float cf = 0.0f, sf = 0.0f;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int h = h_begin + p / half, i = p % half;
        if (i != angle_of) {
            double s, c;
            sincos(pos * (double)inv_freq[i], &s, &c);
            cf = (float)c;
            sf = (float)s;
            angle_of = i;
        }
        // Heads 0..n_heads are q, the next n_kv_heads are k: both lie at row + h * head_dim.
        const float* src = row + h * head_dim;
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        float x0 = src[a], x1 = src[b];
        if (xs) {
            const float* wh = ws + h * head_dim;
            x0 = __fmul_rn(x0, __fmul_rn(xs[t], wh[a]));
            x1 = __fmul_rn(x1, __fmul_rn(xs[t], wh[b]));
        }
        const float y0 = x0 * cf - x1 * sf;
        const float y1 = x0 * sf + x1 * cf;
        if (h < n_heads) {
            float* dst = q + t * qd + h * head_dim;
            dst[a] = y0;
            dst[b] = y1;
        } else if (to_pool) {
            bf16_t* dst = k_pool + slot + (h - n_heads) * head_dim;
            dst[a] = f2bf(y0);
            dst[b] = f2bf(y1);
        } else {
            float* dst = k + t * kvd + (h - n_heads) * head_dim;
            dst[a] = y0;
            dst[b] = y1;
        }
    }
}

extern "C" __global__ void rope_split_qkv(const float* __restrict__ qkv, float* __restrict__ q,
                                          float* __restrict__ k, float* __restrict__ v,
                                          const u32* __restrict__ positions,
                                          const float* __restrict__ inv_freq, int n_heads,
                                          int n_kv_heads, int head_dim, int interleaved,
                                          bf16_t* __restrict__ k_pool, bf16_t* __restrict__ v_pool,
                                          const u32* __restrict__ token_seq,
                                          const u32* __restrict__ seq_bt_off,
                                          const u32* __restrict__ block_tables, int block_size) { pdl_entry();
    rope_split_qkv_row(qkv, q, k, v, positions, inv_freq, n_heads, n_kv_heads, head_dim, interleaved,
                       k_pool, v_pool, token_seq, seq_bt_off, block_tables, block_size, nullptr, nullptr);
}

extern "C" __global__ void rope_split_qkv_fp8(const float* __restrict__ qkv, float* __restrict__ q,
                                              float* __restrict__ k, float* __restrict__ v,
                                              const u32* __restrict__ positions,
                                              const float* __restrict__ inv_freq, int n_heads,
                                              int n_kv_heads, int head_dim, int interleaved,
                                              bf16_t* __restrict__ k_pool, bf16_t* __restrict__ v_pool,
                                              const u32* __restrict__ token_seq,
                                              const u32* __restrict__ seq_bt_off,
                                              const u32* __restrict__ block_tables, int block_size,
                                              const float* __restrict__ xs, const float* __restrict__ ws) { pdl_entry();
    rope_split_qkv_row(qkv, q, k, v, positions, inv_freq, n_heads, n_kv_heads, head_dim, interleaved,
                       k_pool, v_pool, token_seq, seq_bt_off, block_tables, block_size, xs, ws);
}
