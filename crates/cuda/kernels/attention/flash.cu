// Prefill chunks on the tensor cores, FlashAttention-2's decomposition in its usual
// orientation: query rows are the mma's M dimension (16 a warp), keys and head dims its N.
// One block of FL_WARPS warps per (sequence, KV head, row chunk of FL_WARPS * 16 rows); the
// rows of (sequence, KV head) are r = j * G + hh for query token j and grouped head hh (as in
// mma.cu), so each K/V tile staged in shared memory serves every query token and every head
// of the group. Each warp walks the keys from 0 up to its rows' positions in stages of
// FL_KEYS, in order, with one online-softmax update per stage: no partials, no merge.
//
// Used for sequences of at least a.prefill_min_q query tokens (attention_mma skips them in
// the same step). A row's result depends only on its own query and keys (stages of FL_KEYS
// absolute positions walked in order; a stage wholly past a row's position is masked to exact
// zeros for it), never on the batch, the row chunks or how the prompt was chunked.
//
// Per stage, for the warp's 16 rows:
//   S = Q . K^T      A = Q (registers, bf16, loaded once), B = K rows via ldmatrix
//   P = exp2(S * scale_log2 - m), m the running row max (base 2)
//   O += P . V       A = P straight from S's accumulators (FA2's register reuse),
//                    B = V rows via ldmatrix.trans
// Shared memory: per stage FL_KEYS rows of K then FL_KEYS rows of V, D bf16 each; the 16-byte
// pieces of a row are XOR-swizzled by (key & 7), so the eight rows an ldmatrix reads at one
// logical piece land in eight different bank groups. FL_STAGES(D) buffers filled by cp.async
// (the next stages' copies run under this stage's math). `python3 scripts/gpu/emulate flash`
// emulates the lane arithmetic against float64.

#define FL_WARPS 4
#define FL_ROWS (16 * FL_WARPS)
#define FL_KEYS 64
// Buffers: 3 x 16 KB for head_dim 64, 2 x 32 KB for 128 (dynamic shared memory, the
// attribute set at load: params.rs flash_smem).
#define FL_STAGES(D) ((D) == 128 ? 2 : 3)
#define FL_STAGE_BYTES(D) (2 * FL_KEYS * (D) * 2)

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* p) {
    const u32 s = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const void* p) {
    const u32 s = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// Byte offset of 16-byte piece `piece` of key row `key` in a stage's K (or V) rows.
template <int D>
__device__ __forceinline__ int fl_offset(int key, int piece) {
    return key * (D * 2) + ((piece ^ (key & 7)) << 4);
}

// Copies stage `stage` (keys stage * FL_KEYS ..) of (sequence, KV head) into buf: K rows
// then V rows. Keys at or past ctx are zero-filled (masked later, and 0 * garbage could be
// NaN). Each thread copies one piece of several keys; their pool slots are looked up first,
// all at once, so the copies wait on one round of block-table reads.
template <int D>
__device__ __forceinline__ void fl_fill(unsigned char* buf, const AttnArgs& a, u32 bt_off, int kvh, int stage,
                                        int ctx) {
    constexpr int PIECES = D / 8, KEYS_PER_PASS = FL_WARPS * 32 / PIECES, PASSES = FL_KEYS / KEYS_PER_PASS;
    const size_t kv_width = (size_t)a.n_kv_heads * D;
    const int piece = threadIdx.x % PIECES, k0 = threadIdx.x / PIECES;
    u32 slot[PASSES];
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int pos = stage * FL_KEYS + k0 + j * KEYS_PER_PASS;
        slot[j] = pos < ctx ? kv_slot(a.block_tables, bt_off, (u32)pos, a.block_size) : 0;
    }
    const size_t col = (size_t)kvh * D + piece * 8;
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int key = k0 + j * KEYS_PER_PASS;
        const bool ok = stage * FL_KEYS + key < ctx;
        const size_t src = (size_t)slot[j] * kv_width + col;
        cp_async16(buf + fl_offset<D>(key, piece), a.k_pool + src, ok);
        cp_async16(buf + FL_KEYS * D * 2 + fl_offset<D>(key, piece), a.v_pool + src, ok);
    }
}

template <int D>
__device__ __forceinline__ void attention_flash(const AttnArgs& a) {
    constexpr int NB = FL_STAGES(D), STAGE = FL_STAGE_BYTES(D);
    constexpr int KS = D / 16;      // k-steps of Q . K^T (head dims) = n-tiles of O (pairs: D / 16)
    constexpr int NT = FL_KEYS / 8; // n-tiles of S (keys)
    extern __shared__ __align__(128) unsigned char fl_smem[];

    const int seq = blockIdx.x, kvh = blockIdx.y;
    // Blocks with later rows walk more keys: hand those out first.
    const int chunk = gridDim.z - 1 - blockIdx.z;
    const int G = a.n_heads / a.n_kv_heads;
    const u32 q_start = a.seq_q_start[seq];
    const int q_len = (int)(a.seq_q_start[seq + 1] - q_start);
    if (q_len < a.prefill_min_q) return;
    const int rows = q_len * G;
    const int block_row0 = chunk * FL_ROWS;
    if (block_row0 >= rows) return;
    const int ctx = (int)a.positions[q_start + q_len - 1] + 1;
    const u32 bt_off = a.seq_bt_off[seq];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int width = a.n_heads * D;
    const int row0 = block_row0 + warp * 16;

    // This lane's rows g and g + 8 of the warp's tile: Q as A fragments (k-step ks: dims
    // 16ks + 2c, +1 in a0 / a1 and 16ks + 8 + 2c, +1 in a2 / a3), causal limits (-1 past the
    // sequence: every key masked, the row is not written).
    u32 qa[KS][4];
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = row0 + g + 8 * h;
        lim[h] = r < rows ? (int)a.positions[q_start + r / G] : -1;
        const float* src = a.q + (size_t)(q_start + (r < rows ? r / G : 0)) * width + (size_t)(kvh * G + r % G) * D;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            float2 lo = make_float2(0.0f, 0.0f), hi = lo;
            if (r < rows) {
                lo = *(const float2*)(src + 16 * ks + 2 * c);
                hi = *(const float2*)(src + 16 * ks + 8 + 2 * c);
            }
            qa[ks][h] = pack_bf16x2(lo.x, lo.y);
            qa[ks][2 + h] = pack_bf16x2(hi.x, hi.y);
        }
    }
    const int warp_last = min(rows, row0 + 16) - 1;
    const int warp_lim = warp_last >= row0 ? (int)a.positions[q_start + warp_last / G] : -1;
    const int block_last = min(rows, block_row0 + FL_ROWS) - 1;
    const int block_lim = (int)a.positions[q_start + block_last / G];
    const int stages = block_lim / FL_KEYS + 1;

    float o[KS * 2][4];  // n-tile dn: dims 8dn + 2c, +1 of rows g ([0], [1]) and g + 8 ([2], [3])
#pragma unroll
    for (int dn = 0; dn < KS * 2; ++dn)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[dn][i] = 0.0f;
    float m[2] = {-WRING_INF, -WRING_INF}, l[2] = {0.0f, 0.0f};

    // NB buffers: stages s + 1 .. s + NB - 1 are in flight while stage s is used.
#pragma unroll
    for (int i = 0; i < NB - 1; ++i) {
        if (i < stages) fl_fill<D>(fl_smem + i * STAGE, a, bt_off, kvh, i, ctx);
        cp_async_commit();
    }
    const int ir = lane & 7, im = lane >> 3;  // ldmatrix: the row and matrix this lane addresses
    for (int s = 0; s < stages; ++s) {
        if (s + NB - 1 < stages) fl_fill<D>(fl_smem + ((s + NB - 1) % NB) * STAGE, a, bt_off, kvh, s + NB - 1, ctx);
        cp_async_commit();  // empty groups past the end keep the count uniform
        cp_async_wait<NB - 1>();
        __syncthreads();
        const unsigned char* ks_base = fl_smem + (s % NB) * STAGE;
        const unsigned char* vs_base = ks_base + FL_KEYS * D * 2;
        if (s * FL_KEYS <= warp_lim) {
            // S = Q . K^T: n-tile nt holds keys 8nt + 2c, +1 of rows g ([0], [1]), g + 8 ([2], [3]).
            float sc[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int i = 0; i < 4; ++i) sc[nt][i] = 0.0f;
#pragma unroll
                for (int kp = 0; kp < KS / 2; ++kp) {
                    // Matrices: keys 8nt .. + 7 at pieces 4kp .. 4kp + 3 (k-steps 2kp, 2kp + 1).
                    u32 b[4];
                    ldmatrix_x4(b, ks_base + fl_offset<D>(8 * nt + ir, 4 * kp + im));
                    mma_16816(sc[nt], qa[2 * kp][0], qa[2 * kp][1], qa[2 * kp][2], qa[2 * kp][3], b[0], b[1]);
                    mma_16816(sc[nt], qa[2 * kp + 1][0], qa[2 * kp + 1][1], qa[2 * kp + 1][2], qa[2 * kp + 1][3], b[2], b[3]);
                }
            }
            // Causal mask, online softmax (each row's four lanes share its max by two shuffles).
            const int key0 = s * FL_KEYS + 2 * c;
            float mx[2] = {-WRING_INF, -WRING_INF};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int key = key0 + 8 * nt + (i & 1);
                    sc[nt][i] = key <= lim[i >> 1] ? sc[nt][i] * a.scale_log2 : -WRING_INF;
                    mx[i >> 1] = fmaxf(mx[i >> 1], sc[nt][i]);
                }
            float corr[2], m_use[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
                const float m_new = fmaxf(m[h], mx[h]);
                m_use[h] = m_new == -WRING_INF ? 0.0f : m_new;
                corr[h] = exp2f(m[h] - m_use[h]);
                m[h] = m_new;
            }
            float rs[2] = {0.0f, 0.0f};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    sc[nt][i] = exp2f(sc[nt][i] - m_use[i >> 1]);
                    rs[i >> 1] += sc[nt][i];
                }
#pragma unroll
            for (int h = 0; h < 2; ++h) l[h] = l[h] * corr[h] + rs[h];
#pragma unroll
            for (int dn = 0; dn < KS * 2; ++dn) {
                o[dn][0] *= corr[0];
                o[dn][1] *= corr[0];
                o[dn][2] *= corr[1];
                o[dn][3] *= corr[1];
            }
            // O += P . V: k-step kk (keys 16kk ..) takes P from S's n-tiles 2kk, 2kk + 1.
#pragma unroll
            for (int kk = 0; kk < FL_KEYS / 16; ++kk) {
                const u32 p0 = pack_bf16x2(sc[2 * kk][0], sc[2 * kk][1]);
                const u32 p1 = pack_bf16x2(sc[2 * kk][2], sc[2 * kk][3]);
                const u32 p2 = pack_bf16x2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                const u32 p3 = pack_bf16x2(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < KS; ++dp) {
                    // Matrices (transposed): keys 16kk .. + 7 and + 8 .. + 15 at pieces 2dp, 2dp + 1.
                    u32 b[4];
                    ldmatrix_x4_trans(b, vs_base + fl_offset<D>(16 * kk + 8 * (im & 1) + ir, 2 * dp + (im >> 1)));
                    mma_16816(o[2 * dp], p0, p1, p2, p3, b[0], b[1]);
                    mma_16816(o[2 * dp + 1], p0, p1, p2, p3, b[2], b[3]);
                }
            }
        }
        __syncthreads();  // this buffer is refilled next iteration
    }
    cp_async_wait<0>();

    // Normalise and store: lane (g, c) holds dims 8dn + 2c, +1 of rows g and g + 8.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int r = row0 + g + 8 * h;
        if (r >= rows) continue;
        const float inv = 1.0f / sum;
        bf16_t* dst = a.out + (size_t)(q_start + r / G) * width + (size_t)(kvh * G + r % G) * D + 2 * c;
#pragma unroll
        for (int dn = 0; dn < KS * 2; ++dn)
            *(u32*)(dst + 8 * dn) = pack_bf16x2(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv);
    }
}

// One entry point per head_dim (FLASH_HEAD_DIMS in crates/cuda/src/params.rs).
extern "C" __global__ void __launch_bounds__(FL_WARPS * 32) attention_flash_d64(AttnArgs a) { pdl_entry(); attention_flash<64>(a); }
extern "C" __global__ void __launch_bounds__(FL_WARPS * 32) attention_flash_d128(AttnArgs a) { pdl_entry(); attention_flash<128>(a); }
