// Weight-streaming linears for steps of at most 8 tokens (decode at batch <= 8, small verify
// steps), y[t][r] = x[t] . w[r], with the work that follows fused into the same launch:
//   gemv_*_store  f32 rows out                                  (o, down, lm head)
//   gemv_*_silu   silu(gate) * up of stacked gate|up rows, bf16  (gate|up)
//   gemv_*_qkv    RoPE on q and k, q as f32 rows, k and v into the KV pool (or f32 rows):
//                 the arithmetic of rope.cu's rope_split_qkv
// Two optional fusions remove the norm and residual launches of a layer (run-time flags, no
// builds of their own):
//   norm prologue (norm_w non-null): the input is the f32 residual stream xf, and each block
//                 computes every token row's RMS itself (the whole row, in norm.cu's order:
//                 256 virtual threads over columns c, c + 256, ..., then block_sum's tree), so
//                 the staged bf16 values are rms_norm's bits whatever the split;
//   residual epilogue (accumulate, store only): y += the row's sum instead of y = sum, the
//                 f32 add add_rms_norm would have done, in the last block's fixed order.
// Weight formats (template F): bf16, fp8 E4M3 with an f32 scale per row, int4 (two codes a
// byte, f32 scale and zero per (row, group of a multiple of 128), optional AWQ smooth per
// input column), nvfp4 (E2M1 codes, E4M3 scale per 16 inputs, f32 per row): the device
// layouts of qweights.rs.
//
// The step is bandwidth work: the weights are read once and every SM needs tens of KB in
// flight (~4.8 TB/s x ~1 us of latency). Work unit: a warp owns one 16-row tile (the A operand
// of mma.m16n8k16; the up to 8 tokens are the B operand) over one K range. A block is 4 warps
// on 4 tiles of the same K range (its "row group"), the tokens' x of that range staged once in
// shared memory. Each lane streams its own 16-byte pieces of the tile with cp.async into a
// per-warp shared-memory ring of GvCfg::S chunks (no registers held by loads in flight, no
// block barrier: a lane only reads back what it copied itself), the first S - 1 issued before
// waiting for the previous kernel (programmatic dependent launch). K is split over blockIdx.y
// so that even a 576-row matrix covers every SM several times; the split count depends on the
// matrix shape only (host: params.rs gemv_splits). Split partials go to a workspace; the last
// block of a row group to arrive (an arrival counter, reset by that block) adds them in split
// order, so a row's bits never depend on timing, T or the batch.
//
// Dequantisation is bit placement, never per-value float conversion (the integer pipe is the
// limit for 4-bit weights at full bandwidth):
//   fp8   E4M3 bits moved into a bf16 (value x 2^-120, subnormals too), one bf16x2 multiply
//         by 2^120: exact; the row scale multiplies the f32 sums.
//   int4  nibbles OR-ed into the mantissa of bf16 128.0 (= 128 + q), minus bf16 128 + zero
//         (exact integers q - z), the group scale multiplies the f32 sums of each 128-column
//         chunk (so int4 groups must be multiples of 128).
//   nvfp4 E2M1 bits moved into a bf16 (value x 2^-126), one bf16x2 multiply by the block
//         scale x 2^118 (exact: 2-bit times 4-bit mantissas); row scale x 2^8 on the sums.
// The byte / nibble extraction pairs columns that are not neighbours; the tokens' x is staged
// with the same permutation inside every 8 columns, so the dot products are unchanged. AWQ's
// smooth multiplies x at staging (rounded to bf16 there).
//
// Lane (g = lane / 4, c = lane % 4) reads 16 bytes of rows g and g + 8 per chunk: W
// consecutive columns starting at chunk * 4W + c * W (W = 8 bf16, 16 fp8, 32 int4/nvfp4
// columns). mma k-step s of the chunk takes the lane's staged columns 4s .. 4s + 3 as its
// logical k 2c, 2c + 1 (a0a1, b0b1) and 2c + 8, 2c + 9 (a4a5, b2b3): a permutation of k inside
// the chunk, applied to the weights and the tokens alike. Requires K % 32 == 0, rows % 16 == 0.
// `python3 scripts/gpu/emulate gemv` emulates the indexing and the bit tricks against numpy.

#define GV_WARPS 4
// Columns of K one block stages (the host keeps chunks_per_split * 4W at or below this).
#define GV_KR_MAX 1024
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
    const float* xf;              // norm prologue: [T][K] f32 residual rows (x unused)
    const float* norm_w;          // norm prologue: [K] f32 weights, or null (x is the input)
    int T, K, rows, splits, chunks_per_split, group;
    int n_heads, n_kv_heads, head_dim, interleaved, block_size;
    float eps;                    // norm prologue
    int accumulate;               // store: y += sum (the residual add) instead of y = sum
};

// Norm prologue: the rms_norm scale of each token row of xf (rows >= T get 0), computed the
// way norm.cu's 256-thread rms_norm does: virtual thread v sums x[c]^2 over c = v, v + 256,
// ... in order, each virtual warp reduces with warp_sum, and block_sum's second warp_sum adds
// the 8 warp sums. This block's 128 threads each play virtual threads tid and tid + 128.
template <int TB>
__device__ __forceinline__ void gv_norm_scales(const GemvArgs& a, float* scale) {
    __shared__ float warp_ss[TB][8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Every token's two chains advance together (2 TB independent loads in flight per
    // step); each chain still adds its columns in ascending order.
    float sa[TB], sb[TB];
#pragma unroll
    for (int t = 0; t < TB; ++t) { sa[t] = 0.0f; sb[t] = 0.0f; }
    for (int c = threadIdx.x; c < a.K; c += 256) {
        const bool second = c + 128 < a.K;
#pragma unroll
        for (int t = 0; t < TB; ++t) {
            if (t < a.T) {
                const float* xr = a.xf + (size_t)t * a.K;
                const float xa = xr[c];
                sa[t] += xa * xa;
                if (second) {
                    const float xb = xr[c + 128];
                    sb[t] += xb * xb;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < TB; ++t) {
        const float wa = warp_sum(sa[t]), wb = warp_sum(sb[t]);
        if (lane == 0) { warp_ss[t][warp] = wa; warp_ss[t][warp + 4] = wb; }
    }
    __syncthreads();
    if (warp == 0) {
        for (int t = 0; t < TB; ++t) {
            const float r = warp_sum(lane < 8 ? warp_ss[t][lane] : 0.0f);
            if (lane == 0) scale[t] = t < a.T ? rsqrtf(r / (float)a.K + a.eps) : 0.0f;
        }
    }
    __syncthreads();
}


// 4 bytes global -> shared (scales and zeros), zero-filled when !ok.
__device__ __forceinline__ void gv_cp4(void* dst, const void* src, bool ok) {
    const u32 s = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 4 : 0) : "memory");
}

// a * b + c on bf16 pairs, one rounding (exact wherever it is used here).
__device__ __forceinline__ u32 gv_fma2(u32 a, u32 b, u32 c) {
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// (a & b) | c and the bit select (a & c) | (b & ~c), one lop3 each.
__device__ __forceinline__ u32 gv_and_or(u32 a, u32 b, u32 c) {
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
__device__ __forceinline__ u32 gv_select(u32 a, u32 b, u32 c) {
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

#define GV_NEG_ZERO2 0x80008000u
#define GV_ONE2 0x3F803F80u
// bf16 2^120, twice.
#define GV_P120_2 0x7B807B80u

// Per format: W columns a lane loads per chunk; S chunks in each warp's ring (sized so the
// block's static shared memory stays under 48 KB with x of 8 tokens); META: a third 16-byte
// piece per lane and chunk (int4 scales and zeros, nvfp4 block scales).
template <int F, int TB> struct GvCfg;
template <int TB> struct GvCfg<GV_BF16, TB> { static constexpr int W = 8, S = TB >= 8 ? 6 : 8; static constexpr bool META = false; };
template <int TB> struct GvCfg<GV_FP8, TB> { static constexpr int W = 16, S = TB >= 8 ? 6 : 8; static constexpr bool META = false; };
template <int TB> struct GvCfg<GV_INT4, TB> { static constexpr int W = 32, S = TB >= 8 ? 4 : 6; static constexpr bool META = true; };
template <int TB> struct GvCfg<GV_NVFP4, TB> { static constexpr int W = 32, S = TB >= 8 ? 4 : 6; static constexpr bool META = true; };

// The staged position of column i (0..7) inside each 8 columns of x: where the format's
// A-fragment words put that column (fp8: bytes 0, 2 | 1, 3 of a word; 4-bit: nibbles p, p + 4).
template <int F> __device__ __forceinline__ int gv_xpos(int i) {
    if constexpr (F == GV_FP8) return (i & 4) | ((i & 1) << 1) | ((i >> 1) & 1);  // 0 2 1 3 4 6 5 7
    if constexpr (F == GV_INT4 || F == GV_NVFP4) return ((i & 3) << 1) | (i >> 2);  // 0 4 1 5 2 6 3 7 (inverse)
    return i;
}

// A-fragment words of k-step s of one row from the lane's 16 bytes: `lo` holds logical
// k 2c, 2c + 1 and `hi` 2c + 8, 2c + 9. `z2`: int4's bf16 pair of -(128 + zero); `m2`:
// nvfp4's bf16 pairs of block scale x 2^118 (one per 16 columns).
template <int F>
__device__ __forceinline__ void gv_row_words(const uint4& wv, u32 z2, const u32* m2, int st, u32& lo, u32& hi) {
    const u32 w[4] = {wv.x, wv.y, wv.z, wv.w};
    if constexpr (F == GV_BF16) {
        lo = w[2 * st];
        hi = w[2 * st + 1];
    } else if constexpr (F == GV_FP8) {
        // Word st: bytes 0, 2 (lo) and 1, 3 (hi); magnitude bits << 4, sign to bit 15.
        const u32 b = w[st], sg = b & 0x80808080u;
        lo = gv_fma2(gv_select(b << 4, sg << 8, 0x07F007F0u), GV_P120_2, GV_NEG_ZERO2);
        hi = gv_fma2(gv_select(b >> 4, sg, 0x07F007F0u), GV_P120_2, GV_NEG_ZERO2);
    } else {
        // Word st / 2, nibble pairs (p, p + 4) and (p + 1, p + 5), p = 2 (st % 2).
        const u32 b = w[st >> 1];
        const int p = 2 * (st & 1);
        if constexpr (F == GV_INT4) {
            lo = gv_fma2(gv_and_or(b >> (4 * p), 0x000F000Fu, 0x43004300u), GV_ONE2, z2);
            hi = gv_fma2(gv_and_or(b >> (4 * p + 4), 0x000F000Fu, 0x43004300u), GV_ONE2, z2);
        } else {
            // E2M1 magnitude bits to bf16 bits 8..6, sign to bit 15.
            const u32 m = m2[st >> 2];
            const u32 mlo = p == 0 ? b << 6 : b >> 2, slo = p == 0 ? b << 12 : b << 4;
            const u32 mhi = p == 0 ? b << 2 : b >> 6, shi = p == 0 ? b << 8 : b;
            lo = gv_fma2(gv_and_or(mlo, 0x01C001C0u, slo & 0x80008000u), m, GV_NEG_ZERO2);
            hi = gv_fma2(gv_and_or(mhi, 0x01C001C0u, shi & 0x80008000u), m, GV_NEG_ZERO2);
        }
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

// Stages the tokens' columns [kbase + c0, kbase + c0 + ncols) of x into xs (row stride XS),
// zero past T and past the block's kr columns (normalised first with the norm prologue:
// rms_norm's bf16 values); AWQ smooth applied, and each 8 columns permuted into the format's
// fragment order. Staged column i of a token lands at xs[t * XS + i].
template <int F, int TB>
__device__ __forceinline__ void gv_stage_x(const GemvArgs& a, bf16_t* xs, int XS, int kbase, int c0, int ncols, int kr,
                                           const float* norm_scale, bool norm, bool smooth) {
    const int vec = ncols / 8;
    for (int i = threadIdx.x; i < TB * vec; i += blockDim.x) {
        const int t = i / vec, v = i % vec;
        u32 e[8];
        if (norm) {
            const bool in = t < a.T && c0 + 8 * v < kr;
            const int col = kbase + c0 + 8 * v;
            const float s = norm_scale[t];
            float xv[8] = {0, 0, 0, 0, 0, 0, 0, 0}, wv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (in) {
                const float4* xp = (const float4*)(a.xf + (size_t)t * a.K + col);
                const float4* wp = (const float4*)(a.norm_w + col);
                const float4 x0 = xp[0], x1 = xp[1], w0 = __ldg(wp), w1 = __ldg(wp + 1);
                xv[0] = x0.x; xv[1] = x0.y; xv[2] = x0.z; xv[3] = x0.w;
                xv[4] = x1.x; xv[5] = x1.y; xv[6] = x1.z; xv[7] = x1.w;
                wv[0] = w0.x; wv[1] = w0.y; wv[2] = w0.z; wv[3] = w0.w;
                wv[4] = w1.x; wv[5] = w1.y; wv[6] = w1.z; wv[7] = w1.w;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) e[j] = in ? (u32)f2bf(xv[j] * s * wv[j]) : 0u;
        } else {
            uint4 val = make_uint4(0, 0, 0, 0);
            if (t < a.T && c0 + 8 * v < kr) val = *(const uint4*)(a.x + (size_t)t * a.K + kbase + c0 + 8 * v);
            const u32 in[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) e[j] = (in[j >> 1] >> (16 * (j & 1))) & 0xFFFFu;
        }
        if (smooth && t < a.T && c0 + 8 * v < kr) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float f = __uint_as_float(e[j] << 16) * __ldg(a.smooth + kbase + c0 + 8 * v + j);
                e[j] = pack_bf16x2(f, 0.0f) & 0xFFFFu;
            }
        }
        u32 o[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) o[gv_xpos<F>(j)] = e[j];
        *(uint4*)(xs + t * XS + 8 * v) =
            make_uint4(o[0] | (o[1] << 16), o[2] | (o[3] << 16), o[4] | (o[5] << 16), o[6] | (o[7] << 16));
    }
}

// After this block's split partials are written: the last block of row group gi to arrive
// (the others return false) adds every split's partial in split order into res.
template <int E, int TB>
__device__ __forceinline__ bool gv_last_block_sum(const GemvArgs& a, int gi, float (*res)[16][TB], u32& last_flag) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_flag = atomicAdd(a.counters + gi, 1u) == (u32)(a.splits - 1);
    __syncthreads();
    if (!last_flag) return false;
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
    return true;
}

// The epilogue E of the row group's sums res[warp][row][token].
template <int E, int TB>
__device__ __forceinline__ void gv_epilogue(const GemvArgs& a, int gi, float (*res)[16][TB]) {
    const int T = a.T;
    if constexpr (E == GV_STORE) {
        for (int i = threadIdx.x; i < GV_WARPS * 16 * T; i += blockDim.x) {
            const int t = i / (GV_WARPS * 16), r = i % (GV_WARPS * 16);
            const int row = gv_tile_row<E>(a, gi, r / 16) + r % 16;
            if (row >= a.rows) continue;
            float* y = a.y + (size_t)t * a.rows + row;
            *y = a.accumulate ? *y + res[r / 16][r % 16][t] : res[r / 16][r % 16][t];
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

// The large shared arrays of one gemv block (the staged x, then the weight rings), carved
// from a buffer the caller owns: a static array in the one-op kernels below, the dynamic
// shared memory of persistent.cu's kernel (which runs several gemv forms one after another).
template <int F, int TB> struct GvSmem {
    static constexpr int NP = GvCfg<F, TB>::META ? 3 : 2;
    static constexpr int XS_BYTES = TB * GV_XS_MAX * 2;
    static constexpr int RING_BYTES = GvCfg<F, TB>::S * GV_WARPS * NP * 32 * 16;
    static constexpr int BYTES = XS_BYTES + RING_BYTES;
};

// Block (gi, split) of the launch: gi the row group, split the K range. `smem`: GvSmem's
// bytes, 16-byte aligned. `wait_previous`: the programmatic-dependent-launch wait (a
// one-op kernel); persistent.cu's kernel orders its ops itself.
template <int F, int E, int TB>
__device__ __forceinline__ void gemv(const GemvArgs& a, unsigned char* smem, int gi, int split, bool wait_previous) {
    using C = GvCfg<F, TB>;
    constexpr int W = C::W, CW = 4 * W, KST = W / 4, S = C::S, NP = C::META ? 3 : 2;
    constexpr bool QUANT4 = F == GV_INT4 || F == GV_NVFP4;
    bf16_t* xs = reinterpret_cast<bf16_t*>(smem);
    // Each warp's ring: chunk slot, piece (rows g, g + 8, meta), lane.
    uint4 (*ring)[GV_WARPS][NP][32] = reinterpret_cast<uint4 (*)[GV_WARPS][NP][32]>(smem + GvSmem<F, TB>::XS_BYTES);
    __shared__ float res[GV_WARPS][16][TB];
    __shared__ float norm_scale[TB];
    __shared__ u32 last_flag;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int cps = a.chunks_per_split;
    const int kbase = split * cps * CW;              // first column of this block's range
    const int kr = min(cps * CW, a.K - kbase);       // columns in range (> 0)
    const int XS = ((cps * CW + 63) / 64) * 64 + 8;
    const int row0 = gv_tile_row<E>(a, gi, warp);
    const bool tile_ok = row0 < a.rows;
    const long ra = row0 + g, rb = row0 + g + 8;
    constexpr int BN = F == GV_BF16 ? 2 : 1, BD = QUANT4 ? 2 : 1;
    const long row_bytes = (long)a.K * BN / BD;
    const unsigned char* wa_base = a.w + ra * row_bytes;
    const unsigned char* wb_base = a.w + rb * row_bytes;
    const int ng = QUANT4 ? (a.K + a.group - 1) / max(a.group, 1) : 0;

    // Chunk p of this lane into ring slot p % S (zeros past K and for idle tiles).
    auto issue = [&](int p) {
        const int col = kbase + p * CW + c * W;
        const bool ok = tile_ok && col < a.K;
        const long off = ok ? (long)col * BN / BD : 0;
        uint4* slot = &ring[p % S][warp][0][0];
        cp_async16_l2(slot + lane, (ok ? wa_base : a.w) + off, ok);
        cp_async16_l2(slot + 32 + lane, (ok ? wb_base : a.w) + off, ok);
        if constexpr (F == GV_INT4) {
            // Scale and zero of rows g and g + 8 at this 128-column chunk's group, also for
            // lanes past K in a partial chunk: every lane scales the row's sums (x is 0 there).
            const int col0 = kbase + p * CW;
            const bool mok = tile_ok && col0 < a.K;
            float* m = (float*)(slot + 64 + lane);
            const long ia = mok ? ra * ng + col0 / a.group : 0, ib = mok ? rb * ng + col0 / a.group : 0;
            gv_cp4(m, a.scale + ia, mok);
            gv_cp4(m + 1, a.zero + ia, mok);
            gv_cp4(m + 2, a.scale + ib, mok);
            gv_cp4(m + 3, a.zero + ib, mok);
        } else if constexpr (F == GV_NVFP4) {
            // The two E4M3 block scales of the lane's 32 columns (2-byte aligned): the 4
            // aligned bytes around them, the half picked at use.
            u32* m = (u32*)(slot + 64 + lane);
            const long nb = a.K / 16;
            const long oa = ok ? ra * nb + col / 16 : 0, ob = ok ? rb * nb + col / 16 : 0;
            gv_cp4(m, a.bscale + (oa & ~3L), ok);
            gv_cp4(m + 1, a.bscale + (ob & ~3L), ok);
            m[2] = (u32)(oa & 2) | ((u32)(ob & 2) << 8);  // written by this lane only
        }
    };

    // Weights first: independent of the previous kernel, so in flight while it drains.
#pragma unroll
    for (int p = 0; p < S - 1; ++p) {
        if (p < cps) issue(p);
        cp_async_commit();
    }
    float rsa = 0.0f, rsb = 0.0f;  // fp8 / nvfp4 row scales (nvfp4: x 2^8, see above)
    if constexpr (F == GV_FP8 || F == GV_NVFP4) {
        if (tile_ok) { rsa = __ldg(a.scale + ra); rsb = __ldg(a.scale + rb); }
        if constexpr (F == GV_NVFP4) { rsa *= 256.0f; rsb *= 256.0f; }
    }
    const bool smooth = QUANT4 && a.smooth != nullptr;
    if (wait_previous) pdl_entry();
    const bool norm = a.norm_w != nullptr;
    if (norm) gv_norm_scales<TB>(a, norm_scale);
    // The tokens' columns of this range (gv_stage_x).
    gv_stage_x<F, TB>(a, xs, XS, kbase, 0, cps * CW, kr, norm_scale, norm, smooth);
    __syncthreads();

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bf16_t* xrow = xs + (g < TB ? g : 0) * XS + c * W;
    for (int p = 0; p < cps; ++p) {
        // Refill the slot chunk p - 1 used (its words were consumed last iteration), then
        // wait for chunk p: at most S - 1 younger groups may still be in flight.
        if (p + S - 1 < cps) issue(p + S - 1);
        cp_async_commit();
        cp_async_wait<S - 1>();
        const uint4* slot = &ring[p % S][warp][0][0];
        const uint4 wa = slot[lane], wb = slot[32 + lane];
        u32 xw[W / 2];
#pragma unroll
        for (int v = 0; v < W / 8; ++v) {
            uint4 xv = make_uint4(0, 0, 0, 0);
            if (g < TB) xv = *(const uint4*)(xrow + p * CW + 8 * v);
            xw[4 * v] = xv.x; xw[4 * v + 1] = xv.y; xw[4 * v + 2] = xv.z; xw[4 * v + 3] = xv.w;
        }
        u32 za = 0, zb = 0, ma[2] = {0, 0}, mb[2] = {0, 0};
        float sa = 0.0f, sb = 0.0f;
        if constexpr (F == GV_INT4) {
            const float4 m = *(const float4*)(slot + 64 + lane);
            sa = m.x; sb = m.z;
            za = pack_bf16x2(-128.0f - m.y, -128.0f - m.y);
            zb = pack_bf16x2(-128.0f - m.w, -128.0f - m.w);
        } else if constexpr (F == GV_NVFP4) {
            const uint4 m = slot[64 + lane];
            const u32 ua = m.x >> (8 * (m.z & 2)), ub = m.y >> (8 * ((m.z >> 8) & 2));
            const float k118 = __uint_as_float((127u + 118u) << 23);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float fa = e4m3_to_f32((ua >> (8 * h)) & 0xFFu) * k118;
                const float fb = e4m3_to_f32((ub >> (8 * h)) & 0xFFu) * k118;
                ma[h] = pack_bf16x2(fa, fa);
                mb[h] = pack_bf16x2(fb, fb);
            }
        }
        float cacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float* dst = F == GV_INT4 ? cacc : acc;
#pragma unroll
        for (int st = 0; st < KST; ++st) {
            u32 alo, ahi, blo, bhi;
            gv_row_words<F>(wa, za, ma, st, alo, ahi);
            gv_row_words<F>(wb, zb, mb, st, blo, bhi);
            mma_16816(dst, alo, blo, ahi, bhi, xw[2 * st], xw[2 * st + 1]);
        }
        if constexpr (F == GV_INT4) {
            // The chunk is one group: its scale on the f32 sums.
            acc[0] = fmaf(cacc[0], sa, acc[0]);
            acc[1] = fmaf(cacc[1], sa, acc[1]);
            acc[2] = fmaf(cacc[2], sb, acc[2]);
            acc[3] = fmaf(cacc[3], sb, acc[3]);
        }
    }
    if constexpr (F == GV_FP8 || F == GV_NVFP4) {
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
        if (!gv_last_block_sum<E, TB>(a, gi, res, last_flag)) return;
    }
    __syncthreads();
    gv_epilogue<E, TB>(a, gi, res);
}
