// Quantized weights: FP8 W8A8 helpers (per-token E4M3 activation quantisation and the
// per-token x per-channel rescale after the cuBLASLt FP8 GEMM), dequantisation to bf16
// (prefill: a bf16 tile then cuBLAS), and a weight-only GEMM for small token counts
// (decode) on the tensor cores: int4 (group-wise scale and zero) or NVFP4 (E2M1 values,
// E4M3 scale per 16 inputs, f32 scale per row) dequantised in registers straight into
// bf16 mma.sync fragments, f32 accumulation.
//
// Weight layouts are the CPU formats' (crates/backend/src/quant): row-major `[rows][K]`,
// two 4-bit codes per byte, column 2i in the low nibble of byte i. Scales on the device:
// int4 f32 scale and f32 zero per (row, group); nvfp4 the E4M3 byte per (row, block) and
// one f32 per row (the tensor's global scale, per row so fused matrices can stack).

// ---- small float formats (decoding: fp_formats.cuh) ----

// ---- FP8 W8A8 ----

// One block per token row t < rows_pad: E4M3 codes of x[t] / s_t with s_t = amax/448
// (1 for an all-zero row), written to q[t][k]; s_t to scale[t]. Rows from `rows` to
// `rows_pad` (GEMM padding) are zero.
extern "C" __global__ void fp8_quantize_rows(const bf16_t* __restrict__ x, unsigned char* __restrict__ q,
                                             float* __restrict__ scale, int rows, int k) { pdl_entry();
    __shared__ float red[32];
    const int t = blockIdx.x;
    unsigned char* qr = q + (size_t)t * k;
    if (t >= rows) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) qr[i] = 0;
        if (threadIdx.x == 0) scale[t] = 0.0f;
        return;
    }
    const bf16_t* xr = x + (size_t)t * k;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(bf2f(xr[i])));
    amax = block_max(amax, red);
    const float s = fp8_row_scale(amax);
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < k; i += blockDim.x) qr[i] = (unsigned char)f32_to_e4m3(bf2f(xr[i]) * inv);
    if (threadIdx.x == 0) scale[t] = s;
}

// y[t][o] *= xs[t] * ws[o] over `n` = T * rows values.
extern "C" __global__ void fp8_rescale(float* __restrict__ y, const float* __restrict__ xs,
                                       const float* __restrict__ ws, int rows, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        y[i] *= xs[i / rows] * ws[i % rows];
}

// ---- dequantisation to bf16 (rows r0.. of a matrix into out[r - r0][k]) ----
// `smooth` (AWQ's per-input multiplier) may be null. Grid-stride over pairs of columns.

extern "C" __global__ void dequant_fp8_bf16(const unsigned char* __restrict__ q, const float* __restrict__ ws,
                                            bf16_t* __restrict__ out, int r0, int k, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const long r = r0 + i / k;
        out[i] = f2bf(e4m3_to_f32(q[r * k + i % k]) * ws[r]);
    }
}

extern "C" __global__ void dequant_int4_bf16(const unsigned char* __restrict__ q, const float* __restrict__ sc,
                                             const float* __restrict__ zr, const float* __restrict__ smooth,
                                             bf16_t* __restrict__ out, int r0, int k, int group, long npairs) { pdl_entry();
    const int half = k / 2, ng = (k + group - 1) / group;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < npairs; i += (long)gridDim.x * blockDim.x) {
        const long r = r0 + i / half;
        const int c = (int)(i % half) * 2;
        const u32 b = q[r * half + c / 2];
        const long g = r * ng + c / group;
        const float s = sc[g], z = zr[g];
        float w0 = ((float)(b & 0xFu) - z) * s, w1 = ((float)(b >> 4) - z) * s;
        if (smooth) { w0 *= smooth[c]; w1 *= smooth[c + 1]; }
        out[2 * i] = f2bf(w0);
        out[2 * i + 1] = f2bf(w1);
    }
}

extern "C" __global__ void dequant_nvfp4_bf16(const unsigned char* __restrict__ q, const unsigned char* __restrict__ bs,
                                              const float* __restrict__ rs, const float* __restrict__ smooth,
                                              bf16_t* __restrict__ out, int r0, int k, long npairs) { pdl_entry();
    const int half = k / 2, nb = (k + 15) / 16;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < npairs; i += (long)gridDim.x * blockDim.x) {
        const long r = r0 + i / half;
        const int c = (int)(i % half) * 2;
        const u32 b = q[r * half + c / 2];
        const float s = e4m3_to_f32(bs[r * nb + c / 16]) * rs[r];
        float w0 = e2m1_to_f32(b & 0xFu) * s, w1 = e2m1_to_f32(b >> 4) * s;
        if (smooth) { w0 *= smooth[c]; w1 *= smooth[c + 1]; }
        out[2 * i] = f2bf(w0);
        out[2 * i + 1] = f2bf(w1);
    }
}

// ---- weight-only GEMM for small T on the tensor cores ----
//
// y[t][r] = sum_k x[t][k] * w[r][k], x bf16 [T][K], y f32. Each warp owns 16 weight rows
// (the A operand of mma.m16n8k16, rows r0 + lane/4 and r0 + lane/4 + 8) and a K range
// (split-K over gridDim.y; partial sums go to out + split * T * rows and a second kernel
// adds them in a fixed order, so results do not depend on timing). The tokens are the
// B operand, 8 per n-tile (NT tiles: T <= 8 * NT). Per 64 columns each lane loads 32
// bytes of each of its two rows (the four lanes of a quad load the same bytes, so every
// 32-byte sector is fetched once) and keeps byte q = lane % 4 of every 4-byte word: the
// codes of columns 8w + 2q and 8w + 2q + 1, exactly the a0/a1 (word 2j) and a4/a5 (word
// 2j + 1) elements of k-tile j. Requires K % 64 == 0 (and group % 64 == 0 for int4).

#define QG_WARPS 4

// 2^23 + n for a small integer n, by placing n in an f32's mantissa (exact, no cvt).
__device__ __forceinline__ float magic(u32 n) { return __uint_as_float(0x4B000000u | n); }

struct Int4Deq {
    const float* sc;
    const float* zr;
    int ng, group;
    // Rows lane/4 and lane/4 + 8 at the current group: scale, and 2^23 + zero.
    float s0, z0, s1, z1;
    __device__ __forceinline__ void at(long ra, long rb, int k0) {
        const int g = k0 / group;
        s0 = sc[ra * ng + g]; z0 = zr[ra * ng + g] + 8388608.0f;
        s1 = sc[rb * ng + g]; z1 = zr[rb * ng + g] + 8388608.0f;
    }
    // Two values of byte `b` of row 0 or 1 in k-tile j: (q - zero) * scale, the
    // subtraction exact (both sides are 2^23 + a small integer), as the CPU computes it.
    __device__ __forceinline__ void pair(int row, int, u32 b, float& w0, float& w1) const {
        const float s = row ? s1 : s0, z = row ? z1 : z0;
        w0 = (magic(b & 0xFu) - z) * s;
        w1 = (magic(b >> 4) - z) * s;
    }
};

struct Nvfp4Deq {
    const unsigned char* bs;
    const float* rs;
    int nb;
    float g0, g1;
    u32 b0, b1;  // four E4M3 block scales (k-tiles 0..3) of each row at the current 64 columns
    __device__ __forceinline__ void at(long ra, long rb, int k0) {
        g0 = rs[ra]; g1 = rs[rb];
        b0 = *(const u32*)(bs + ra * nb + k0 / 16);
        b1 = *(const u32*)(bs + rb * nb + k0 / 16);
    }
    __device__ __forceinline__ void pair(int row, int j, u32 b, float& w0, float& w1) const {
        const float s = e4m3_to_f32(((row ? b1 : b0) >> (8 * j)) & 0xFFu) * (row ? g1 : g0);
        w0 = e2m1_to_f32(b & 0xFu) * s;
        w1 = e2m1_to_f32((b >> 4) & 0xFu) * s;
    }
};

template <int NT, class Deq>
__device__ __forceinline__ void qgemm_body(const unsigned char* __restrict__ q, Deq deq,
                                           const float* __restrict__ smooth, const bf16_t* __restrict__ x,
                                           float* __restrict__ out, int rows, int K, int T, int k_per_split) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = (blockIdx.x * QG_WARPS + warp) * 16;
    if (r0 >= rows) return;
    const int qd = lane & 3, gid = lane >> 2;
    // __byte_perm selector: byte qd of the first operand, then three zero bytes (of 0).
    const u32 sel = 0x4440u | (u32)qd;
    const long ra = r0 + gid, rb = r0 + gid + 8;
    const int kb = blockIdx.y * k_per_split;
    const int ke = min(K, kb + k_per_split);
    const unsigned char* qa = q + ra * (K / 2);
    const unsigned char* qb = q + rb * (K / 2);
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    for (int k0 = kb; k0 < ke; k0 += 64) {
        // 32 bytes (64 codes) of each row.
        const uint4 wa0 = __ldg((const uint4*)(qa + k0 / 2));
        const uint4 wa1 = __ldg((const uint4*)(qa + k0 / 2 + 16));
        const uint4 wb0 = __ldg((const uint4*)(qb + k0 / 2));
        const uint4 wb1 = __ldg((const uint4*)(qb + k0 / 2 + 16));
        deq.at(ra, rb, k0);
        const u32 wa[8] = {wa0.x, wa0.y, wa0.z, wa0.w, wa1.x, wa1.y, wa1.z, wa1.w};
        const u32 wb[8] = {wb0.x, wb0.y, wb0.z, wb0.w, wb1.x, wb1.y, wb1.z, wb1.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            // A fragment: a0a1 (row a, cols 2q..), a2a3 (row b), a4a5 (row a, cols 8 + 2q..), a6a7 (row b).
            float v[8];
            deq.pair(0, j, __byte_perm(wa[2 * j], 0, sel), v[0], v[1]);
            deq.pair(1, j, __byte_perm(wb[2 * j], 0, sel), v[2], v[3]);
            deq.pair(0, j, __byte_perm(wa[2 * j + 1], 0, sel), v[4], v[5]);
            deq.pair(1, j, __byte_perm(wb[2 * j + 1], 0, sel), v[6], v[7]);
            const int c = k0 + 16 * j + 2 * qd;
            if (smooth) {
                const float2 s0 = *(const float2*)(smooth + c), s1 = *(const float2*)(smooth + c + 8);
                v[0] *= s0.x; v[1] *= s0.y; v[2] *= s0.x; v[3] *= s0.y;
                v[4] *= s1.x; v[5] *= s1.y; v[6] *= s1.x; v[7] *= s1.y;
            }
            const u32 a[4] = {pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                              pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7])};
#pragma unroll
            for (int n = 0; n < NT; n++) {
                // B fragment: token n*8 + lane/4, columns c, c+1 (b0b1) and c+8, c+9 (b2b3).
                const int t = n * 8 + gid;
                u32 b0 = 0, b1 = 0;
                if (t < T) {
                    const bf16_t* xr = x + (size_t)t * K + c;
                    b0 = __ldg((const u32*)xr);
                    b1 = __ldg((const u32*)(xr + 8));
                }
                mma_16816(acc[n], a[0], a[1], a[2], a[3], b0, b1);
            }
        }
    }
    // C fragment: c0c1 (row a, tokens 2q, 2q+1), c2c3 (row b).
    float* o = out + (size_t)blockIdx.y * T * rows;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int t0 = n * 8 + 2 * qd;
        if (t0 < T) { o[(size_t)t0 * rows + ra] = acc[n][0]; o[(size_t)t0 * rows + rb] = acc[n][2]; }
        if (t0 + 1 < T) { o[(size_t)(t0 + 1) * rows + ra] = acc[n][1]; o[(size_t)(t0 + 1) * rows + rb] = acc[n][3]; }
    }
}

// One entry per scheme and n-tile count (T <= 8, 16, 32); QG_WARPS * 32 = 128 threads.
extern "C" __global__ void __launch_bounds__(128)
qgemm_int4_n1(const unsigned char* __restrict__ q, const float* __restrict__ sc, const float* __restrict__ zr,
                const float* __restrict__ smooth, const bf16_t* __restrict__ x, float* __restrict__ out,
                int rows, int K, int T, int k_per_split, int group) { pdl_entry();
    Int4Deq d;
    d.sc = sc; d.zr = zr; d.group = group; d.ng = (K + group - 1) / group;
    qgemm_body<1>(q, d, smooth, x, out, rows, K, T, k_per_split);
}

extern "C" __global__ void __launch_bounds__(128)
qgemm_int4_n2(const unsigned char* __restrict__ q, const float* __restrict__ sc, const float* __restrict__ zr,
                const float* __restrict__ smooth, const bf16_t* __restrict__ x, float* __restrict__ out,
                int rows, int K, int T, int k_per_split, int group) { pdl_entry();
    Int4Deq d;
    d.sc = sc; d.zr = zr; d.group = group; d.ng = (K + group - 1) / group;
    qgemm_body<2>(q, d, smooth, x, out, rows, K, T, k_per_split);
}

extern "C" __global__ void __launch_bounds__(128)
qgemm_int4_n4(const unsigned char* __restrict__ q, const float* __restrict__ sc, const float* __restrict__ zr,
                const float* __restrict__ smooth, const bf16_t* __restrict__ x, float* __restrict__ out,
                int rows, int K, int T, int k_per_split, int group) { pdl_entry();
    Int4Deq d;
    d.sc = sc; d.zr = zr; d.group = group; d.ng = (K + group - 1) / group;
    qgemm_body<4>(q, d, smooth, x, out, rows, K, T, k_per_split);
}

extern "C" __global__ void __launch_bounds__(128)
qgemm_nvfp4_n1(const unsigned char* __restrict__ q, const unsigned char* __restrict__ bs,
                 const float* __restrict__ rs, const float* __restrict__ smooth, const bf16_t* __restrict__ x,
                 float* __restrict__ out, int rows, int K, int T, int k_per_split) { pdl_entry();
    Nvfp4Deq d;
    d.bs = bs; d.rs = rs; d.nb = (K + 15) / 16;
    qgemm_body<1>(q, d, smooth, x, out, rows, K, T, k_per_split);
}

extern "C" __global__ void __launch_bounds__(128)
qgemm_nvfp4_n2(const unsigned char* __restrict__ q, const unsigned char* __restrict__ bs,
                 const float* __restrict__ rs, const float* __restrict__ smooth, const bf16_t* __restrict__ x,
                 float* __restrict__ out, int rows, int K, int T, int k_per_split) { pdl_entry();
    Nvfp4Deq d;
    d.bs = bs; d.rs = rs; d.nb = (K + 15) / 16;
    qgemm_body<2>(q, d, smooth, x, out, rows, K, T, k_per_split);
}

extern "C" __global__ void __launch_bounds__(128)
qgemm_nvfp4_n4(const unsigned char* __restrict__ q, const unsigned char* __restrict__ bs,
                 const float* __restrict__ rs, const float* __restrict__ smooth, const bf16_t* __restrict__ x,
                 float* __restrict__ out, int rows, int K, int T, int k_per_split) { pdl_entry();
    Nvfp4Deq d;
    d.bs = bs; d.rs = rs; d.nb = (K + 15) / 16;
    qgemm_body<4>(q, d, smooth, x, out, rows, K, T, k_per_split);
}

// out[i] = sum over s < splits of part[s * n + i], in order.
extern "C" __global__ void sum_splits(const float* __restrict__ part, float* __restrict__ out, int splits, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float s = part[i];
        for (int k = 1; k < splits; k++) s += part[(long)k * n + i];
        out[i] = s;
    }
}
