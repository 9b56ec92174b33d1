// Paged attention over a block pool laid out per layer as [block][slot][kv_head][head_dim]
// (bf16). One kernel serves prefill (any query length), decode and verify (1+K queries):
// every query token attends causally to positions 0..=its own position of its sequence,
// so queries inside a draft see the draft tokens before them and nothing after.
// Per-step metadata comes from fixed device buffers written before launch:
//   positions[t], token_seq[t], seq_bt_off[s] (offset of sequence s in block_tables).

#define ATTN_TILE 128
#define ATTN_MAX_HEAD_DIM 256

__device__ __forceinline__ u32 kv_slot(const u32* block_tables, u32 bt_off, u32 pos, int block_size) {
    return block_tables[bt_off + pos / block_size] * block_size + pos % block_size;
}

// Writes this step's K and V rows (f32) into the pool as bf16; one block per token.
extern "C" __global__ void kv_store(const float* __restrict__ k, const float* __restrict__ v,
                                    bf16_t* __restrict__ k_pool, bf16_t* __restrict__ v_pool,
                                    const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                                    const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                                    int kv_width, int block_size) {
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
extern "C" __global__ void __launch_bounds__(ATTN_TILE)
paged_attention(const float* __restrict__ q, bf16_t* __restrict__ out,
                const bf16_t* __restrict__ k_pool, const bf16_t* __restrict__ v_pool,
                const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                int n_heads, int n_kv_heads, int head_dim, int block_size, float scale) {
    __shared__ float qs[ATTN_MAX_HEAD_DIM];
    __shared__ float probs[ATTN_TILE];
    __shared__ u32 slots[ATTN_TILE];
    __shared__ float scratch[32];
    __shared__ float partial[ATTN_WARPS][ATTN_MAX_HEAD_DIM];

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
    for (u32 start = 0; start <= last; start += ATTN_TILE) {
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
    bf16_t* orow = out + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
    const float inv_l = 1.0f / l;
    for (int d = tid; d < head_dim; d += ATTN_TILE) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; ++w) s += partial[w][d];
        orow[d] = f2bf(s * inv_l);
    }
}

// GQA variant: one block per (query token, KV head) serving all `group` query heads
// that share the KV head, so each K and V row is read once instead of `group` times.
// Same arithmetic per head as `paged_attention` (same tiles, same order): results are
// identical to it. Requires group * head_dim / 32 <= ATTN_GQA_MAX_ACC.
#define ATTN_GQA_MAX_GROUP 8
#define ATTN_GQA_MAX_ACC 32
extern "C" __global__ void __launch_bounds__(ATTN_TILE)
paged_attention_gqa(const float* __restrict__ q, bf16_t* __restrict__ out,
                    const bf16_t* __restrict__ k_pool, const bf16_t* __restrict__ v_pool,
                    const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                    const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                    int n_heads, int n_kv_heads, int head_dim, int block_size, float scale) {
    __shared__ float qs[ATTN_GQA_MAX_ACC * 32];
    __shared__ float probs[ATTN_GQA_MAX_GROUP][ATTN_TILE];
    __shared__ u32 slots[ATTN_TILE];
    __shared__ float scratch[32];
    __shared__ float partial[ATTN_WARPS][ATTN_GQA_MAX_ACC * 32];

    const int t = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int group = n_heads / n_kv_heads;
    const int h0 = kvh * group;
    const int kv_width = n_kv_heads * head_dim;
    const int dpl = head_dim / 32;
    const u32 last = positions[t];
    const u32 bt_off = seq_bt_off[token_seq[t]];
    const float* qrow = q + (size_t)t * n_heads * head_dim + (size_t)h0 * head_dim;
    for (int d = tid; d < group * head_dim; d += ATTN_TILE) qs[d] = qrow[d];
    __syncthreads();

    float acc[ATTN_GQA_MAX_ACC];
#pragma unroll
    for (int i = 0; i < ATTN_GQA_MAX_ACC; ++i) acc[i] = 0.0f;
    float m[ATTN_GQA_MAX_GROUP], l[ATTN_GQA_MAX_GROUP];
#pragma unroll
    for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g) { m[g] = (-WRING_INF); l[g] = 0.0f; }
    const size_t head_off = (size_t)kvh * head_dim + (size_t)lane * dpl;
    for (u32 start = 0; start <= last; start += ATTN_TILE) {
        const u32 pos = start + tid;
        float dot[ATTN_GQA_MAX_GROUP];
#pragma unroll
        for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g) dot[g] = 0.0f;
        if (pos <= last) {
            const u32 slot = kv_slot(block_tables, bt_off, pos, block_size);
            slots[tid] = slot;
            const uint4* kr = (const uint4*)(k_pool + (size_t)slot * kv_width + (size_t)kvh * head_dim);
#pragma unroll 4
            for (int c = 0; c < head_dim / 8; ++c) {
                const uint4 w = kr[c];
                const u32 ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g) {
                    if (g < group) {
                        const float* qg = qs + g * head_dim + c * 8;
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            dot[g] += qg[2 * j] * __uint_as_float(ws[j] << 16);
                            dot[g] += qg[2 * j + 1] * __uint_as_float(ws[j] & 0xffff0000u);
                        }
                    }
                }
            }
        }
        float corr[ATTN_GQA_MAX_GROUP];
#pragma unroll
        for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g) {
            if (g < group) {
                const float score = pos <= last ? dot[g] * scale : (-WRING_INF);
                const float new_m = fmaxf(m[g], block_max(score, scratch));
                const float p = pos <= last ? __expf(score - new_m) : 0.0f;
                probs[g][tid] = p;
                const float tile_sum = block_sum(p, scratch);
                corr[g] = __expf(m[g] - new_m);
                l[g] = l[g] * corr[g] + tile_sum;
                m[g] = new_m;
            }
        }
        __syncthreads();
        const int n = min((u32)ATTN_TILE, last + 1 - start);
#pragma unroll
        for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g)
#pragma unroll
            for (int i = 0; i < ATTN_MAX_DPL; ++i)
                if (g < group && i < dpl && g * dpl + i < ATTN_GQA_MAX_ACC) acc[g * dpl + i] *= corr[g];
#pragma unroll 4
        for (int j = warp; j < n; j += ATTN_WARPS) {
            const u32* vr = (const u32*)(v_pool + (size_t)slots[j] * kv_width + head_off);
            float v[ATTN_MAX_DPL];
#pragma unroll
            for (int i = 0; i < ATTN_MAX_DPL / 2; ++i) {
                if (2 * i < dpl) {
                    const u32 w = vr[i];
                    v[2 * i] = __uint_as_float(w << 16);
                    v[2 * i + 1] = __uint_as_float(w & 0xffff0000u);
                }
            }
#pragma unroll
            for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g) {
                if (g < group) {
                    const float pj = probs[g][j];
#pragma unroll
                    for (int i = 0; i < ATTN_MAX_DPL; ++i)
                        if (i < dpl && g * dpl + i < ATTN_GQA_MAX_ACC) acc[g * dpl + i] += pj * v[i];
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g)
#pragma unroll
        for (int i = 0; i < ATTN_MAX_DPL; ++i)
            if (g < group && i < dpl && g * dpl + i < ATTN_GQA_MAX_ACC)
                partial[warp][g * head_dim + lane * dpl + i] = acc[g * dpl + i];
    __shared__ float inv_l[ATTN_GQA_MAX_GROUP];
#pragma unroll
    for (int g = 0; g < ATTN_GQA_MAX_GROUP; ++g)
        if (tid == g && g < group) inv_l[g] = 1.0f / l[g];
    __syncthreads();
    bf16_t* orow = out + (size_t)t * n_heads * head_dim + (size_t)h0 * head_dim;
    for (int e = tid; e < group * head_dim; e += ATTN_TILE) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; ++w) s += partial[w][e];
        orow[e] = f2bf(s * inv_l[e / head_dim]);
    }
}
