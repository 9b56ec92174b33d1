// The K/V store and the reference attention kernel: one block per (query token, query
// head) on the CUDA cores, any head_dim up to 256 and any block size. Every query token
// attends causally to positions 0..=its own position of its sequence, so queries inside a
// draft see the draft tokens before them and nothing after. It serves head_dim 256 (which
// attention_mma.cu does not) and is the reference `gpu_check attention` compares with.
// `paged_attention_split` + `attention_combine`: the split-KV variant that was the default
// before attention_mma (kept for the side-by-side measurement, WRING_CUDA_ATTENTION=split).

#define ATTN_TILE 128
#define ATTN_MAX_HEAD_DIM 256

// Writes this step's K and V rows (f32) into the pool as bf16; one block per token.
extern "C" __global__ void kv_store(const float* __restrict__ k, const float* __restrict__ v,
                                    bf16_t* __restrict__ k_pool, bf16_t* __restrict__ v_pool,
                                    const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                                    const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                                    int kv_width, int block_size) { pdl_entry();
    const int t = blockIdx.x;
    const u32 slot = kv_slot(block_tables, seq_bt_off[token_seq[t]], positions[t], block_size);
    for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
        k_pool[(size_t)slot * kv_width + i] = f2bf(k[(size_t)t * kv_width + i]);
        v_pool[(size_t)slot * kv_width + i] = f2bf(v[(size_t)t * kv_width + i]);
    }
}

// One block of ATTN_TILE threads (4 warps) per (query token, query head). Keys are
// visited in tiles of ATTN_TILE positions with an online softmax: each thread scores
// one key of the tile; then each warp accumulates V over every 4th position of the
// tile, a lane owning head_dim/32 consecutive output dims, so four positions' V rows
// are in flight per warp and loads stay coalesced. Warps are summed at the end.
// head_dim must be 64, 128 or 256. A row's result never depends on other rows
// (batch-invariant).
#define ATTN_WARPS (ATTN_TILE / 32)
#define ATTN_MAX_DPL (ATTN_MAX_HEAD_DIM / 32)
// The per-(token, head) attention over key tiles first_tile, first_tile + tile_step, ...
// (all tiles: 0, 1). Leaves the unnormalised output (the warps' accumulators summed in
// warp order) in `partial[0][0..head_dim]` and returns the running max and sum.
__device__ __forceinline__ void attention_head_tiles(
    const float* __restrict__ q, const bf16_t* __restrict__ k_pool, const bf16_t* __restrict__ v_pool,
    const u32* __restrict__ positions, const u32* __restrict__ token_seq,
    const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale,
    u32 first_tile, u32 tile_step, float (*partial)[ATTN_MAX_HEAD_DIM], float* m_out, float* l_out) {
    __shared__ float qs[ATTN_MAX_HEAD_DIM];
    __shared__ float probs[ATTN_TILE];
    __shared__ u32 slots[ATTN_TILE];
    __shared__ float scratch[32];

    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int kvh = h / (n_heads / n_kv_heads);
    const int kv_width = n_kv_heads * head_dim;
    const int dpl = head_dim / 32;  // output dims per lane: 2, 4 or 8
    const u32 last = positions[t];
    const u32 bt_off = seq_bt_off[token_seq[t]];
    const float* qrow = q + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
    for (int d = tid; d < head_dim; d += ATTN_TILE) qs[d] = qrow[d];
    __syncthreads();

    float acc[ATTN_MAX_DPL];
#pragma unroll
    for (int i = 0; i < ATTN_MAX_DPL; ++i) acc[i] = 0.0f;
    float m = (-WRING_INF), l = 0.0f;
    const size_t head_off = (size_t)kvh * head_dim + (size_t)lane * dpl;
    for (u32 start = first_tile * ATTN_TILE; start <= last; start += tile_step * ATTN_TILE) {
        const u32 pos = start + tid;
        float score = (-WRING_INF);
        if (pos <= last) {
            const u32 slot = kv_slot(block_tables, bt_off, pos, block_size);
            slots[tid] = slot;
            const uint4* kr = (const uint4*)(k_pool + (size_t)slot * kv_width + (size_t)kvh * head_dim);
            float dot = 0.0f;
            // Unrolled so several 16-byte loads of the key row are in flight at once.
#pragma unroll 8
            for (int c = 0; c < head_dim / 8; ++c) {
                const uint4 w = kr[c];
                const u32 ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    dot += qs[c * 8 + 2 * j] * __uint_as_float(ws[j] << 16);
                    dot += qs[c * 8 + 2 * j + 1] * __uint_as_float(ws[j] & 0xffff0000u);
                }
            }
            score = dot * scale;
        }
        const float new_m = fmaxf(m, block_max(score, scratch));
        const float p = pos <= last ? __expf(score - new_m) : 0.0f;
        probs[tid] = p;
        const float tile_sum = block_sum(p, scratch);
        const float corr = __expf(m - new_m);
        l = l * corr + tile_sum;
        m = new_m;
        __syncthreads();
        const int n = min((u32)ATTN_TILE, last + 1 - start);
#pragma unroll
        for (int i = 0; i < ATTN_MAX_DPL; ++i) acc[i] *= corr;
#pragma unroll 8
        for (int j = warp; j < n; j += ATTN_WARPS) {
            const u32* vr = (const u32*)(v_pool + (size_t)slots[j] * kv_width + head_off);
            const float pj = probs[j];
#pragma unroll
            for (int i = 0; i < ATTN_MAX_DPL / 2; ++i) {
                if (2 * i < dpl) {
                    const u32 w = vr[i];
                    acc[2 * i] += pj * __uint_as_float(w << 16);
                    acc[2 * i + 1] += pj * __uint_as_float(w & 0xffff0000u);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < ATTN_MAX_DPL; ++i)
        if (i < dpl) partial[warp][lane * dpl + i] = acc[i];
    __syncthreads();
    for (int d = tid; d < head_dim; d += ATTN_TILE) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; ++w) s += partial[w][d];
        partial[0][d] = s;
    }
    __syncthreads();
    *m_out = m;
    *l_out = l;
}

extern "C" __global__ void __launch_bounds__(ATTN_TILE) paged_attention(AttnArgs a) { pdl_entry();
    __shared__ float partial[ATTN_WARPS][ATTN_MAX_HEAD_DIM];
    float m, l;
    attention_head_tiles(a.q, a.k_pool, a.v_pool, a.positions, a.token_seq, a.seq_bt_off, a.block_tables,
                         a.n_heads, a.n_kv_heads, a.head_dim, a.block_size, a.scale, 0, 1, partial, &m, &l);
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    bf16_t* orow = a.out + (size_t)t * a.n_heads * a.head_dim + (size_t)h * a.head_dim;
    const float inv_l = 1.0f / l;
    for (int d = tid; d < a.head_dim; d += ATTN_TILE) orow[d] = f2bf(partial[0][d] * inv_l);
}

// Split-KV decode (flash-decoding): block (t, h, s) of gridDim.z = S splits takes key tiles
// s, s+S, s+2S, ... and writes its unnormalised partial [m, l, acc[head_dim]] to
// parts[(t * n_heads + h) * S + s]; `attention_combine` merges the S partials in split
// order. S is a constant of the launch (not of the batch), so a row's result depends on
// its own sequence only. A split with no tile writes m = -inf, l = 0, acc = 0.
extern "C" __global__ void __launch_bounds__(ATTN_TILE) paged_attention_split(AttnArgs a) { pdl_entry();
    __shared__ float partial[ATTN_WARPS][ATTN_MAX_HEAD_DIM];
    float m, l;
    const u32 splits = gridDim.z, s = blockIdx.z;
    attention_head_tiles(a.q, a.k_pool, a.v_pool, a.positions, a.token_seq, a.seq_bt_off, a.block_tables,
                         a.n_heads, a.n_kv_heads, a.head_dim, a.block_size, a.scale, s, splits, partial, &m, &l);
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    float* prow = a.parts + ((size_t)(t * a.n_heads + h) * splits + s) * (a.head_dim + 2);
    if (tid == 0) { prow[0] = m; prow[1] = l; }
    for (int d = tid; d < a.head_dim; d += ATTN_TILE) prow[2 + d] = partial[0][d];
}

// One block per (token, head), one thread per output dim: out = Σ_s acc_s·e^(m_s−M) / Σ_s l_s·e^(m_s−M)
// with M = max_s m_s, summed in split order (split 0 always holds position 0, so M is finite).
extern "C" __global__ void attention_combine(AttnArgs a) { pdl_entry();
    const int t = blockIdx.x, h = blockIdx.y, splits = a.grid_splits, head_dim = a.head_dim;
    const float* p = a.parts + (size_t)(t * a.n_heads + h) * splits * (head_dim + 2);
    float mx = (-WRING_INF);
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, p[s * (head_dim + 2)]);
    float l = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float ms = p[s * (head_dim + 2)];
        if (ms != (-WRING_INF)) l += p[s * (head_dim + 2) + 1] * __expf(ms - mx);
    }
    const float inv_l = 1.0f / l;
    bf16_t* orow = a.out + (size_t)t * a.n_heads * head_dim + (size_t)h * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float ms = p[s * (head_dim + 2)];
            if (ms != (-WRING_INF)) acc += p[s * (head_dim + 2) + 2 + d] * __expf(ms - mx);
        }
        orow[d] = f2bf(acc * inv_l);
    }
}
