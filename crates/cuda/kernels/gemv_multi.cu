// Multi-tile weight streaming for int4 / nvfp4 weights and steps of 9 to 64 tokens (appended
// to gemv.cu: its GemvArgs, fragments, dequantisation, split reduction and epilogues).
//
// Same work unit as gemv(): a warp owns one 16-row tile over one K range, 4 warps a block on
// the row group's 4 tiles, a per-warp cp.async ring of weight chunks, K split over blockIdx.y
// exactly as for 8 tokens (params.rs gemv_splits: the matrix shape only), the last block of a
// row group adding the split partials in split order. What changes is the B operand: the TB
// tokens are TB / 8 n-tiles of 8, and each chunk's A fragments are dequantised ONCE into
// registers and fed to every n-tile's mma (TB / 8 accumulators of 4). Each n-tile's sums go
// through the operations gemv() applies to its one n-tile, in the same order, so a token's
// bits are those of the 8-token builds: they depend neither on the bucket nor on the other
// tokens (verify steps reproduce plain decode across buckets). The price: at 64 tokens the
// split partials (f32 per token, mostly in L2) are about as many bytes as the weights.
//
// x of TB tokens over a whole K range does not fit in shared memory, so it is staged in
// stages of GV_MULTI_COLS / TB columns (a block barrier on each side): 16 tokens x 512,
// 32 x 256, 64 x 128 columns, about 17 KB. The epilogue's sums (4 x 16 x TB f32) reuse the
// staging buffer once the last chunk is consumed, keeping the block under 48 KB of static
// shared memory (ring 24 KB), i.e. several blocks per SM.

#define GV_MULTI_COLS 8192

// gv_stage_x for plain bf16 x (no norm prologue, no AWQ smooth) over a whole stage: each
// thread's vectors are all loaded before any is stored, so they are in flight together (a
// stage is restaged every 1 to 4 chunks; its loads would otherwise stall the block once per
// vector). The same staged bits as gv_stage_x; columns past the block's range get zeros.
template <int F, int TB, int STAGE>
__device__ __forceinline__ void gv_multi_stage_plain(const GemvArgs& a, bf16_t* xs, int XS, int kbase, int c0, int kr) {
    constexpr int VEC = STAGE / 8, PER = TB * VEC / (GV_WARPS * 32);
    static_assert(TB * VEC % (GV_WARPS * 32) == 0, "whole vectors per thread");
    uint4 val[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int i = threadIdx.x + k * GV_WARPS * 32, t = i / VEC, v = i % VEC;
        val[k] = make_uint4(0, 0, 0, 0);
        if (t < a.T && c0 + 8 * v < kr) val[k] = *(const uint4*)(a.x + (size_t)t * a.K + kbase + c0 + 8 * v);
    }
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int i = threadIdx.x + k * GV_WARPS * 32, t = i / VEC, v = i % VEC;
        const u32 in[4] = {val[k].x, val[k].y, val[k].z, val[k].w};
        u32 e[8], o[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) e[j] = (in[j >> 1] >> (16 * (j & 1))) & 0xFFFFu;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[gv_xpos<F>(j)] = e[j];
        *(uint4*)(xs + t * XS + 8 * v) =
            make_uint4(o[0] | (o[1] << 16), o[2] | (o[3] << 16), o[4] | (o[5] << 16), o[6] | (o[7] << 16));
    }
}

template <int F, int E, int TB>
__device__ __forceinline__ void gemv_multi(const GemvArgs& a) {
    static_assert(F == GV_INT4 || F == GV_NVFP4, "multi-tile gemv is for 4-bit weights");
    static_assert(TB % 8 == 0 && TB >= 16, "n-tiles of 8 tokens");
    constexpr int NT = TB / 8;
    constexpr int W = 32, CW = 4 * W, KST = W / 4, S = 4, NP = 3;
    constexpr int STAGE = GV_MULTI_COLS / TB;  // columns staged at a time, a multiple of CW
    constexpr int CPST = STAGE / CW;           // chunks per stage
    constexpr int XS = STAGE + 8;              // row stride: 16 bytes mod 128 (other banks)
    static_assert(STAGE % CW == 0, "whole chunks per stage");
    constexpr int XS_BYTES = TB * XS * 2, RES_BYTES = GV_WARPS * 16 * TB * 4;
    __shared__ __align__(16) unsigned char xs_res[XS_BYTES > RES_BYTES ? XS_BYTES : RES_BYTES];
    __shared__ __align__(16) uint4 ring[S][GV_WARPS][NP][32];
    __shared__ float norm_scale[TB];
    __shared__ u32 last_flag;
    bf16_t* xs = (bf16_t*)xs_res;
    float(*res)[16][TB] = (float(*)[16][TB])xs_res;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int gi = blockIdx.x, split = blockIdx.y;
    const int cps = a.chunks_per_split;
    const int kbase = split * cps * CW;
    const int kr = min(cps * CW, a.K - kbase);
    const int row0 = gv_tile_row<E>(a, gi, warp);
    const bool tile_ok = row0 < a.rows;
    const long ra = row0 + g, rb = row0 + g + 8;
    const long row_bytes = (long)a.K / 2;
    const unsigned char* wa_base = a.w + ra * row_bytes;
    const unsigned char* wb_base = a.w + rb * row_bytes;
    const int ng = (a.K + a.group - 1) / max(a.group, 1);

    // Chunk p of this lane into ring slot p % S: gemv()'s issue for the 4-bit formats.
    auto issue = [&](int p) {
        const int col = kbase + p * CW + c * W;
        const bool ok = tile_ok && col < a.K;
        const long off = ok ? (long)col / 2 : 0;
        uint4* slot = &ring[p % S][warp][0][0];
        cp_async16_l2(slot + lane, (ok ? wa_base : a.w) + off, ok);
        cp_async16_l2(slot + 32 + lane, (ok ? wb_base : a.w) + off, ok);
        if constexpr (F == GV_INT4) {
            const int col0 = kbase + p * CW;
            const bool mok = tile_ok && col0 < a.K;
            float* m = (float*)(slot + 64 + lane);
            const long ia = mok ? ra * ng + col0 / a.group : 0, ib = mok ? rb * ng + col0 / a.group : 0;
            gv_cp4(m, a.scale + ia, mok);
            gv_cp4(m + 1, a.zero + ia, mok);
            gv_cp4(m + 2, a.scale + ib, mok);
            gv_cp4(m + 3, a.zero + ib, mok);
        } else {
            u32* m = (u32*)(slot + 64 + lane);
            const long nb = a.K / 16;
            const long oa = ok ? ra * nb + col / 16 : 0, ob = ok ? rb * nb + col / 16 : 0;
            gv_cp4(m, a.bscale + (oa & ~3L), ok);
            gv_cp4(m + 1, a.bscale + (ob & ~3L), ok);
            m[2] = (u32)(oa & 2) | ((u32)(ob & 2) << 8);
        }
    };

#pragma unroll
    for (int p = 0; p < S - 1; ++p) {
        if (p < cps) issue(p);
        cp_async_commit();
    }
    float rsa = 0.0f, rsb = 0.0f;  // nvfp4 row scales x 2^8
    if constexpr (F == GV_NVFP4) {
        if (tile_ok) { rsa = __ldg(a.scale + ra) * 256.0f; rsb = __ldg(a.scale + rb) * 256.0f; }
    }
    const bool smooth = a.smooth != nullptr;
    pdl_entry();
    const bool norm = a.norm_w != nullptr;
    if (norm) {
        // gv_norm_scales for 8 tokens at a time (each token's sum is its own chain).
        for (int t0 = 0; t0 < TB; t0 += 8) {
            GemvArgs b = a;
            b.xf = a.xf + (size_t)min(t0, max(a.T - 1, 0)) * a.K;
            b.T = a.T - t0;
            gv_norm_scales<8>(b, norm_scale + t0);
        }
    }

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) { acc[j][0] = 0.0f; acc[j][1] = 0.0f; acc[j][2] = 0.0f; acc[j][3] = 0.0f; }
    for (int p = 0; p < cps; ++p) {
        if (p % CPST == 0) {
            // Every warp is done with the previous stage's x.
            __syncthreads();
            if (norm || smooth) {
                gv_stage_x<F, TB>(a, xs, XS, kbase, p * CW, min(STAGE, (cps - p) * CW), kr, norm_scale, norm, smooth);
            } else {
                gv_multi_stage_plain<F, TB, STAGE>(a, xs, XS, kbase, p * CW, kr);
            }
            __syncthreads();
        }
        if (p + S - 1 < cps) issue(p + S - 1);
        cp_async_commit();
        cp_async_wait<S - 1>();
        const uint4* slot = &ring[p % S][warp][0][0];
        const uint4 wa = slot[lane], wb = slot[32 + lane];
        u32 za = 0, zb = 0, ma[2] = {0, 0}, mb[2] = {0, 0};
        float sa = 0.0f, sb = 0.0f;
        if constexpr (F == GV_INT4) {
            const float4 m = *(const float4*)(slot + 64 + lane);
            sa = m.x; sb = m.z;
            za = pack_bf16x2(-128.0f - m.y, -128.0f - m.y);
            zb = pack_bf16x2(-128.0f - m.w, -128.0f - m.w);
        } else {
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
        // The chunk's A fragments, dequantised once for all n-tiles.
        u32 alo[KST], ahi[KST], blo[KST], bhi[KST];
#pragma unroll
        for (int st = 0; st < KST; ++st) {
            gv_row_words<F>(wa, za, ma, st, alo[st], ahi[st]);
            gv_row_words<F>(wb, zb, mb, st, blo[st], bhi[st]);
        }
        const bf16_t* xchunk = xs + (p % CPST) * CW + c * W;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const bf16_t* xrow = xchunk + (8 * j + g) * XS;
            u32 xw[W / 2];
#pragma unroll
            for (int v = 0; v < W / 8; ++v) {
                const uint4 xv = *(const uint4*)(xrow + 8 * v);
                xw[4 * v] = xv.x; xw[4 * v + 1] = xv.y; xw[4 * v + 2] = xv.z; xw[4 * v + 3] = xv.w;
            }
            if constexpr (F == GV_INT4) {
                // The chunk is one group: its scale on the f32 sums.
                float cacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int st = 0; st < KST; ++st) mma_16816(cacc, alo[st], blo[st], ahi[st], bhi[st], xw[2 * st], xw[2 * st + 1]);
                acc[j][0] = fmaf(cacc[0], sa, acc[j][0]);
                acc[j][1] = fmaf(cacc[1], sa, acc[j][1]);
                acc[j][2] = fmaf(cacc[2], sb, acc[j][2]);
                acc[j][3] = fmaf(cacc[3], sb, acc[j][3]);
            } else {
#pragma unroll
                for (int st = 0; st < KST; ++st) mma_16816(acc[j], alo[st], blo[st], ahi[st], bhi[st], xw[2 * st], xw[2 * st + 1]);
            }
        }
    }
    if constexpr (F == GV_NVFP4) {
#pragma unroll
        for (int j = 0; j < NT; ++j) { acc[j][0] *= rsa; acc[j][1] *= rsa; acc[j][2] *= rsb; acc[j][3] *= rsb; }
    }

    // res overlays the staged x: every warp must be past its last chunk.
    __syncthreads();
    if (a.splits == 1) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int t0 = 8 * j + 2 * c;
            res[warp][g][t0] = acc[j][0]; res[warp][g + 8][t0] = acc[j][2];
            res[warp][g][t0 + 1] = acc[j][1]; res[warp][g + 8][t0 + 1] = acc[j][3];
        }
    } else {
        if (tile_ok) {
            float* pp = a.part + (size_t)split * a.T * a.rows;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int t0 = 8 * j + 2 * c;
                if (t0 < a.T) { pp[(size_t)t0 * a.rows + ra] = acc[j][0]; pp[(size_t)t0 * a.rows + rb] = acc[j][2]; }
                if (t0 + 1 < a.T) { pp[(size_t)(t0 + 1) * a.rows + ra] = acc[j][1]; pp[(size_t)(t0 + 1) * a.rows + rb] = acc[j][3]; }
            }
        }
        if (!gv_last_block_sum<E, TB>(a, gi, res, last_flag)) return;
    }
    __syncthreads();
    gv_epilogue<E, TB>(a, gi, res);
}

// One entry per 4-bit format, epilogue and token bucket (T <= 16, 32, 64): 4 warps a block.
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t16(GemvArgs a) { gemv_multi<GV_INT4, GV_STORE, 16>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t32(GemvArgs a) { gemv_multi<GV_INT4, GV_STORE, 32>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t64(GemvArgs a) { gemv_multi<GV_INT4, GV_STORE, 64>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t16(GemvArgs a) { gemv_multi<GV_INT4, GV_SILU, 16>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t32(GemvArgs a) { gemv_multi<GV_INT4, GV_SILU, 32>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t64(GemvArgs a) { gemv_multi<GV_INT4, GV_SILU, 64>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t16(GemvArgs a) { gemv_multi<GV_INT4, GV_QKV, 16>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t32(GemvArgs a) { gemv_multi<GV_INT4, GV_QKV, 32>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t64(GemvArgs a) { gemv_multi<GV_INT4, GV_QKV, 64>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t16(GemvArgs a) { gemv_multi<GV_NVFP4, GV_STORE, 16>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t32(GemvArgs a) { gemv_multi<GV_NVFP4, GV_STORE, 32>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t64(GemvArgs a) { gemv_multi<GV_NVFP4, GV_STORE, 64>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t16(GemvArgs a) { gemv_multi<GV_NVFP4, GV_SILU, 16>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t32(GemvArgs a) { gemv_multi<GV_NVFP4, GV_SILU, 32>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t64(GemvArgs a) { gemv_multi<GV_NVFP4, GV_SILU, 64>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t16(GemvArgs a) { gemv_multi<GV_NVFP4, GV_QKV, 16>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t32(GemvArgs a) { gemv_multi<GV_NVFP4, GV_QKV, 32>(a); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t64(GemvArgs a) { gemv_multi<GV_NVFP4, GV_QKV, 64>(a); }
