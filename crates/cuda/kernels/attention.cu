// Paged attention over a block pool laid out per layer as [block][slot][kv_head][head_dim]
// (bf16). One kernel serves prefill (any query length), decode and verify (1+K queries):
// every query token attends causally to positions 0..=its own position of its sequence,
// so queries inside a draft see the draft tokens before them and nothing after.
// Per-step metadata comes from fixed device buffers written before launch:
//   positions[t], token_seq[t], seq_bt_off[s] (offset of sequence s in block_tables).

#define ATTN_TILE 128
#define ATTN_MAX_HEAD_DIM 256

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

extern "C" __global__ void __launch_bounds__(ATTN_TILE)
paged_attention(const float* __restrict__ q, bf16_t* __restrict__ out,
                const bf16_t* __restrict__ k_pool, const bf16_t* __restrict__ v_pool,
                const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                int n_heads, int n_kv_heads, int head_dim, int block_size, float scale) {
    __shared__ float partial[ATTN_WARPS][ATTN_MAX_HEAD_DIM];
    float m, l;
    attention_head_tiles(q, k_pool, v_pool, positions, token_seq, seq_bt_off, block_tables, n_heads,
                         n_kv_heads, head_dim, block_size, scale, 0, 1, partial, &m, &l);
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    bf16_t* orow = out + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
    const float inv_l = 1.0f / l;
    for (int d = tid; d < head_dim; d += ATTN_TILE) orow[d] = f2bf(partial[0][d] * inv_l);
}

// Split-KV decode (flash-decoding): block (t, h, s) of gridDim.z = S splits takes key tiles
// s, s+S, s+2S, ... and writes its unnormalised partial [m, l, acc[head_dim]] to
// parts[(t * n_heads + h) * S + s]; `attention_combine` merges the S partials in split
// order. S is a constant of the launch (not of the batch), so a row's result depends on
// its own sequence only. A split with no tile writes m = -inf, l = 0, acc = 0.
extern "C" __global__ void __launch_bounds__(ATTN_TILE)
paged_attention_split(const float* __restrict__ q, float* __restrict__ parts,
                      const bf16_t* __restrict__ k_pool, const bf16_t* __restrict__ v_pool,
                      const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                      const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                      int n_heads, int n_kv_heads, int head_dim, int block_size, float scale) {
    __shared__ float partial[ATTN_WARPS][ATTN_MAX_HEAD_DIM];
    float m, l;
    const u32 splits = gridDim.z, s = blockIdx.z;
    attention_head_tiles(q, k_pool, v_pool, positions, token_seq, seq_bt_off, block_tables, n_heads,
                         n_kv_heads, head_dim, block_size, scale, s, splits, partial, &m, &l);
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    float* prow = parts + ((size_t)(t * n_heads + h) * splits + s) * (head_dim + 2);
    if (tid == 0) { prow[0] = m; prow[1] = l; }
    for (int d = tid; d < head_dim; d += ATTN_TILE) prow[2 + d] = partial[0][d];
}

// One block per (token, head), one thread per output dim: out = Σ_s acc_s·e^(m_s−M) / Σ_s l_s·e^(m_s−M)
// with M = max_s m_s, summed in split order (split 0 always holds position 0, so M is finite).
extern "C" __global__ void attention_combine(const float* __restrict__ parts, bf16_t* __restrict__ out,
                                             int n_heads, int head_dim, int splits) {
    const int t = blockIdx.x, h = blockIdx.y;
    const float* p = parts + (size_t)(t * n_heads + h) * splits * (head_dim + 2);
    float mx = (-WRING_INF);
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, p[s * (head_dim + 2)]);
    float l = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float ms = p[s * (head_dim + 2)];
        if (ms != (-WRING_INF)) l += p[s * (head_dim + 2) + 1] * __expf(ms - mx);
    }
    const float inv_l = 1.0f / l;
    bf16_t* orow = out + (size_t)t * n_heads * head_dim + (size_t)h * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float ms = p[s * (head_dim + 2)];
            if (ms != (-WRING_INF)) a += p[s * (head_dim + 2) + 2 + d] * __expf(ms - mx);
        }
        orow[d] = f2bf(a * inv_l);
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

// Decode and verify steps (few query tokens per sequence): one block per (sequence, KV
// head, chunk of SEQ_ROWS query rows), the rows being the sequence's query tokens × the
// query heads that share the KV head. Each K/V tile is loaded into shared memory once
// per block and serves all its rows, where `paged_attention` reads it once per (token,
// head): a verify step of 1+K tokens with G heads per KV head reads K/V (1+K)·G times
// less. A block is launched per token (grid.x = T) and only the first token of each
// sequence's run works, so no extra metadata is needed (tokens of a sequence are
// contiguous, positions ascending). Per row: the dot over head_dim in order, an online
// softmax over SEQ_TILE-key tiles from position 0 (a tile past a row's own position is an
// exact no-op for it: p = 0, correction 1), sums over the row's 8 lanes by a symmetric
// xor-shuffle tree (every lane gets the same bits). A row's result therefore depends on
// its own sequence only, never on the other rows of its block or of the batch.
// head_dim must be 64 or 128; at most SEQ_MAX_Q query tokens per sequence.
#define SEQ_TILE 64
#define SEQ_ROWS 16
#define SEQ_MAX_Q 64
#define SEQ_MAX_HEAD_DIM 128
#define SEQ_THREADS 128
#define SEQ_LANES (SEQ_THREADS / SEQ_ROWS)  // 8 threads per row
#define SEQ_KEYS_PER_LANE (SEQ_TILE / SEQ_LANES)
#define SEQ_MAX_PAIRS (SEQ_MAX_HEAD_DIM / 2 / SEQ_LANES)  // output dim pairs per thread

__device__ __forceinline__ float seq_row_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}

__device__ __forceinline__ float seq_row_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return v;
}

extern "C" __global__ void __launch_bounds__(SEQ_THREADS)
paged_attention_seq(const float* __restrict__ q, bf16_t* __restrict__ out,
                    const bf16_t* __restrict__ k_pool, const bf16_t* __restrict__ v_pool,
                    const u32* __restrict__ positions, const u32* __restrict__ token_seq,
                    const u32* __restrict__ seq_bt_off, const u32* __restrict__ block_tables,
                    int n_tokens, int n_heads, int n_kv_heads, int head_dim, int block_size,
                    float scale) {
    // Row strides padded by one 4-byte word so the 8 lanes of a row (different keys)
    // and the 4 rows of a warp hit different banks.
    __shared__ float qs[SEQ_ROWS][SEQ_MAX_HEAD_DIM + 1];
    __shared__ u32 ks[SEQ_TILE][SEQ_MAX_HEAD_DIM / 2 + 1];
    __shared__ u32 vs[SEQ_TILE][SEQ_MAX_HEAD_DIM / 2];
    __shared__ float ps[SEQ_ROWS][SEQ_TILE + 1];

    const int t0 = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const u32 seq = token_seq[t0];
    if (t0 > 0 && token_seq[t0 - 1] == seq) return;
    int nq = 1;
    while (nq < SEQ_MAX_Q && t0 + nq < n_tokens && token_seq[t0 + nq] == seq) ++nq;
    const int group = n_heads / n_kv_heads;
    const int r0 = blockIdx.z * SEQ_ROWS;
    const int nr = min(SEQ_ROWS, nq * group - r0);
    if (nr <= 0) return;

    const int kv_width = n_kv_heads * head_dim;
    const int words = head_dim / 2;  // u32 words (bf16 pairs) per K/V row
    const u32 bt_off = seq_bt_off[seq];
    for (int e = tid; e < SEQ_ROWS * head_dim; e += SEQ_THREADS) {
        const int rr = e / head_dim, d = e % head_dim;
        float v = 0.0f;
        if (rr < nr) {
            const int r = r0 + rr;
            v = q[(size_t)(t0 + r / group) * n_heads * head_dim +
                  (size_t)(kvh * group + r % group) * head_dim + d];
        }
        qs[rr][d] = v;
    }
    const int my_r = tid / SEQ_LANES, sub = tid % SEQ_LANES;
    const bool row_ok = my_r < nr;
    const u32 my_pos = row_ok ? positions[t0 + (r0 + my_r) / group] : 0;
    // Rows are ordered by token, so the chunk's last row has its largest position.
    const u32 last = positions[t0 + (r0 + nr - 1) / group];
    const int pairs = words / SEQ_LANES;  // 4 (head_dim 64) or 8 (128)
    float acc[2 * SEQ_MAX_PAIRS];
#pragma unroll
    for (int i = 0; i < 2 * SEQ_MAX_PAIRS; ++i) acc[i] = 0.0f;
    float m = (-WRING_INF), l = 0.0f;
    const int vec_per_row = head_dim / 8;  // 16-byte vectors per K/V row

    for (u32 start = 0; start <= last; start += SEQ_TILE) {
        const int n = min((u32)SEQ_TILE, last + 1 - start);
        __syncthreads();  // the previous tile's K/V/p are no longer read
        for (int e = tid; e < n * vec_per_row; e += SEQ_THREADS) {
            const int j = e / vec_per_row, c = e % vec_per_row;
            const u32 slot = kv_slot(block_tables, bt_off, start + j, block_size);
            const size_t off = (size_t)slot * kv_width + (size_t)kvh * head_dim + (size_t)c * 8;
            const uint4 kw = *(const uint4*)(k_pool + off);
            const uint4 vw = *(const uint4*)(v_pool + off);
            u32* kd = &ks[j][c * 4];
            kd[0] = kw.x; kd[1] = kw.y; kd[2] = kw.z; kd[3] = kw.w;
            u32* vd = &vs[j][c * 4];
            vd[0] = vw.x; vd[1] = vw.y; vd[2] = vw.z; vd[3] = vw.w;
        }
        __syncthreads();

        float s[SEQ_KEYS_PER_LANE];
        float tmax = (-WRING_INF);
#pragma unroll
        for (int i = 0; i < SEQ_KEYS_PER_LANE; ++i) {
            const int j = sub + SEQ_LANES * i;
            s[i] = (-WRING_INF);
            if (row_ok && j < n && start + j <= my_pos) {
                float dot = 0.0f;
                for (int w = 0; w < words; ++w) {
                    const u32 kw = ks[j][w];
                    dot += qs[my_r][2 * w] * __uint_as_float(kw << 16);
                    dot += qs[my_r][2 * w + 1] * __uint_as_float(kw & 0xffff0000u);
                }
                s[i] = dot * scale;
            }
            tmax = fmaxf(tmax, s[i]);
        }
        tmax = seq_row_max(tmax);
        // Tile 0 always holds position 0 <= every row's position, so m is finite after
        // it for a real row; padding rows (row_ok false) keep p = 0 and corr = 1.
        const float new_m = row_ok ? fmaxf(m, tmax) : 0.0f;
        float psum = 0.0f;
#pragma unroll
        for (int i = 0; i < SEQ_KEYS_PER_LANE; ++i) {
            const float p = s[i] == (-WRING_INF) ? 0.0f : __expf(s[i] - new_m);
            ps[my_r][sub + SEQ_LANES * i] = p;
            psum += p;
        }
        psum = seq_row_sum(psum);
        const float corr = (row_ok && m != (-WRING_INF)) ? __expf(m - new_m) : 1.0f;
        l = l * corr + psum;
        m = row_ok ? new_m : m;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2 * SEQ_MAX_PAIRS; ++i) acc[i] *= corr;
        for (int j = 0; j < n; ++j) {
            const float pj = ps[my_r][j];
#pragma unroll
            for (int i = 0; i < SEQ_MAX_PAIRS; ++i) {
                if (i < pairs) {
                    const u32 vw = vs[j][sub + SEQ_LANES * i];
                    acc[2 * i] += pj * __uint_as_float(vw << 16);
                    acc[2 * i + 1] += pj * __uint_as_float(vw & 0xffff0000u);
                }
            }
        }
    }
    if (!row_ok) return;
    const int r = r0 + my_r;
    u32* orow = (u32*)(out + (size_t)(t0 + r / group) * n_heads * head_dim +
                       (size_t)(kvh * group + r % group) * head_dim);
    const float inv_l = 1.0f / l;
#pragma unroll
    for (int i = 0; i < SEQ_MAX_PAIRS; ++i) {
        if (i < pairs) {
            const u32 lo = f2bf(acc[2 * i] * inv_l), hi = f2bf(acc[2 * i + 1] * inv_l);
            orow[sub + SEQ_LANES * i] = lo | (hi << 16);
        }
    }
}
