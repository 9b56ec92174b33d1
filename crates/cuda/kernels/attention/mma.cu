// Paged attention on the tensor cores, for every step shape (decode: 1 query per
// sequence, verify: 1 + K, prefill chunks: many); requires block_size % 16 == 0 and
// head_dim 64 or 128 (the kernel's D; a.head_dim is ignored). Partials: a.parts is
// [part_tokens][n_heads][MMA_MAX_SPLITS][D + 2] f32 (indexed by the row's token and head),
// a.counters [n_kv][part_tokens * G] (indexed by a row chunk's first row in the step).
//
// Work split. One block (4 warps) per (sequence, KV head, row chunk, key split). The rows
// of (sequence, KV head) are r = j * G + hh for query token j and grouped head hh (G query
// heads share the KV head), so each K/V tile is loaded once for every query token and every
// head of the group. A row chunk holds 8 * NT rows. The sequence's keys are cut into
// `splits` contiguous ranges of 16-key tiles (a function of its own query length and
// context only, never of the batch or of the row chunks); inside a split warp w takes tiles
// w, w + 4, ... The partials of the four warps are merged in warp order, and those of the
// splits (in split order) by whichever block of the row chunk finishes last (a counter,
// reset by that block), so a row's result depends on its own sequence and nothing else. A
// chunk computes only the splits its rows reach (causal); the splits it skips would
// contribute exact zeros to its rows, so skipping them changes no bit.
//
// Where splits fall (keys per split per query token, a.split_keys_per_q; prefill chunks
// a.prefill_split_keys, 0 = unsplit) and how many blocks take a (sequence, KV head, chunk)'s
// splits (a.grid_splits: a block runs splits split0, split0 + grid_splits, ...) come from
// the host (WRING_CUDA_MMA_SPLITS). Giving every split its own block and splitting prefill
// chunks measured no faster (prefill slower; results/2026-12-02-attention-splits): the time is in
// how fast a block walks its keys, not in how the keys are spread.
//
// Arithmetic, transposed so that the rows are the mma's N dimension (8 rows a tile: a
// decode step of a GQA-4 model wastes half a tile, not three quarters):
//   S^T[key][row] = K[key][:] . Q[row][:]     (A = K tile 16 keys x 16 dims, B = Q^T)
//   O^T[dim][row] += V^T[dim][key] . P^T[key][row]   (A = V^T, B = P^T)
// The head dims are permuted inside each mma (a sum over d does not care about order, an
// output dim only has to be written back where it belongs) so that every thread reads K, V
// and Q with 16-byte loads straight from global memory: no shared-memory staging of K/V.
//   QK: k-step pair p covers dims [32p, 32p + 32); lane (g, c) loads dims 32p + 8c .. + 7 of
//       key g (and g + 8) and of query row g; its A/B registers for k-steps 2p, 2p + 1 are
//       the words (x, y) and (z, w) of those 16 bytes.
//   PV: m-tile mt holds dims d(mt, g) = g * D/8 + 2mt and d(mt, g + 8) = g * D/8 + 2mt + 1,
//       so lane (g, c) reads dims [g * D/8, (g + 1) * D/8) of its keys 2c, 2c+1, 2c+8, 2c+9
//       and pairs keys with a byte permute; its outputs are the same contiguous dims.
// P^T leaves the QK accumulators in the layout of a C fragment (key g, rows 2c, 2c + 1);
// `movmatrix.trans` turns it into the B fragment of the PV product.
// Softmax in base 2 (scale * log2 e folded into the scores), running max per row.

#define MMA_WARPS 4
#define MMA_MAX_SPLITS 8
// Sequences of at most this many query tokens (decode, verify) split their keys per query
// token (a.split_keys_per_q); longer ones (prefill chunks) by a.prefill_split_keys.
#define MMA_SPLIT_MAX_Q 16

__device__ __forceinline__ u32 movmatrix_trans(u32 x) {
    u32 r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
    return r;
}

// K/V tile loads: the read-only path, except in persistent.cu's kernel, where the pools are
// written (this step's K/V) earlier in the same launch and must be read through L2.
__device__ __forceinline__ uint4 ld_nc_v4(const void* p) {
    uint4 r;
#ifdef WRING_PERSISTENT
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#else
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#endif
    return r;
}

// How a warp gets its K/V tiles: SERIAL loads each tile into registers and waits for it;
// PREFETCH loads the next tile into registers while computing this one (twice the tile's
// registers); STAGED copies its next MMA_STAGES(D) - 1 tiles with cp.async into its own ring
// in dynamic shared memory (no registers held, no block barrier in the loop), reads each
// tile's fragments from there, and merges the warps through the ring after one barrier
// (WRING_CUDA_ATTENTION=mma-staged; results/2026-12-02-flash-prefill, graph replay: faster than the register paths
// at batch 1 and 32 x 13, slower at 32 x 1 for both models: not the default).
#define MMA_SERIAL 0
#define MMA_PREFETCH 1
#define MMA_STAGED 2
// Tiles in a warp's ring: 64 KB a block either way (three blocks an SM).
#define MMA_STAGES(D) ((D) == 128 ? 2 : 4)
// Bytes of one staged 16-key tile: K rows then V rows, D bf16 each.
#define MMA_TILE_BYTES(D) (64 * (D))

// Splits of a sequence's keys: one per a.split_keys_per_q * q_len keys (decode, verify) or
// per a.prefill_split_keys keys (prefill chunks), at most MMA_MAX_SPLITS; 1 for sequences
// past the partials' capacity (token q_end).
__device__ __forceinline__ int mma_splits(const AttnArgs& a, int q_len, int ctx, int q_end) {
    if (q_end > a.part_tokens) return 1;
    const int per = q_len <= MMA_SPLIT_MAX_Q ? a.split_keys_per_q * q_len : a.prefill_split_keys;
    if (per <= 0) return 1;
    return min(MMA_MAX_SPLITS, max(1, (ctx + per - 1) / per));
}

// K/V of one 16-key tile as this lane needs them.
template <int D>
struct KvTile {
    uint4 ka[D / 32];  // key g: dims 32p + 8c .. + 7
    uint4 kb[D / 32];  // key g + 8
    uint4 v[4][D / 64 > 0 ? D / 64 : 1];  // keys 2c, 2c+1, 2c+8, 2c+9: dims [g*D/8, +D/8)
};

template <int D>
__device__ __forceinline__ void load_tile(KvTile<D>& t, const bf16_t* __restrict__ k_pool,
                                          const bf16_t* __restrict__ v_pool, const u32* __restrict__ block_tables,
                                          u32 bt_off, int block_size, int kv_width, int kvh, int tile, int ctx,
                                          int g, int c) {
    const int key0 = tile * 16;
    // A tile never crosses a pool block (block_size % 16 == 0).
    const u32 slot0 = block_tables[bt_off + key0 / block_size] * block_size + key0 % block_size;
    const size_t head = (size_t)kvh * D;
    const bf16_t* kbase = k_pool + (size_t)slot0 * kv_width + head;
    const bf16_t* vbase = v_pool + (size_t)slot0 * kv_width + head;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // Keys past the context are not in the pool: zeros (masked below, and 0 * garbage
    // could be NaN).
    const bool okg = key0 + g < ctx, okg8 = key0 + g + 8 < ctx;
#pragma unroll
    for (int p = 0; p < D / 32; ++p) {
        t.ka[p] = okg ? ld_nc_v4(kbase + (size_t)g * kv_width + 32 * p + 8 * c) : zero;
        t.kb[p] = okg8 ? ld_nc_v4(kbase + (size_t)(g + 8) * kv_width + 32 * p + 8 * c) : zero;
    }
    const int vk[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const bool ok = key0 + vk[i] < ctx;
        const bf16_t* vr = vbase + (size_t)vk[i] * kv_width + g * (D / 8);
#pragma unroll
        for (int u = 0; u < (D / 64 > 0 ? D / 64 : 1); ++u) t.v[i][u] = ok ? ld_nc_v4(vr + 8 * u) : zero;
    }
}

// One 16-key tile of (sequence, KV head) staged by a warp with cp.async, each lane copying
// exactly the 16-byte pieces load_tile would give it (D / 8 of them), so a lane only ever
// reads what it copied itself: no other lane's copies to wait for, no __syncwarp. Piece j of
// lane L sits at (j * 32 + L) * 16, so the 32 lanes' reads of one piece are one contiguous
// 512-byte row (no bank conflicts). Keys at or past ctx are zero-filled (masked later, and
// 0 * garbage could be NaN).
template <int D>
__device__ __forceinline__ void stage_own_tile(unsigned char* dst, const AttnArgs& a, u32 bt_off, int kvh,
                                               int tile, int ctx, int g, int c, int lane) {
    constexpr int KP = D / 32, VU = D / 64 > 0 ? D / 64 : 1;
    const int key0 = tile * 16;
    // A tile never crosses a pool block (block_size % 16 == 0).
    const u32 slot0 = a.block_tables[bt_off + key0 / a.block_size] * a.block_size + key0 % a.block_size;
    const size_t kv_width = (size_t)a.n_kv_heads * D;
    const size_t head = (size_t)slot0 * kv_width + (size_t)kvh * D;
    const auto put = [&](int j, const bf16_t* src, bool ok) { cp_async16(dst + (j * 32 + lane) * 16, src, ok); };
#pragma unroll
    for (int p = 0; p < KP; ++p) {
        put(p, a.k_pool + head + (size_t)g * kv_width + 32 * p + 8 * c, key0 + g < ctx);
        put(KP + p, a.k_pool + head + (size_t)(g + 8) * kv_width + 32 * p + 8 * c, key0 + g + 8 < ctx);
    }
    const int vk[4] = {2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int u = 0; u < VU; ++u)
            put(2 * KP + i * VU + u, a.v_pool + head + (size_t)vk[i] * kv_width + g * (D / 8) + 8 * u,
                key0 + vk[i] < ctx);
}

// The fragments stage_own_tile copied for this lane, in load_tile's layout.
template <int D>
__device__ __forceinline__ void own_load_tile(KvTile<D>& t, const unsigned char* src, int lane) {
    constexpr int KP = D / 32, VU = D / 64 > 0 ? D / 64 : 1;
    const auto get = [&](int j) { return *(const uint4*)(src + (j * 32 + lane) * 16); };
#pragma unroll
    for (int p = 0; p < KP; ++p) {
        t.ka[p] = get(p);
        t.kb[p] = get(KP + p);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int u = 0; u < VU; ++u) t.v[i][u] = get(2 * KP + i * VU + u);
}

__device__ __forceinline__ u32 word_of(const uint4& v, int w) {
    return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// One 16-key tile applied to NT row tiles: S^T = K . Q^T, the causal mask (key <= lim),
// the online softmax update of (m, l, o) and O^T += V^T . P^T. `qb(nt, k)` is the Q^T B
// fragment of row tile nt for k-step k.
template <int D, int NT, class QFrag>
__device__ __forceinline__ void mma_tile(const KvTile<D>& kv, QFrag qb, int tile, int g, float scale_log2,
                                         const int (&lim)[NT][2], float (&o)[D / 16][NT][4], float (&m)[NT][2],
                                         float (&l)[NT][2]) {
    // S^T = K . Q^T
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nt][i] = 0.0f;
#pragma unroll
    for (int p = 0; p < D / 32; ++p) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const u32 a0 = e ? kv.ka[p].z : kv.ka[p].x;
            const u32 a1 = e ? kv.kb[p].z : kv.kb[p].x;
            const u32 a2 = e ? kv.ka[p].w : kv.ka[p].y;
            const u32 a3 = e ? kv.kb[p].w : kv.kb[p].y;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint2 b = qb(nt, 2 * p + e);
                mma_16816(s[nt], a0, a1, a2, a3, b.x, b.y);
            }
        }
    }
    // Mask, online softmax, P^T as B fragments.
    const int key_g = tile * 16 + g, key_g8 = key_g + 8;
    u32 pb[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        float p0[2], p1[2];
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const float v0 = key_g <= lim[nt][f] ? s[nt][f] * scale_log2 : -WRING_INF;
            const float v1 = key_g8 <= lim[nt][f] ? s[nt][2 + f] * scale_log2 : -WRING_INF;
            float mx = fmaxf(v0, v1);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            const float m_new = fmaxf(m[nt][f], mx);
            const float m_use = m_new == -WRING_INF ? 0.0f : m_new;
            const float corr = exp2f(m[nt][f] - m_use);
            p0[f] = exp2f(v0 - m_use);
            p1[f] = exp2f(v1 - m_use);
            l[nt][f] = l[nt][f] * corr + (p0[f] + p1[f]);
            m[nt][f] = m_new;
#pragma unroll
            for (int mt = 0; mt < D / 16; ++mt) {
                o[mt][nt][f] *= corr;
                o[mt][nt][2 + f] *= corr;
            }
        }
        pb[nt][0] = movmatrix_trans(pack_bf16x2(p0[0], p0[1]));
        pb[nt][1] = movmatrix_trans(pack_bf16x2(p1[0], p1[1]));
    }
    // O^T += V^T . P^T
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
        const u32 w0 = word_of(kv.v[0][mt / 4], mt % 4), w1 = word_of(kv.v[1][mt / 4], mt % 4);
        const u32 w2 = word_of(kv.v[2][mt / 4], mt % 4), w3 = word_of(kv.v[3][mt / 4], mt % 4);
        const u32 a0 = __byte_perm(w0, w1, 0x5410), a1 = __byte_perm(w0, w1, 0x7632);
        const u32 a2 = __byte_perm(w2, w3, 0x5410), a3 = __byte_perm(w2, w3, 0x7632);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma_16816(o[mt][nt], a0, a1, a2, a3, pb[nt][0], pb[nt][1]);
    }
}

template <int D, int NT>
__device__ __forceinline__ void mma_state_init(float (&o)[D / 16][NT][4], float (&m)[NT][2], float (&l)[NT][2]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int f = 0; f < 2; ++f) { m[nt][f] = -WRING_INF; l[nt][f] = 0.0f; }
#pragma unroll
        for (int mt = 0; mt < D / 16; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[mt][nt][i] = 0.0f;
    }
}

// Row sums of a warp's softmax: each lane holds its part of rows 2c, 2c + 1 of every row
// tile; sum over the 8 lanes that share c, broadcast from g = 0 so every lane uses the same
// value.
template <int NT>
__device__ __forceinline__ void mma_row_sums(float (&l)[NT][2], int c) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            float v = l[nt][f];
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            l[nt][f] = __shfl_sync(0xffffffffu, v, c);
        }
}

// This warp's output rows, rescaled by `mine`, into base[row][D] (lane (g, c) holds dims
// [g * D/8, +D/8) of rows 2c, 2c + 1 of each row tile): stored, or with `add` added.
template <int D, int NT>
__device__ __forceinline__ void put_warp_output(float* base, const float (&o)[D / 16][NT][4],
                                                const float (&mine)[NT][2], int g, int c, bool add) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const int row = nt * 8 + 2 * c + f;
            float* dst = base + row * D + g * (D / 8);
#pragma unroll
            for (int mt = 0; mt < D / 16; ++mt) {
                const float x0 = o[mt][nt][f] * mine[nt][f], x1 = o[mt][nt][2 + f] * mine[nt][f];
                if (add) {
                    dst[2 * mt] += x0;
                    dst[2 * mt + 1] += x1;
                } else {
                    dst[2 * mt] = x0;
                    dst[2 * mt + 1] = x1;
                }
            }
        }
}

// One split of one row chunk: this warp's tiles, then the four warps merged in shared
// memory. Leaves, for each row of the chunk, max m (base 2), sum l and the unnormalised
// output in sm_o[row][D] (valid after the final __syncthreads; STAGED: sm_o is the ring).
template <int D, int NT, int MODE>
__device__ __forceinline__ void mma_split(const AttnArgs& a, const u32* __restrict__ qfrag_s, int kvh,
                                          u32 bt_off, int ctx, int tile_begin, int tile_end,
                                          const int (&lim)[NT][2], float* sm_m, float* sm_l, float* sm_o,
                                          unsigned char* ring) {
    constexpr int ROWS = 8 * NT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int kv_width = a.n_kv_heads * D;

    float o[D / 16][NT][4];
    float m[NT][2], l[NT][2];
    mma_state_init<D, NT>(o, m, l);

    // Q^T B fragments, stored lane-major.
    const auto qb = [&](int nt, int k) {
        return *(const uint2*)(qfrag_s + (((nt * (D / 16) + k) * 32 + lane) * 2));
    };
    if (MODE == MMA_STAGED) {
        // Tiles tile, tile + 4, ... of this warp through its ring of S tiles: S - 1 copies
        // in flight while one tile is computed. Each lane reads only what it copied
        // (stage_own_tile), so its own cp.async.wait_group is all the synchronisation; a
        // slot is refilled one iteration after its reads, whose values the mma consumed.
        constexpr int S = MMA_STAGES(D), TB = MMA_TILE_BYTES(D);
        unsigned char* my_ring = ring + warp * S * TB;
        int tile = tile_begin + warp;
#pragma unroll
        for (int i = 0; i < S - 1; ++i) {
            const int t = tile + i * MMA_WARPS;
            if (t < tile_end) stage_own_tile<D>(my_ring + i * TB, a, bt_off, kvh, t, ctx, g, c, lane);
            cp_async_commit();
        }
        for (int slot = 0; tile < tile_end; tile += MMA_WARPS, slot = slot + 1 == S ? 0 : slot + 1) {
            const int ahead = tile + (S - 1) * MMA_WARPS;
            const int fill = slot == 0 ? S - 1 : slot - 1;  // the slot read last iteration
            if (ahead < tile_end) stage_own_tile<D>(my_ring + fill * TB, a, bt_off, kvh, ahead, ctx, g, c, lane);
            cp_async_commit();  // empty groups past the end keep the count uniform
            cp_async_wait<S - 1>();
            KvTile<D> kv;
            own_load_tile<D>(kv, my_ring + slot * TB, lane);
            mma_tile<D, NT>(kv, qb, tile, g, a.scale_log2, lim, o, m, l);
        }
        cp_async_wait<0>();
    } else if (MODE == MMA_PREFETCH) {
        // The warp's next tile is loaded (registers) while this one is computed: the loads'
        // latency is hidden instead of paid once per tile. Same arithmetic, same order.
        KvTile<D> next;
        int tile = tile_begin + warp;
        if (tile < tile_end)
            load_tile<D>(next, a.k_pool, a.v_pool, a.block_tables, bt_off, a.block_size, kv_width, kvh, tile, ctx, g, c);
        for (; tile < tile_end; tile += MMA_WARPS) {
            const KvTile<D> kv = next;
            if (tile + MMA_WARPS < tile_end)
                load_tile<D>(next, a.k_pool, a.v_pool, a.block_tables, bt_off, a.block_size, kv_width, kvh,
                             tile + MMA_WARPS, ctx, g, c);
            mma_tile<D, NT>(kv, qb, tile, g, a.scale_log2, lim, o, m, l);
        }
    } else {
        for (int tile = tile_begin + warp; tile < tile_end; tile += MMA_WARPS) {
            KvTile<D> kv;
            load_tile<D>(kv, a.k_pool, a.v_pool, a.block_tables, bt_off, a.block_size, kv_width, kvh, tile, ctx, g, c);
            mma_tile<D, NT>(kv, qb, tile, g, a.scale_log2, lim, o, m, l);
        }
    }

    mma_row_sums<NT>(l, c);
    // Merge the warps in warp order.
    if (g == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int f = 0; f < 2; ++f) {
                const int row = nt * 8 + 2 * c + f;
                sm_m[warp * ROWS + row] = m[nt][f];
                sm_l[warp * ROWS + row] = l[nt][f];
            }
    }
    __syncthreads();
    float mine[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const int row = nt * 8 + 2 * c + f;
            float mx = -WRING_INF;
#pragma unroll
            for (int w = 0; w < MMA_WARPS; ++w) mx = fmaxf(mx, sm_m[w * ROWS + row]);
            const float m_use = mx == -WRING_INF ? 0.0f : mx;
            mine[nt][f] = exp2f(m[nt][f] - m_use);
        }
    if (MODE == MMA_STAGED) {
        // Every warp's rescaled output in its own slice of the (now idle) ring, one
        // barrier, then each (row, dim) summed in warp order by one thread, into slice 0.
        put_warp_output<D, NT>((float*)ring + warp * ROWS * D, o, mine, g, c, false);
        __syncthreads();
        float* all = (float*)ring;
        for (int idx = threadIdx.x; idx < ROWS * D; idx += blockDim.x) {
            float x = all[idx];
#pragma unroll
            for (int w = 1; w < MMA_WARPS; ++w) x += all[w * ROWS * D + idx];
            all[idx] = x;
        }
    } else {
        for (int w = 0; w < MMA_WARPS; ++w) {
            if (warp == w) put_warp_output<D, NT>(sm_o, o, mine, g, c, w > 0);
            __syncthreads();
        }
    }
    // Row max and sum of the block (in warp order) for the caller.
    if (threadIdx.x < ROWS) {
        const int row = threadIdx.x;
        float mx = -WRING_INF;
        for (int w = 0; w < MMA_WARPS; ++w) mx = fmaxf(mx, sm_m[w * ROWS + row]);
        const float m_use = mx == -WRING_INF ? 0.0f : mx;
        float sum = 0.0f;
        for (int w = 0; w < MMA_WARPS; ++w) sum += sm_l[w * ROWS + row] * exp2f(sm_m[w * ROWS + row] - m_use);
        sm_m[MMA_WARPS * ROWS + row] = mx;
        sm_l[MMA_WARPS * ROWS + row] = sum;
    }
    __syncthreads();
}

// Block (seq, kvh, z) of the launch (grid: sequences, KV heads, row chunks x splits);
// persistent.cu's kernel calls it with blocks of its own.
template <int D, int NT, int MODE>
__device__ __forceinline__ void attention_mma(const AttnArgs& a, int seq, int kvh, int z) {
    constexpr int ROWS = 8 * NT;
    __shared__ __align__(16) u32 qfrag_s[NT * (D / 16) * 32 * 2];
    __shared__ float sm_m[(MMA_WARPS + 1) * ROWS];
    __shared__ float sm_l[(MMA_WARPS + 1) * ROWS];
    // STAGED: the warps' rings (MMA_WARPS * MMA_STAGES(D) * MMA_TILE_BYTES(D) bytes of
    // dynamic shared memory, set by the host), which also hold the merged output.
    extern __shared__ __align__(128) unsigned char mma_ring[];
    __shared__ __align__(16) float sm_o_regs[MODE == MMA_STAGED ? 4 : ROWS * D];
    float* sm_o = MODE == MMA_STAGED ? (float*)mma_ring : sm_o_regs;
    __shared__ int last_block;

    const int chunk = z / a.grid_splits, split0 = z % a.grid_splits;
    const int G = a.n_heads / a.n_kv_heads;
    const u32 q_start = a.seq_q_start[seq];
    const int q_len = (int)(a.seq_q_start[seq + 1] - q_start);
    // Sequences the prefill kernel (flash.cu) takes in this launch's step.
    if (q_len <= 0 || (a.prefill_min_q > 0 && q_len >= a.prefill_min_q)) return;
    const int rows = q_len * G;
    const int row0 = chunk * ROWS;
    if (row0 >= rows) return;
    const int ctx = (int)a.positions[q_start + q_len - 1] + 1;
    const u32 bt_off = a.seq_bt_off[seq];
    const int splits = mma_splits(a, q_len, ctx, (int)q_start + q_len);
    // Keys 0..max_lim: the chunk's last row's position.
    const int max_lim = (int)a.positions[q_start + (min(rows, row0 + ROWS) - 1) / G];
    const int ctx_tiles = (ctx + 15) / 16;
    const int need_tiles = (max_lim + 16) / 16;  // tiles holding keys 0..max_lim
    const int per_split = (ctx_tiles + splits - 1) / splits;
    // Splits this chunk's rows reach; the rest would add exact zeros.
    const int active = (need_tiles + per_split - 1) / per_split;
    if (split0 >= active) return;
    const int c = threadIdx.x & 3;
    const int width = a.n_heads * D;

    // Q^T B fragments of the chunk's rows (bf16, zero for rows past the sequence), laid out
    // [row tile][k-step][lane][2 words] so each lane reads 8 contiguous bytes per mma.
    for (int idx = threadIdx.x; idx < NT * (D / 32) * 32; idx += blockDim.x) {
        const int ln = idx % 32, p = (idx / 32) % (D / 32), nt = idx / (32 * (D / 32));
        const int rg = ln >> 2, rc = ln & 3;
        const int row = row0 + nt * 8 + rg;
        float x[8];
        if (row < rows) {
            const int j = row / G, hh = row % G;
            const float* src = a.q + (size_t)(q_start + j) * width + (size_t)(kvh * G + hh) * D + 32 * p + 8 * rc;
            const float4 u = *(const float4*)src, v = *(const float4*)(src + 4);
            x[0] = u.x; x[1] = u.y; x[2] = u.z; x[3] = u.w; x[4] = v.x; x[5] = v.y; x[6] = v.z; x[7] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) x[i] = 0.0f;
        }
        u32* dst0 = qfrag_s + ((nt * (D / 16) + 2 * p) * 32 + ln) * 2;
        u32* dst1 = qfrag_s + ((nt * (D / 16) + 2 * p + 1) * 32 + ln) * 2;
        dst0[0] = pack_bf16x2(x[0], x[1]);
        dst0[1] = pack_bf16x2(x[2], x[3]);
        dst1[0] = pack_bf16x2(x[4], x[5]);
        dst1[1] = pack_bf16x2(x[6], x[7]);
    }
    // Causal limit of this lane's rows (2c, 2c + 1 of each row tile): the query's position;
    // -1 for rows past the sequence.
    int lim[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const int row = row0 + nt * 8 + 2 * c + f;
            lim[nt][f] = row < rows ? (int)a.positions[q_start + row / G] : -1;
        }
    __syncthreads();

    for (int split = split0; split < active; split += a.grid_splits) {
        const int tb = split * per_split;
        const int te = min(need_tiles, tb + per_split);
        mma_split<D, NT, MODE>(a, qfrag_s, kvh, bt_off, ctx, tb, te, lim, sm_m, sm_l, sm_o, mma_ring);
        const float* fm = sm_m + MMA_WARPS * ROWS;
        const float* fl = sm_l + MMA_WARPS * ROWS;
        if (active == 1) {
            // Normalise and store: D/8 contiguous dims per (row, lane group).
            for (int idx = threadIdx.x; idx < ROWS * 8; idx += blockDim.x) {
                const int r = idx / 8, seg = idx % 8;
                const int row = row0 + r;
                if (row >= rows) continue;
                const int j = row / G, hh = row % G;
                const float inv = 1.0f / fl[r];
                bf16_t* dst = a.out + (size_t)(q_start + j) * width + (size_t)(kvh * G + hh) * D + seg * (D / 8);
                const float* srcp = sm_o + r * D + seg * (D / 8);
#pragma unroll
                for (int i = 0; i < D / 8; i += 2) {
                    *(u32*)(dst + i) = pack_bf16x2(srcp[i] * inv, srcp[i + 1] * inv);
                }
            }
            __syncthreads();
            continue;
        }
        // A partial: [m, l, o[D]] per row (at its token and head), then count it; the block
        // that completes the chunk's last split combines all of them in split order.
        const auto part_of = [&](int row) {
            const int j = row / G, hh = row % G;
            return a.parts + ((size_t)(q_start + j) * a.n_heads + kvh * G + hh) * MMA_MAX_SPLITS * (D + 2);
        };
        for (int idx = threadIdx.x; idx < ROWS * (D + 2); idx += blockDim.x) {
            const int r = idx / (D + 2), col = idx % (D + 2);
            const int row = row0 + r;
            if (row >= rows) continue;
            const float v = col == 0 ? fm[r] : col == 1 ? fl[r] : sm_o[r * D + col - 2];
            __stcg(part_of(row) + split * (D + 2) + col, v);
        }
        __threadfence();
        __syncthreads();
        u32* counter = a.counters + (size_t)kvh * a.part_tokens * G + (size_t)q_start * G + row0;
        if (threadIdx.x == 0) {
            const u32 done = atomicAdd(counter, 1u) + 1;
            last_block = done == (u32)active;
            if (last_block) *counter = 0;  // ready for the next launch
        }
        __syncthreads();
        if (!last_block) continue;
        __threadfence();
        for (int idx = threadIdx.x; idx < ROWS * 8; idx += blockDim.x) {
            const int r = idx / 8, seg = idx % 8;
            const int row = row0 + r;
            if (row >= rows) continue;
            const float* pr = part_of(row);
            float mx = -WRING_INF;
            for (int s = 0; s < active; ++s) mx = fmaxf(mx, __ldcg(pr + s * (D + 2)));
            float wsum = 0.0f, sc[MMA_MAX_SPLITS];
#pragma unroll
            for (int s = 0; s < MMA_MAX_SPLITS; ++s) {
                sc[s] = 0.0f;
                if (s < active) {
                    const float ms = __ldcg(pr + s * (D + 2));
                    sc[s] = ms == -WRING_INF ? 0.0f : exp2f(ms - mx);
                    wsum += __ldcg(pr + s * (D + 2) + 1) * sc[s];
                }
            }
            const float inv = 1.0f / wsum;
            const int j = row / G, hh = row % G;
            bf16_t* dst = a.out + (size_t)(q_start + j) * width + (size_t)(kvh * G + hh) * D + seg * (D / 8);
#pragma unroll
            for (int i = 0; i < D / 8; i += 2) {
                float x0 = 0.0f, x1 = 0.0f;
#pragma unroll
                for (int s = 0; s < MMA_MAX_SPLITS; ++s) {
                    if (s < active) {
                        const float* ps = pr + s * (D + 2) + 2 + seg * (D / 8) + i;
                        x0 += __ldcg(ps) * sc[s];
                        x1 += __ldcg(ps + 1) * sc[s];
                    }
                }
                *(u32*)(dst + i) = pack_bf16x2(x0 * inv, x1 * inv);
            }
        }
        __syncthreads();
    }
}
