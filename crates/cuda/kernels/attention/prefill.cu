// Prefill chunks on the tensor cores (FlashAttention-2's decomposition, in mma.cu's
// transposed arithmetic): one block of PF_WARPS warps per (sequence, KV head, row chunk);
// each warp owns 8 * NT consecutive rows (r = j * G + hh, as in mma.cu) and walks every key
// tile from 0 up to its rows' positions in order, so no partials and no merge. The block
// stages K/V for all its warps in shared memory, PF_KEYS(D) keys at a time, with cp.async
// into three buffers: the copies of the next two stages run under the math of this one.
//
// Used for sequences of at least a.prefill_min_q query tokens (attention_mma skips them in
// the same step); a row's result depends only on its own position and keys (tiles of 16
// absolute positions, walked in order), never on the chunking of the prompt or the batch.
//
// Shared memory rows are one key's K (or V) head, D bf16 = D / 8 pieces of 16 bytes, with
// the pieces permuted within the row (XOR) so that the fragment reads of mma_tile's layout
// (load_tile in mma.cu) hit 8 different bank groups in each quarter warp:
//   K: lane (g, c) reads piece 4p + c of keys g and g + 8 -> piece ^ ((key & 1) << 2);
//   V: lane (g, c) reads pieces [g * D/64, +D/64) of keys 2c, 2c+1, 2c+8, 2c+9
//      -> D = 64: piece ^ (((key >> 1) & 3) << 1); D = 128: piece ^ ((key >> 1) & 1 | ((key >> 2) & 1) << 2).

#define PF_WARPS 4
// Keys per stage: 16 KB of K and V per stage whatever D; three stages (48 KB, the static
// shared memory limit).
#define PF_KEYS(D) (4096 / (D))
#define PF_BUFFERS 3

template <int D>
__device__ __forceinline__ int pf_k_piece(int key, int piece) {
    return piece ^ ((key & 1) << 2);
}

template <int D>
__device__ __forceinline__ int pf_v_piece(int key, int piece) {
    return D == 64 ? piece ^ (((key >> 1) & 3) << 1) : piece ^ (((key >> 1) & 1) | (((key >> 2) & 1) << 2));
}

// Stage `stage`'s keys of (sequence, KV head) into sm (K rows, then V rows); keys at or past
// ctx are zero-filled (masked later, and 0 * garbage could be NaN). Each thread copies the
// same piece of PASSES keys: their pool slots are looked up first, all at once, so the
// copies wait on one round of block-table reads, not one per piece.
template <int D>
__device__ __forceinline__ void pf_fill(unsigned char* sm, const AttnArgs& a, u32 bt_off, int kvh, int stage,
                                        int ctx) {
    constexpr int KEYS = PF_KEYS(D), PIECES = D / 8, ROW = D * 2;
    constexpr int KEYS_PER_PASS = PF_WARPS * 32 / PIECES, PASSES = KEYS / KEYS_PER_PASS;
    const size_t kv_width = (size_t)a.n_kv_heads * D;
    const int piece = threadIdx.x % PIECES, k0 = threadIdx.x / PIECES;
    u32 slot[PASSES];
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int pos = stage * KEYS + k0 + j * KEYS_PER_PASS;
        slot[j] = pos < ctx ? kv_slot(a.block_tables, bt_off, (u32)pos, a.block_size) : 0;
    }
    const size_t col = (size_t)kvh * D + piece * 8;
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int key = k0 + j * KEYS_PER_PASS;
        const bool ok = stage * KEYS + key < ctx;
        const size_t src = (size_t)slot[j] * kv_width + col;
        cp_async16(sm + key * ROW + pf_k_piece<D>(key, piece) * 16, a.k_pool + src, ok);
        cp_async16(sm + (KEYS + key) * ROW + pf_v_piece<D>(key, piece) * 16, a.v_pool + src, ok);
    }
}

// The fragments of 16-key tile `sub` of a staged buffer, in load_tile's layout.
template <int D>
__device__ __forceinline__ void pf_load_tile(KvTile<D>& t, const unsigned char* sm, int sub, int g, int c) {
    constexpr int KEYS = PF_KEYS(D), ROW = D * 2;
    const unsigned char* ks = sm;
    const unsigned char* vs = sm + KEYS * ROW;
    const int kg = sub * 16 + g, kg8 = kg + 8;
#pragma unroll
    for (int p = 0; p < D / 32; ++p) {
        t.ka[p] = *(const uint4*)(ks + kg * ROW + pf_k_piece<D>(kg, 4 * p + c) * 16);
        t.kb[p] = *(const uint4*)(ks + kg8 * ROW + pf_k_piece<D>(kg8, 4 * p + c) * 16);
    }
    const int vk[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int key = sub * 16 + vk[i];
#pragma unroll
        for (int u = 0; u < (D / 64 > 0 ? D / 64 : 1); ++u)
            t.v[i][u] = *(const uint4*)(vs + key * ROW + pf_v_piece<D>(key, g * (D / 64) + u) * 16);
    }
}

template <int D, int NT>
__device__ __forceinline__ void attention_prefill(const AttnArgs& a) {
    constexpr int KEYS = PF_KEYS(D), ROWS_W = 8 * NT, STAGE = 2 * KEYS * D * 2;
    __shared__ __align__(128) unsigned char sm[PF_BUFFERS * STAGE];

    const int seq = blockIdx.x, kvh = blockIdx.y;
    // Blocks with later rows walk more keys: hand those out first.
    const int chunk = gridDim.z - 1 - blockIdx.z;
    const int G = a.n_heads / a.n_kv_heads;
    const u32 q_start = a.seq_q_start[seq];
    const int q_len = (int)(a.seq_q_start[seq + 1] - q_start);
    if (q_len < a.prefill_min_q) return;
    const int rows = q_len * G;
    const int block_row0 = chunk * PF_WARPS * ROWS_W;
    if (block_row0 >= rows) return;
    const int ctx = (int)a.positions[q_start + q_len - 1] + 1;
    const u32 bt_off = a.seq_bt_off[seq];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int width = a.n_heads * D;
    const int row0 = block_row0 + warp * ROWS_W;

    // This lane's Q^T B fragments (mma.cu's dim permutation: k-steps 2p, 2p + 1 are the
    // words (x, y), (z, w) of dims 32p + 8c .. + 7 of row g), and the causal limits of its
    // rows 2c, 2c + 1 of each row tile (-1 past the sequence).
    uint4 qf[NT][D / 32];
    int lim[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int row = row0 + nt * 8 + g;
#pragma unroll
        for (int p = 0; p < D / 32; ++p) {
            if (row < rows) {
                const float* src = a.q + (size_t)(q_start + row / G) * width + (size_t)(kvh * G + row % G) * D + 32 * p + 8 * c;
                const float4 u = *(const float4*)src, v = *(const float4*)(src + 4);
                qf[nt][p] = make_uint4(pack_bf16x2(u.x, u.y), pack_bf16x2(u.z, u.w),
                                       pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
            } else {
                qf[nt][p] = make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const int r = row0 + nt * 8 + 2 * c + f;
            lim[nt][f] = r < rows ? (int)a.positions[q_start + r / G] : -1;
        }
    }
    const int warp_last = min(rows, row0 + ROWS_W) - 1;
    const int warp_lim = warp_last >= row0 ? (int)a.positions[q_start + warp_last / G] : -1;
    const int block_last = min(rows, block_row0 + PF_WARPS * ROWS_W) - 1;
    const int block_lim = (int)a.positions[q_start + block_last / G];
    const int stages = block_lim / KEYS + 1;

    float o[D / 16][NT][4];
    float m[NT][2], l[NT][2];
    mma_state_init<D, NT>(o, m, l);
    const auto qb = [&](int nt, int k) {
        const uint4& v = qf[nt][k / 2];
        return (k & 1) ? make_uint2(v.z, v.w) : make_uint2(v.x, v.y);
    };

    // Three buffers: stages s + 1 and s + 2 are in flight while stage s is used.
    pf_fill<D>(sm, a, bt_off, kvh, 0, ctx);
    cp_async_commit();
    if (stages > 1) pf_fill<D>(sm + STAGE, a, bt_off, kvh, 1, ctx);
    cp_async_commit();
    for (int s = 0; s < stages; ++s) {
        if (s + 2 < stages) pf_fill<D>(sm + ((s + 2) % PF_BUFFERS) * STAGE, a, bt_off, kvh, s + 2, ctx);
        cp_async_commit();  // empty groups past the end keep the count uniform
        cp_async_wait<2>();
        __syncthreads();
        const unsigned char* buf = sm + (s % PF_BUFFERS) * STAGE;
        for (int sub = 0; sub < KEYS / 16; ++sub) {
            const int tile = s * (KEYS / 16) + sub;
            if (tile * 16 > warp_lim) break;
            KvTile<D> kv;
            pf_load_tile<D>(kv, buf, sub, g, c);
            mma_tile<D, NT>(kv, qb, tile, g, a.scale_log2, lim, o, m, l);
        }
        __syncthreads();  // this buffer is refilled next iteration
    }

    // Normalise and store: lane (g, c) holds dims [g * D/8, +D/8) of rows 2c, 2c + 1.
    mma_row_sums<NT>(l, c);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const int row = row0 + nt * 8 + 2 * c + f;
            if (row >= rows) continue;
            const float inv = 1.0f / l[nt][f];
            u32 w[D / 16];
#pragma unroll
            for (int mt = 0; mt < D / 16; ++mt) w[mt] = pack_bf16x2(o[mt][nt][f] * inv, o[mt][nt][2 + f] * inv);
            bf16_t* dst = a.out + (size_t)(q_start + row / G) * width + (size_t)(kvh * G + row % G) * D + g * (D / 8);
#pragma unroll
            for (int i = 0; i < D / 16; i += 4) *(uint4*)(dst + 2 * i) = make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]);
        }
}

// One entry point per (head_dim, row tiles per warp) the host may pick (PREFILL_ROW_TILES
// in crates/cuda/src/params.rs). head_dim 64 compiles too (pf_v_piece has its layout) but
// measured slower than attention_mma for the 135M shape (session 10), so it is not built.
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32) attention_prefill_d128_n1(AttnArgs a) { pdl_entry(); attention_prefill<128, 1>(a); }
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32) attention_prefill_d128_n2(AttnArgs a) { pdl_entry(); attention_prefill<128, 2>(a); }
