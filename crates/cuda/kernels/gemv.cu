// Weight-streaming linears for steps of at most 8 tokens (decode at batch <= 8, small verify
// steps), y[t][r] = x[t] . w[r], with the work that follows fused into the same launch:
//   gemv_*_store  f32 rows out                                  (o, down, lm head)
//   gemv_*_silu   silu(gate) * up of stacked gate|up rows, bf16  (gate|up)
//   gemv_*_qkv    RoPE on q and k, q as f32 rows, k and v into the KV pool (or f32 rows):
//                 the arithmetic of rope.cu's rope_split_qkv
// Weight formats (template F): bf16, fp8 E4M3 with an f32 scale per row, int4 (two codes a
// byte, f32 scale and zero per (row, group), optional AWQ smooth per input column), nvfp4
// (E2M1 codes, E4M3 scale per 16 inputs, f32 per row): the device layouts of qweights.rs,
// dequantised in registers with quant_gemm.cu's arithmetic.
//
// The step is bandwidth work: the weights are read once and every SM needs many bytes in
// flight. Work unit: a warp owns one 16-row tile (the A operand of mma.m16n8k16; the up to 8
// tokens are the B operand, so the math is a few mma per 16-byte load whatever T is) over
// one K range. A block is 4 warps on 4 tiles of the same K range (its "row group"), the
// tokens' x of that range staged once in shared memory. K is split over blockIdx.y so that
// even a 576-row matrix covers every SM several times; the split count depends on the
// matrix shape only (host: linear.rs gemv_splits). Split partials go to a workspace; the
// last block of a row group to arrive (an arrival counter, reset by that block) adds them in
// split order, so a row's bits never depend on timing, T or the batch. Each lane keeps
// GV_UNROLL chunks of 16-byte weight loads in flight; the first ones are issued before
// waiting for the previous kernel (programmatic dependent launch).
//
// Lane (g = lane / 4, c = lane % 4) reads 16 bytes of rows g and g + 8 per chunk: W
// consecutive columns starting at chunk * 4W + c * W (W = 8 bf16, 16 fp8, 32 int4/nvfp4
// columns). mma k-step s of the chunk takes the lane's columns 4s .. 4s + 3 as its logical k
// 2c, 2c + 1 (a0a1, b0b1) and 2c + 8, 2c + 9 (a4a5, b2b3): a permutation of k inside the
// chunk, applied to the weights and the tokens alike. Requires K % 32 == 0, rows % 16 == 0,
// int4 groups that are multiples of 32.

#define GV_WARPS 4
#define GV_UNROLL 4
// Columns of K one block stages (the host keeps chunks_per_split * 4W at or below this).
#define GV_KR_MAX 2048
// Row stride of the staged x: KR rounded to 64 plus 8, so lanes of neighbouring tokens hit
// other banks (16 bytes apart modulo 128).
#define GV_XS_MAX (GV_KR_MAX + 64 + 8)

#define GV_BF16 0
#define GV_FP8 1
#define GV_INT4 2
#define GV_NVFP4 3

#define GV_STORE 0
#define GV_SILU 1
#define GV_QKV 2

struct GemvArgs {
    const unsigned char* w;       // [rows][K] bf16 values or codes
    const float* scale;           // fp8: per row; int4: per (row, group); nvfp4: per row
    const float* zero;            // int4: per (row, group)
    const unsigned char* bscale;  // nvfp4: E4M3 per (row, 16 columns)
    const float* smooth;          // int4 / nvfp4: per input column, or null
    const bf16_t* x;              // [T][K]
    float* part;                  // [splits][T][rows] when splits > 1
    u32* counters;                // one per row group (gridDim.x), zero between launches
    float* y;                     // store: [T][rows]
    bf16_t* h;                    // silu: [T][rows / 2]
    float* q;                     // qkv: [T][n_heads * head_dim]
    float* k_out;                 // qkv without pools: [T][n_kv_heads * head_dim]
    float* v_out;
    bf16_t* k_pool;               // qkv: the layer's pools (null: k_out / v_out)
    bf16_t* v_pool;
    const u32* positions;
    const u32* token_seq;
    const u32* seq_bt_off;
    const u32* block_tables;
    const float* inv_freq;
    int T, K, rows, splits, chunks_per_split, group;
    int n_heads, n_kv_heads, head_dim, interleaved, block_size;
};

__device__ __forceinline__ void gv_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Streamed once: no L1 allocation, and a hint that L2 may fetch the following bytes.
__device__ __forceinline__ uint4 gv_ld(const unsigned char* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ void gv_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats to bf16 (round to nearest even) in one register, `lo` in the low half.
__device__ __forceinline__ u32 gv_pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^23 + n for a small integer n (exact, no conversion instruction).
__device__ __forceinline__ float gv_magic(u32 n) { return __uint_as_float(0x4B000000u | n); }

template <int F> struct GvFmt;
template <> struct GvFmt<GV_BF16> { static constexpr int W = 8; static constexpr int BYTES_NUM = 2, BYTES_DEN = 1; };
template <> struct GvFmt<GV_FP8> { static constexpr int W = 16; static constexpr int BYTES_NUM = 1, BYTES_DEN = 1; };
template <> struct GvFmt<GV_INT4> { static constexpr int W = 32; static constexpr int BYTES_NUM = 1, BYTES_DEN = 2; };
template <> struct GvFmt<GV_NVFP4> { static constexpr int W = 32; static constexpr int BYTES_NUM = 1, BYTES_DEN = 2; };

// One chunk of one lane: 16 bytes of rows g (a) and g + 8 (b) and what dequantises them.
struct GvChunk {
    uint4 wa, wb;
    float sa, za, sb, zb;  // int4: group scale and 2^23 + zero of each row
    u32 ba, bb;            // nvfp4: the two E4M3 block scales of each row (low 16 bits)
};

template <int F>
__device__ __forceinline__ void gv_load(const GemvArgs& a, GvChunk& ch, long ra, long rb, int col, bool ok) {
    if (!ok) {
        // Zero weights (x is zero there too): scale 0 keeps int4's (q - z) * s at 0.
        ch.wa = make_uint4(0, 0, 0, 0);
        ch.wb = make_uint4(0, 0, 0, 0);
        ch.sa = ch.sb = 0.0f;
        ch.za = ch.zb = 8388608.0f;
        ch.ba = ch.bb = 0;
        return;
    }
    constexpr int BN = GvFmt<F>::BYTES_NUM, BD = GvFmt<F>::BYTES_DEN;
    const long row_bytes = (long)a.K * BN / BD;
    const long off = (long)col * BN / BD;
    ch.wa = gv_ld(a.w + ra * row_bytes + off);
    ch.wb = gv_ld(a.w + rb * row_bytes + off);
    if constexpr (F == GV_INT4) {
        const int ng = (a.K + a.group - 1) / a.group;
        const int gi = col / a.group;
        ch.sa = __ldg(a.scale + ra * ng + gi);
        ch.za = __ldg(a.zero + ra * ng + gi) + 8388608.0f;
        ch.sb = __ldg(a.scale + rb * ng + gi);
        ch.zb = __ldg(a.zero + rb * ng + gi) + 8388608.0f;
    }
    if constexpr (F == GV_NVFP4) {
        const long nb = a.K / 16;
        ch.ba = __ldg((const unsigned short*)(a.bscale + ra * nb + col / 16));
        ch.bb = __ldg((const unsigned short*)(a.bscale + rb * nb + col / 16));
    }
}

// int4 / nvfp4: the two values of byte `b` (low nibble first), as quant_gemm.cu computes them.
template <int F>
__device__ __forceinline__ void gv_nibbles(u32 b, float s, float z, float& w0, float& w1) {
    if constexpr (F == GV_INT4) {
        w0 = (gv_magic(b & 0xFu) - z) * s;
        w1 = (gv_magic((b >> 4) & 0xFu) - z) * s;
    } else {
        w0 = e2m1_to_f32(b & 0xFu) * s;
        w1 = e2m1_to_f32((b >> 4) & 0xFu) * s;
    }
}

// A-fragment words of k-step s of one row: columns 4s, 4s + 1 (lo) and 4s + 2, 4s + 3 (hi).
// `sm` is the staged smooth at the lane's first column (int4 / nvfp4; null when absent).
template <int F>
__device__ __forceinline__ void gv_row_words(const uint4& wv, float s, float z, u32 bsc, float rsc,
                                             const float* sm, int st, u32& lo, u32& hi) {
    const u32 w[4] = {wv.x, wv.y, wv.z, wv.w};
    if constexpr (F == GV_BF16) {
        lo = w[2 * st];
        hi = w[2 * st + 1];
    } else if constexpr (F == GV_FP8) {
        // E4M3 values are exact in bf16; the row scale is applied to the sums.
        const u32 b = w[st];
        lo = gv_pack(e4m3_to_f32(b & 0xFFu), e4m3_to_f32((b >> 8) & 0xFFu));
        hi = gv_pack(e4m3_to_f32((b >> 16) & 0xFFu), e4m3_to_f32(b >> 24));
    } else {
        // Columns 4s .. 4s + 3 are bytes 2s and 2s + 1 of the 16.
        const u32 word = w[st >> 1];
        const u32 b0 = (word >> (16 * (st & 1))) & 0xFFu, b1 = (word >> (16 * (st & 1) + 8)) & 0xFFu;
        float sc = s;
        if constexpr (F == GV_NVFP4) sc = e4m3_to_f32((bsc >> (8 * (st >> 2))) & 0xFFu) * rsc;
        float v0, v1, v2, v3;
        gv_nibbles<F>(b0, sc, z, v0, v1);
        gv_nibbles<F>(b1, sc, z, v2, v3);
        if (sm) {
            const float4 m = *(const float4*)(sm + 4 * st);
            v0 *= m.x; v1 *= m.y; v2 *= m.z; v3 *= m.w;
        }
        lo = gv_pack(v0, v1);
        hi = gv_pack(v2, v3);
    }
}

// Rows of warp w's tile: the row groups each epilogue needs inside one block.
template <int E>
__device__ __forceinline__ int gv_tile_row(const GemvArgs& a, int gi, int w) {
    if constexpr (E == GV_STORE) {
        return (gi * GV_WARPS + w) * 16;
    } else if constexpr (E == GV_SILU) {
        // Gate tiles 2gi, 2gi + 1 (warps 0, 1) and the same up tiles (warps 2, 3).
        return (w >> 1) * (a.rows / 2) + 16 * (2 * gi + (w & 1));
    } else {
        // Head gi / (D / 64), tiles 2p, 2p + 1 of its first half and the same of its second.
        const int D = a.head_dim, per = D / 64;
        const int head = gi / per, p = gi % per;
        return head * D + 16 * (2 * p + (w & 1) + (w >> 1) * (D / 32));
    }
}

template <int F, int E, int TB>
__device__ __forceinline__ void gemv(const GemvArgs& a) {
    constexpr int W = GvFmt<F>::W, CW = 4 * W, KST = W / 4;
    constexpr bool QUANT4 = F == GV_INT4 || F == GV_NVFP4;
    __shared__ __align__(16) bf16_t xs[TB * GV_XS_MAX];
    __shared__ __align__(16) float sms[QUANT4 ? GV_KR_MAX : 4];
    __shared__ float res[GV_WARPS][16][TB];
    __shared__ u32 last_flag;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int gi = blockIdx.x, split = blockIdx.y;
    const int cps = a.chunks_per_split;
    const int kbase = split * cps * CW;              // first column of this block's range
    const int kr = min(cps * CW, a.K - kbase);       // columns in range (> 0)
    const int XS = ((cps * CW + 63) / 64) * 64 + 8;
    const int row0 = gv_tile_row<E>(a, gi, warp);
    const bool tile_ok = row0 < a.rows;
    const long ra = row0 + g, rb = row0 + g + 8;

    // Weights first: independent of the previous kernel, so in flight while it drains.
    GvChunk pre[GV_UNROLL];
#pragma unroll
    for (int u = 0; u < GV_UNROLL; ++u) {
        const int col = kbase + u * CW + c * W;
        gv_load<F>(a, pre[u], ra, rb, col, tile_ok && u < cps && col < a.K);
    }
    float rsa = 0.0f, rsb = 0.0f;  // fp8 / nvfp4 row scales
    if constexpr (F == GV_FP8 || F == GV_NVFP4) {
        if (tile_ok) { rsa = __ldg(a.scale + ra); rsb = __ldg(a.scale + rb); }
    }
    const bool smooth = QUANT4 && a.smooth != nullptr;
    if constexpr (QUANT4) {
        if (smooth)
            for (int i = threadIdx.x; i < cps * CW; i += blockDim.x)
                sms[i] = i < kr ? __ldg(a.smooth + kbase + i) : 0.0f;
    }
    gv_pdl_wait();
    // The tokens' columns of this range, zero past T and past K.
    {
        const int vec = cps * CW / 8;
        for (int i = threadIdx.x; i < TB * vec; i += blockDim.x) {
            const int t = i / vec, v = i % vec;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (t < a.T && 8 * v < kr) val = *(const uint4*)(a.x + (size_t)t * a.K + kbase + 8 * v);
            *(uint4*)(xs + t * XS + 8 * v) = val;
        }
    }
    __syncthreads();

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bf16_t* xrow = xs + (g < TB ? g : 0) * XS + c * W;
    for (int base = 0; base < cps; base += GV_UNROLL) {
#pragma unroll
        for (int u = 0; u < GV_UNROLL; ++u) {
            const int p = base + u;
            if (p < cps) {
                const GvChunk ch = pre[u];
                // Refill this slot GV_UNROLL chunks ahead before the math on this one.
                const int pn = p + GV_UNROLL;
                if (pn < cps) {
                    const int col = kbase + pn * CW + c * W;
                    gv_load<F>(a, pre[u], ra, rb, col, tile_ok && col < a.K);
                }
                u32 xw[W / 2];
#pragma unroll
                for (int v = 0; v < W / 8; ++v) {
                    uint4 xv = make_uint4(0, 0, 0, 0);
                    if (g < TB) xv = *(const uint4*)(xrow + p * CW + 8 * v);
                    xw[4 * v] = xv.x; xw[4 * v + 1] = xv.y; xw[4 * v + 2] = xv.z; xw[4 * v + 3] = xv.w;
                }
                const float* sm = smooth ? sms + p * CW + c * W : nullptr;
#pragma unroll
                for (int st = 0; st < KST; ++st) {
                    u32 alo, ahi, blo, bhi;
                    gv_row_words<F>(ch.wa, ch.sa, ch.za, ch.ba, rsa, sm, st, alo, ahi);
                    gv_row_words<F>(ch.wb, ch.sb, ch.zb, ch.bb, rsb, sm, st, blo, bhi);
                    gv_mma(acc, alo, blo, ahi, bhi, xw[2 * st], xw[2 * st + 1]);
                }
            }
        }
    }
    if constexpr (F == GV_FP8) {
        acc[0] *= rsa; acc[1] *= rsa; acc[2] *= rsb; acc[3] *= rsb;
    }

    // C fragment: acc[0], acc[1] row g, tokens 2c, 2c + 1; acc[2], acc[3] row g + 8.
    const int t0 = 2 * c;
    if (a.splits == 1) {
        if (t0 < TB) { res[warp][g][t0] = acc[0]; res[warp][g + 8][t0] = acc[2]; }
        if (t0 + 1 < TB) { res[warp][g][t0 + 1] = acc[1]; res[warp][g + 8][t0 + 1] = acc[3]; }
    } else {
        if (tile_ok) {
            float* pp = a.part + (size_t)split * a.T * a.rows;
            if (t0 < a.T) { pp[(size_t)t0 * a.rows + ra] = acc[0]; pp[(size_t)t0 * a.rows + rb] = acc[2]; }
            if (t0 + 1 < a.T) { pp[(size_t)(t0 + 1) * a.rows + ra] = acc[1]; pp[(size_t)(t0 + 1) * a.rows + rb] = acc[3]; }
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last_flag = atomicAdd(a.counters + gi, 1u) == (u32)(a.splits - 1);
        __syncthreads();
        if (!last_flag) return;
        __threadfence();
        // The last block of the row group: every split's partial, added in split order.
        for (int i = threadIdx.x; i < GV_WARPS * 16 * a.T; i += blockDim.x) {
            const int t = i / (GV_WARPS * 16), r = i % (GV_WARPS * 16);
            const int w = r / 16, rr = r % 16;
            const int row = gv_tile_row<E>(a, gi, w) + rr;
            float s = 0.0f;
            if (row < a.rows) {
                s = __ldcg(a.part + (size_t)t * a.rows + row);
                for (int sp = 1; sp < a.splits; ++sp) s += __ldcg(a.part + ((size_t)sp * a.T + t) * a.rows + row);
            }
            res[w][rr][t] = s;
        }
        if (threadIdx.x == 0) a.counters[gi] = 0;
    }
    __syncthreads();

    const int T = a.T;
    if constexpr (E == GV_STORE) {
        for (int i = threadIdx.x; i < GV_WARPS * 16 * T; i += blockDim.x) {
            const int t = i / (GV_WARPS * 16), r = i % (GV_WARPS * 16);
            const int row = gv_tile_row<E>(a, gi, r / 16) + r % 16;
            if (row < a.rows) a.y[(size_t)t * a.rows + row] = res[r / 16][r % 16][t];
        }
    } else if constexpr (E == GV_SILU) {
        const int n = a.rows / 2;
        for (int i = threadIdx.x; i < 32 * T; i += blockDim.x) {
            const int t = i / 32, r = i % 32;
            const int w = r / 16, rr = r % 16;
            const float gt = res[w][rr][t], up = res[w + 2][rr][t];
            a.h[(size_t)t * n + 16 * (2 * gi + w) + rr] = f2bf(gt / (1.0f + __expf(-gt)) * up);
        }
    } else {
        const int D = a.head_dim, per = D / 64;
        const int head = gi / per, p = gi % per;
        const bool is_q = head < a.n_heads, is_k = !is_q && head < a.n_heads + a.n_kv_heads;
        const bool rotate = is_q || is_k;
        const int qd = a.n_heads * D, kvd = a.n_kv_heads * D;
        for (int i = threadIdx.x; i < 32 * T; i += blockDim.x) {
            const int t = i / 32, pi = i % 32;
            int wa, wb, ia, ib;
            if (rotate && !a.interleaved) {
                // Rows d and d + D/2: the same row of warps w and w + 2.
                wa = pi / 16; wb = wa + 2; ia = ib = pi % 16;
            } else {
                // Interleaved pairs (d, d + 1) and v: neighbouring rows of one warp.
                wa = wb = pi / 8; ia = 2 * (pi % 8); ib = ia + 1;
            }
            const int da = 16 * (2 * p + (wa & 1) + (wa >> 1) * (D / 32)) + ia;
            const int db = 16 * (2 * p + (wb & 1) + (wb >> 1) * (D / 32)) + ib;
            float ya = res[wa][ia][t], yb = res[wb][ib][t];
            if (rotate) {
                const double pos = (double)a.positions[t];
                double s, cs;
                sincos(pos * (double)a.inv_freq[a.interleaved ? da / 2 : da], &s, &cs);
                const float x0 = ya, x1 = yb;
                ya = x0 * (float)cs - x1 * (float)s;
                yb = x0 * (float)s + x1 * (float)cs;
            }
            if (is_q) {
                float* dst = a.q + (size_t)t * qd + head * D;
                dst[da] = ya;
                dst[db] = yb;
                continue;
            }
            const int off = (is_k ? head - a.n_heads : head - a.n_heads - a.n_kv_heads) * D;
            if (a.k_pool) {
                const size_t slot =
                    (size_t)kv_slot(a.block_tables, a.seq_bt_off[a.token_seq[t]], a.positions[t], a.block_size) * kvd;
                bf16_t* dst = (is_k ? a.k_pool : a.v_pool) + slot + off;
                dst[da] = f2bf(ya);
                dst[db] = f2bf(yb);
            } else {
                float* dst = (is_k ? a.k_out : a.v_out) + (size_t)t * kvd + off;
                dst[da] = ya;
                dst[db] = yb;
            }
        }
    }
}

// One entry per format, epilogue and token bucket (T <= 1, 2, 4, 8): 4 warps a block.
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t1(GemvArgs a) { gemv<GV_BF16, GV_STORE, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t2(GemvArgs a) { gemv<GV_BF16, GV_STORE, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t4(GemvArgs a) { gemv<GV_BF16, GV_STORE, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t8(GemvArgs a) { gemv<GV_BF16, GV_STORE, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t1(GemvArgs a) { gemv<GV_BF16, GV_SILU, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t2(GemvArgs a) { gemv<GV_BF16, GV_SILU, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t4(GemvArgs a) { gemv<GV_BF16, GV_SILU, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t8(GemvArgs a) { gemv<GV_BF16, GV_SILU, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t1(GemvArgs a) { gemv<GV_BF16, GV_QKV, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t2(GemvArgs a) { gemv<GV_BF16, GV_QKV, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t4(GemvArgs a) { gemv<GV_BF16, GV_QKV, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t8(GemvArgs a) { gemv<GV_BF16, GV_QKV, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t1(GemvArgs a) { gemv<GV_FP8, GV_STORE, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t2(GemvArgs a) { gemv<GV_FP8, GV_STORE, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t4(GemvArgs a) { gemv<GV_FP8, GV_STORE, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t8(GemvArgs a) { gemv<GV_FP8, GV_STORE, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t1(GemvArgs a) { gemv<GV_FP8, GV_SILU, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t2(GemvArgs a) { gemv<GV_FP8, GV_SILU, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t4(GemvArgs a) { gemv<GV_FP8, GV_SILU, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t8(GemvArgs a) { gemv<GV_FP8, GV_SILU, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t1(GemvArgs a) { gemv<GV_FP8, GV_QKV, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t2(GemvArgs a) { gemv<GV_FP8, GV_QKV, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t4(GemvArgs a) { gemv<GV_FP8, GV_QKV, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t8(GemvArgs a) { gemv<GV_FP8, GV_QKV, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t1(GemvArgs a) { gemv<GV_INT4, GV_STORE, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t2(GemvArgs a) { gemv<GV_INT4, GV_STORE, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t4(GemvArgs a) { gemv<GV_INT4, GV_STORE, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t8(GemvArgs a) { gemv<GV_INT4, GV_STORE, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t1(GemvArgs a) { gemv<GV_INT4, GV_SILU, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t2(GemvArgs a) { gemv<GV_INT4, GV_SILU, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t4(GemvArgs a) { gemv<GV_INT4, GV_SILU, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t8(GemvArgs a) { gemv<GV_INT4, GV_SILU, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t1(GemvArgs a) { gemv<GV_INT4, GV_QKV, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t2(GemvArgs a) { gemv<GV_INT4, GV_QKV, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t4(GemvArgs a) { gemv<GV_INT4, GV_QKV, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t8(GemvArgs a) { gemv<GV_INT4, GV_QKV, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t1(GemvArgs a) { gemv<GV_NVFP4, GV_STORE, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t2(GemvArgs a) { gemv<GV_NVFP4, GV_STORE, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t4(GemvArgs a) { gemv<GV_NVFP4, GV_STORE, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t8(GemvArgs a) { gemv<GV_NVFP4, GV_STORE, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t1(GemvArgs a) { gemv<GV_NVFP4, GV_SILU, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t2(GemvArgs a) { gemv<GV_NVFP4, GV_SILU, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t4(GemvArgs a) { gemv<GV_NVFP4, GV_SILU, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t8(GemvArgs a) { gemv<GV_NVFP4, GV_SILU, 8>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t1(GemvArgs a) { gemv<GV_NVFP4, GV_QKV, 1>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t2(GemvArgs a) { gemv<GV_NVFP4, GV_QKV, 2>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t4(GemvArgs a) { gemv<GV_NVFP4, GV_QKV, 4>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t8(GemvArgs a) { gemv<GV_NVFP4, GV_QKV, 8>(a); }
