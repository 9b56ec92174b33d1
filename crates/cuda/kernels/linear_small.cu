// Linears for steps of at most 32 tokens (decode at batch <= 32, small verify steps), with the
// work that follows each one fused into the same launch:
//   linear_small_store  y[t][r] = x[t] . w[r]                         (o, down, lm head)
//   linear_small_silu   h[t][j] = silu(x[t] . gate[j]) * (x[t] . up[j]) (gate|up stacked)
//   linear_small_qkv    q|k|v stacked: RoPE on q and k, q to f32 rows, k and v straight
//                       into the layer's KV pool slots as bf16 (the arithmetic of rope_split_qkv)
// Weights are the A operand of mma.m16n8k16 (16 rows a tile), the tokens the B operand (8 a
// tile, NT tiles). One block (4 warps) owns a pair of 16-row tiles and splits K over its warps
// (warp w takes 32-column chunks w, w + 4, ...); the warps' partial sums are added in warp
// order, so results never depend on timing. Each lane reads 16 bytes of each of its weight
// rows per chunk and the matching 16 bytes of each token (a permuted k order inside the mma,
// as in attention/mma.cu), so no shared-memory staging is needed; the first chunks' weights
// are requested before waiting for the previous kernel (programmatic dependent launch).
// Requires K % 32 == 0; rows per pair: 32.

#define LS_WARPS 4
#define LS_PREFETCH 4

struct SmallLinArgs {
    const bf16_t* w;         // [rows][K]
    const bf16_t* x;         // [T][K]
    float* y;                // store: [T][rows]
    bf16_t* h;               // silu: [T][rows / 2]
    float* q;                // qkv: [T][n_heads * head_dim]
    bf16_t* k_pool;
    bf16_t* v_pool;
    const u32* positions;
    const u32* token_seq;
    const u32* seq_bt_off;
    const u32* block_tables;
    const float* inv_freq;
    int T, K, rows;
    int n_heads, n_kv_heads, head_dim, interleaved, block_size;
};

__device__ __forceinline__ void ls_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 ls_ld(const bf16_t* p) {
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// acc[tile][nt][4] for rows (row_a, row_b) tiles of 16, summed over this block's K.
// Leaves the full sums in warp 0's registers (other warps' acc are undefined after).
template <int NT>
__device__ __forceinline__ void ls_mainloop(const SmallLinArgs& a, int row_a, int row_b, float (&acc)[2][NT][4],
                                            float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int chunks = a.K / 32;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[t][nt][i] = 0.0f;
    const bf16_t* wa0 = a.w + (size_t)(row_a + g) * a.K + 8 * c;
    const bf16_t* wa1 = a.w + (size_t)(row_a + g + 8) * a.K + 8 * c;
    const bf16_t* wb0 = a.w + (size_t)(row_b + g) * a.K + 8 * c;
    const bf16_t* wb1 = a.w + (size_t)(row_b + g + 8) * a.K + 8 * c;
    // Weights of the first chunks: independent of the previous kernel, so in flight while
    // it drains.
    uint4 pre[LS_PREFETCH][4];
#pragma unroll
    for (int u = 0; u < LS_PREFETCH; ++u) {
        const int p = warp + u * LS_WARPS;
        if (p < chunks) {
            pre[u][0] = ls_ld(wa0 + 32 * p);
            pre[u][1] = ls_ld(wa1 + 32 * p);
            pre[u][2] = ls_ld(wb0 + 32 * p);
            pre[u][3] = ls_ld(wb1 + 32 * p);
        }
    }
    pdl_entry();
    // Token rows past T read as zeros (their columns of the product are never stored).
    const bf16_t* xr[NT];
    bool tok_ok[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        tok_ok[nt] = nt * 8 + g < a.T;
        xr[nt] = a.x + (size_t)(nt * 8 + g) * a.K + 8 * c;
    }
    // The tokens' 16 bytes of each prefetched chunk, requested together (one L2 round trip)
    // and then refilled with the weights, LS_PREFETCH chunks ahead.
    uint4 prex[LS_PREFETCH][NT];
#pragma unroll
    for (int u = 0; u < LS_PREFETCH; ++u) {
        const int p = warp + u * LS_WARPS;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            prex[u][nt] = (p < chunks && tok_ok[nt]) ? *(const uint4*)(xr[nt] + 32 * p) : make_uint4(0, 0, 0, 0);
    }
    for (int base = warp; base < chunks; base += LS_WARPS * LS_PREFETCH) {
#pragma unroll
        for (int u = 0; u < LS_PREFETCH; ++u) {
            const int p = base + u * LS_WARPS;
            if (p < chunks) {
                uint4 wv[4] = {pre[u][0], pre[u][1], pre[u][2], pre[u][3]};
                uint4 xv[NT];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) xv[nt] = prex[u][nt];
                // Refill this slot with the chunk LS_PREFETCH rounds ahead.
                const int pn = p + LS_WARPS * LS_PREFETCH;
                if (pn < chunks) {
                    pre[u][0] = ls_ld(wa0 + 32 * pn);
                    pre[u][1] = ls_ld(wa1 + 32 * pn);
                    pre[u][2] = ls_ld(wb0 + 32 * pn);
                    pre[u][3] = ls_ld(wb1 + 32 * pn);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
                        prex[u][nt] = tok_ok[nt] ? *(const uint4*)(xr[nt] + 32 * pn) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    // k-step 2p: words x (k 2c..) and y (k 2c+8..); k-step 2p + 1: z, w.
                    ls_mma(acc[0][nt], wv[0].x, wv[1].x, wv[0].y, wv[1].y, xv[nt].x, xv[nt].y);
                    ls_mma(acc[0][nt], wv[0].z, wv[1].z, wv[0].w, wv[1].w, xv[nt].z, xv[nt].w);
                    ls_mma(acc[1][nt], wv[2].x, wv[3].x, wv[2].y, wv[3].y, xv[nt].x, xv[nt].y);
                    ls_mma(acc[1][nt], wv[2].z, wv[3].z, wv[2].w, wv[3].w, xv[nt].z, xv[nt].w);
                }
            }
        }
    }
    // Sum the warps' partials in warp order into warp 0.
    constexpr int PER = 2 * NT * 4;
    if (warp > 0) {
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) red[((warp - 1) * PER + (t * NT + nt) * 4 + i) * 32 + lane] = acc[t][nt][i];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int w = 1; w < LS_WARPS; ++w)
#pragma unroll
            for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[t][nt][i] += red[((w - 1) * PER + (t * NT + nt) * 4 + i) * 32 + lane];
    }
}

// C fragment element i of row tile t: row (g or g + 8), token nt * 8 + 2c (+1).
#define LS_ROW(i) ((i) < 2 ? g : g + 8)
#define LS_TOK(nt, i) ((nt) * 8 + 2 * c + ((i) & 1))

template <int NT>
__device__ __forceinline__ void linear_small_store(const SmallLinArgs& a) {
    __shared__ float red[(LS_WARPS - 1) * 2 * NT * 4 * 32];
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int row_a = blockIdx.x * 32, row_b = row_a + 16;
    float acc[2][NT][4];
    ls_mainloop<NT>(a, row_a, row_b, acc, red);
    if ((threadIdx.x >> 5) != 0) return;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int tok = LS_TOK(nt, i);
                if (tok < a.T) a.y[(size_t)tok * a.rows + (t ? row_b : row_a) + LS_ROW(i)] = acc[t][nt][i];
            }
}

// Gate rows [0, n), up rows [n, 2n): block b owns gate tile b and up tile b.
template <int NT>
__device__ __forceinline__ void linear_small_silu(const SmallLinArgs& a) {
    __shared__ float red[(LS_WARPS - 1) * 2 * NT * 4 * 32];
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int n = a.rows / 2;
    const int row_a = blockIdx.x * 16, row_b = n + row_a;
    float acc[2][NT][4];
    ls_mainloop<NT>(a, row_a, row_b, acc, red);
    if ((threadIdx.x >> 5) != 0) return;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int tok = LS_TOK(nt, i);
            if (tok < a.T) {
                const float gt = acc[0][nt][i], up = acc[1][nt][i];
                a.h[(size_t)tok * n + row_a + LS_ROW(i)] = f2bf(gt / (1.0f + __expf(-gt)) * up);
            }
        }
}

// Stacked q|k|v rows, head h at rows h * head_dim. Block b: head b / (head_dim / 32), pair
// index i = b % (head_dim / 32). Rotate-half q/k heads pair tile i with tile i + head_dim/32
// (rows d and d + head_dim/2 land in one thread); interleaved heads and v take tiles 2i, 2i+1
// (an interleaved pair d, d + 1 is two lanes apart by 4).
template <int NT>
__device__ __forceinline__ void linear_small_qkv(const SmallLinArgs& a) {
    __shared__ float red[(LS_WARPS - 1) * 2 * NT * 4 * 32];
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int D = a.head_dim, half = D / 2, pairs = D / 32;
    const int head = blockIdx.x / pairs, i = blockIdx.x % pairs;
    const bool is_q = head < a.n_heads, is_k = !is_q && head < a.n_heads + a.n_kv_heads;
    const bool rotate_half = (is_q || is_k) && !a.interleaved;
    const int da = rotate_half ? 16 * i : 32 * i;        // first row of tile a inside the head
    const int db = rotate_half ? half + 16 * i : 32 * i + 16;
    float acc[2][NT][4];
    ls_mainloop<NT>(a, head * D + da, head * D + db, acc, red);
    if ((threadIdx.x >> 5) != 0) return;
    const int qd = a.n_heads * D, kvd = a.n_kv_heads * D;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int tok = LS_TOK(nt, e);
            const bool live = tok < a.T;
            const int tk = live ? tok : 0;
            const int r = LS_ROW(e);
            float va = acc[0][nt][e], vb = acc[1][nt][e];
            if (is_q || is_k) {
                const double pos = (double)a.positions[tk];
                if (rotate_half) {
                    // rows j = da + r and j + half: one pair, angle index j.
                    double s, cs;
                    sincos(pos * (double)a.inv_freq[da + r], &s, &cs);
                    const float x0 = va, x1 = vb;
                    va = x0 * (float)cs - x1 * (float)s;
                    vb = x0 * (float)s + x1 * (float)cs;
                } else {
                    // Interleaved pairs (d, d + 1): the partner row is lane ^ 4 (g ^ 1).
                    const float pa = __shfl_xor_sync(0xffffffffu, va, 4);
                    const float pb = __shfl_xor_sync(0xffffffffu, vb, 4);
                    const bool even = (r & 1) == 0;
                    double s, cs;
                    sincos(pos * (double)a.inv_freq[(da + r) / 2], &s, &cs);
                    const float a0 = even ? va : pa, a1 = even ? pa : va;
                    va = even ? a0 * (float)cs - a1 * (float)s : a0 * (float)s + a1 * (float)cs;
                    sincos(pos * (double)a.inv_freq[(db + r) / 2], &s, &cs);
                    const float b0 = even ? vb : pb, b1 = even ? pb : vb;
                    vb = even ? b0 * (float)cs - b1 * (float)s : b0 * (float)s + b1 * (float)cs;
                }
            }
            if (!live) continue;
            if (is_q) {
                float* dst = a.q + (size_t)tok * qd + head * D;
                dst[da + r] = va;
                dst[db + r] = vb;
            } else {
                const size_t slot =
                    (size_t)kv_slot(a.block_tables, a.seq_bt_off[a.token_seq[tok]], a.positions[tok], a.block_size) * kvd;
                bf16_t* dst = (is_k ? a.k_pool + (head - a.n_heads) * D : a.v_pool + (head - a.n_heads - a.n_kv_heads) * D) + slot;
                dst[da + r] = f2bf(va);
                dst[db + r] = f2bf(vb);
            }
        }
}

extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_store_n1(SmallLinArgs a) { linear_small_store<1>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_store_n2(SmallLinArgs a) { linear_small_store<2>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_store_n3(SmallLinArgs a) { linear_small_store<3>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_store_n4(SmallLinArgs a) { linear_small_store<4>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_silu_n1(SmallLinArgs a) { linear_small_silu<1>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_silu_n2(SmallLinArgs a) { linear_small_silu<2>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_silu_n3(SmallLinArgs a) { linear_small_silu<3>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_silu_n4(SmallLinArgs a) { linear_small_silu<4>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_qkv_n1(SmallLinArgs a) { linear_small_qkv<1>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_qkv_n2(SmallLinArgs a) { linear_small_qkv<2>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_qkv_n3(SmallLinArgs a) { linear_small_qkv<3>(a); }
extern "C" __global__ void __launch_bounds__(LS_WARPS * 32) linear_small_qkv_n4(SmallLinArgs a) { linear_small_qkv<4>(a); }
