// Mixture-of-experts feed-forward (Qwen3-MoE, Mixtral): `Backend::moe_ffn` as seven
// launches (crates/cuda/src/backend/moe.rs). Every grid follows the step's shape alone
// (tokens T, experts E, top_k k, hidden H, expert intermediate I), never the routing, so a
// captured graph replays any step of its shape; nothing is allocated or synchronised.
//
//   moe_to_bf16   an f32 input as bf16 (a model's normed input is bf16 already)
//   moe_router    logits[T][E] = x · routerᵀ in f32: a block per token, a warp per expert
//   moe_route     a thread per token: softmax over all E in f32, the top k (ties to the lower
//                 index), renormalised when asked -> ids[T][k], weights[T][k] in descending
//                 order of weight (`wring_backend::moe::route`); probabilities overwrite the logits
//   moe_group     a block per expert: the pairs p = t·k + slot routed to it, in ascending p
//                 (token order) -> lists[E][T], counts[E]
//   moe_gate_up   grid (E, ⌈I/8⌉), a warp per intermediate column j; a block whose expert has
//                 no pairs returns at once, so a step reads only the experts it routes to
//                 -> m[p][j] = silu(gate_j · x_t) · (up_j · x_t), f32
//   moe_down      grid (E, ⌈H/8⌉), a warp per output column h -> y[p][h] = down_h · m[p], f32
//   moe_combine   a block per token: out[t] = Σ over its experts in ascending expert index of
//                 weight · y, from 0, a rounded product then a rounded add each (the CPU's order)
//
// Determinism: every value is one fixed sequence of f32 operations on its own token's
// inputs — each lane sums its columns in ascending order with explicit fmaf, lanes are
// combined by one butterfly (warp_sum), and which other tokens share an expert (how many,
// in which place of the list) changes only which registers hold a token, never its
// arithmetic. Integer counts and list places are exact. So a token's result does not depend
// on the step it is in, and graph replay equals eager execution bit for bit.
//
// The expert matrices are separate allocations: their addresses travel by value in the
// kernels' parameter (MoeExpertArgs, at most MOE_MAX_EXPERTS of them), so nothing is built
// on the device for them and a captured graph holds them as it holds any argument.
//
// 16-byte loads need rows whose length is a multiple of 8 (H for gate|up and the router, I
// for down); other lengths run the one-value-at-a-time loop alone.

#define MOE_MAX_EXPERTS 256
#define MOE_MAX_TOP_K 32
// Warps (output columns) a block of moe_gate_up / moe_down, and pairs a warp computes at once.
#define MOE_WARPS 8
#define MOE_TOKENS 8

// Mirrored by `MoeExpertArgs` in crates/cuda/src/backend/moe.rs, field for field.
struct MoeExpertArgs {
    const bf16_t* w[MOE_MAX_EXPERTS];  // expert e's matrix: gate|up [2I][H] or down [H][I]
    const void* input;                 // moe_gate_up: bf16 x[T][H]; moe_down: f32 m[T·k][I]
    float* out;                        // moe_gate_up: m[T·k][I]; moe_down: y[T·k][H]
    const int* counts;                 // [E]: pairs routed to each expert
    const int* lists;                  // [E][T]: those pairs (t·k + slot), ascending
    int tokens;                        // T (the row stride of `lists`)
    int top_k;
    int n_in;                          // H for gate|up, I for down
    int n_out;                         // I for gate|up (the matrix has 2I rows), H for down
};

__device__ __forceinline__ bool moe_is_nan(float v) { return v != v; }

// Eight bf16 of a 16-byte load, element 2i in the low half of word i.
__device__ __forceinline__ void moe_unpack8(uint4 v, float* f) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// Values 8·c8 .. 8·c8 + 7 of a row (16-byte aligned: the row starts at a multiple of 8 values).
__device__ __forceinline__ void moe_load8(const bf16_t* row, int c8, float* f) {
    moe_unpack8(((const uint4*)row)[c8], f);
}
__device__ __forceinline__ void moe_load8(const float* row, int c8, float* f) {
    const float4 a = ((const float4*)row)[2 * c8], b = ((const float4*)row)[2 * c8 + 1];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ float moe_load1(const bf16_t* row, int c) { return bf2f(row[c]); }
__device__ __forceinline__ float moe_load1(const float* row, int c) { return row[c]; }

// How many leading values of an n-value row the 16-byte loop covers, in groups of 8.
__device__ __forceinline__ int moe_vec8(int n) { return (n % 8 == 0) ? n / 8 : 0; }

// Rust's f32::total_cmp order as a signed integer (what `route` sorts probabilities by).
__device__ __forceinline__ int moe_order_key(float f) {
    const int i = __float_as_int(f);
    return i ^ (int)(((u32)(i >> 31)) >> 1);
}

extern "C" __global__ void moe_to_bf16(const float* __restrict__ x, bf16_t* __restrict__ out, long n) { pdl_entry();
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = f2bf(x[i]);
}

// logits[t][e] = x[t] · router[e] (f32 router [E][cols]); blockIdx.x = t, warp w takes
// experts w, w + warps, ... (a warp's experts are uniform over its lanes).
extern "C" __global__ void moe_router(const bf16_t* __restrict__ x, const float* __restrict__ router,
                                      float* __restrict__ logits, int experts, int cols) { pdl_entry();
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bf16_t* xr = x + (size_t)t * cols;
    const int nvec = moe_vec8(cols);
    for (int e = warp; e < experts; e += warps) {
        const float* r = router + (size_t)e * cols;
        float acc = 0.0f;
        for (int c8 = lane; c8 < nvec; c8 += 32) {
            float xf[8], rf[8];
            moe_load8(xr, c8, xf);
            moe_load8(r, c8, rf);
#pragma unroll
            for (int q = 0; q < 8; ++q) acc = fmaf(xf[q], rf[q], acc);
        }
        for (int c = nvec * 8 + lane; c < cols; c += 32) acc = fmaf(moe_load1(xr, c), r[c], acc);
        acc = warp_sum(acc);
        if (lane == 0) logits[(size_t)t * experts + e] = acc;
    }
}

// `wring_backend::moe::route` for token t = blockIdx.x * blockDim.x + threadIdx.x, step by
// step: the max of the non-NaN logits; exp(l - max) (0 for NaN) summed in expert order; each
// divided by the sum; the k largest by total order, ties to the lower index (a later expert
// replaces the best only when strictly greater); their sum in that order and, when
// `renormalize`, each divided by it if it is positive. top_k <= experts <= MOE_MAX_EXPERTS.
// (A row without a finite logit has NaN probabilities, whose sign differs between the host
// and the GPU, so only such a row may route otherwise than on the CPU.)
extern "C" __global__ void moe_route(float* __restrict__ probs, int* __restrict__ ids,
                                     float* __restrict__ weights, int tokens, int experts,
                                     int top_k, int renormalize) { pdl_entry();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= tokens) return;
    float* p = probs + (size_t)t * experts;
    float mx = (-WRING_INF);
    for (int e = 0; e < experts; ++e)
        if (!moe_is_nan(p[e])) mx = fmaxf(mx, p[e]);
    float sum = 0.0f;
    for (int e = 0; e < experts; ++e) {
        const float v = moe_is_nan(p[e]) ? 0.0f : expf(p[e] - mx);
        p[e] = v;
        sum += v;
    }
    for (int e = 0; e < experts; ++e) p[e] = p[e] / sum;
    u32 taken[MOE_MAX_EXPERTS / 32];
    for (int i = 0; i < MOE_MAX_EXPERTS / 32; ++i) taken[i] = 0u;
    int* id = ids + (size_t)t * top_k;
    float* w = weights + (size_t)t * top_k;
    float total = 0.0f;
    for (int j = 0; j < top_k; ++j) {
        int best = -1, best_key = 0;
        for (int e = 0; e < experts; ++e) {
            if ((taken[e >> 5] >> (e & 31)) & 1u) continue;
            const int key = moe_order_key(p[e]);
            if (best < 0 || key > best_key) {
                best = e;
                best_key = key;
            }
        }
        taken[best >> 5] |= 1u << (best & 31);
        id[j] = best;
        w[j] = p[best];
        total += p[best];
    }
    if (renormalize && total > 0.0f)
        for (int j = 0; j < top_k; ++j) w[j] = w[j] / total;
}

// Expert blockIdx.x's pairs: every p < pairs with ids[p] == e, in ascending p, into
// lists[e][0..counts[e]) (an expert appears at most once in a token's k slots, so at most
// `tokens` pairs). The pairs are visited in tiles of blockDim.x (a multiple of 32, at most
// 1024); a hit's place is the hits before it in the tile (earlier warps' counts, then the
// lower lanes of its own ballot) after the hits of the earlier tiles.
extern "C" __global__ void moe_group(const int* __restrict__ ids, int pairs, int tokens,
                                     int* __restrict__ lists, int* __restrict__ counts) { pdl_entry();
    __shared__ int warp_hits[32];
    const int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int* list = lists + (size_t)e * tokens;
    int filled = 0;  // hits of the earlier tiles: the same value in every thread
    for (int base = 0; base < pairs; base += blockDim.x) {
        const int p = base + threadIdx.x;
        const bool hit = p < pairs && ids[p] == e;
        const u32 ballot = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_hits[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, tile = 0;
        for (int w = 0; w < warps; ++w) {
            const int n = warp_hits[w];
            if (w < warp) before += n;
            tile += n;
        }
        if (hit) list[filled + before + __popc(ballot & ((1u << lane) - 1u))] = p;
        filled += tile;
        __syncthreads();  // warp_hits is written again by the next tile
    }
    if (threadIdx.x == 0) counts[e] = filled;
}

// acc[r][s] = w[r] · in[s] over n_in values for NW bf16 weight rows and the first nt <=
// MOE_TOKENS input rows, by one warp (every lane gets the sums): each lane's columns in
// ascending order (16-byte groups, then the rest one at a time), then warp_sum. The
// operations for in[s] are the same whatever s and nt are.
template <typename In, int NW>
__device__ __forceinline__ void moe_warp_dots(const bf16_t* const* w, const In* const* in, int nt,
                                              int n_in, float (*acc)[MOE_TOKENS]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < NW; ++r)
#pragma unroll
        for (int s = 0; s < MOE_TOKENS; ++s) acc[r][s] = 0.0f;
    const int nvec = moe_vec8(n_in);
    for (int c8 = lane; c8 < nvec; c8 += 32) {
        float wf[NW][8];
#pragma unroll
        for (int r = 0; r < NW; ++r) moe_load8(w[r], c8, wf[r]);
#pragma unroll
        for (int s = 0; s < MOE_TOKENS; ++s) {
            if (s < nt) {
                float xf[8];
                moe_load8(in[s], c8, xf);
#pragma unroll
                for (int r = 0; r < NW; ++r)
#pragma unroll
                    for (int q = 0; q < 8; ++q) acc[r][s] = fmaf(wf[r][q], xf[q], acc[r][s]);
            }
        }
    }
    for (int c = nvec * 8 + lane; c < n_in; c += 32) {
        float wv[NW];
#pragma unroll
        for (int r = 0; r < NW; ++r) wv[r] = bf2f(w[r][c]);
#pragma unroll
        for (int s = 0; s < MOE_TOKENS; ++s) {
            if (s < nt) {
                const float xv = moe_load1(in[s], c);
#pragma unroll
                for (int r = 0; r < NW; ++r) acc[r][s] = fmaf(wv[r], xv, acc[r][s]);
            }
        }
    }
#pragma unroll
    for (int s = 0; s < MOE_TOKENS; ++s) {
        if (s < nt) {
#pragma unroll
            for (int r = 0; r < NW; ++r) acc[r][s] = warp_sum(acc[r][s]);
        }
    }
}

// Expert blockIdx.x, intermediate column j = blockIdx.y * MOE_WARPS + warp: for each of its
// pairs p (token p / k), m[p][j] = silu(g) · u with g, u the dots of x[token] with gate row
// j and up row I + j. Blocks and warps past the work return before any warp-wide step.
extern "C" __global__ void __launch_bounds__(32 * MOE_WARPS) moe_gate_up(const MoeExpertArgs a) { pdl_entry();
    const int e = blockIdx.x;
    const int j = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    const int n = a.counts[e];
    if (n == 0 || j >= a.n_out) return;
    const bf16_t* w = a.w[e];
    const bf16_t* rows[2] = {w + (size_t)j * a.n_in, w + (size_t)(a.n_out + j) * a.n_in};
    const int* list = a.lists + (size_t)e * a.tokens;
    const bf16_t* x = (const bf16_t*)a.input;
    for (int i0 = 0; i0 < n; i0 += MOE_TOKENS) {
        const int nt = min(MOE_TOKENS, n - i0);
        int pair[MOE_TOKENS];
        const bf16_t* in[MOE_TOKENS];
#pragma unroll
        for (int s = 0; s < MOE_TOKENS; ++s) {
            pair[s] = s < nt ? list[i0 + s] : 0;
            in[s] = x + (size_t)(pair[s] / a.top_k) * a.n_in;
        }
        float acc[2][MOE_TOKENS];
        moe_warp_dots<bf16_t, 2>(rows, in, nt, a.n_in, acc);
        if ((threadIdx.x & 31) == 0) {
#pragma unroll
            for (int s = 0; s < MOE_TOKENS; ++s) {
                if (s < nt) {
                    const float g = acc[0][s];
                    a.out[(size_t)pair[s] * a.n_out + j] = g / (1.0f + __expf(-g)) * acc[1][s];
                }
            }
        }
    }
}

// Expert blockIdx.x, output column h = blockIdx.y * MOE_WARPS + warp: y[p][h] = down row h ·
// m[p] for each of its pairs p.
extern "C" __global__ void __launch_bounds__(32 * MOE_WARPS) moe_down(const MoeExpertArgs a) { pdl_entry();
    const int e = blockIdx.x;
    const int h = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    const int n = a.counts[e];
    if (n == 0 || h >= a.n_out) return;
    const bf16_t* rows[1] = {a.w[e] + (size_t)h * a.n_in};
    const int* list = a.lists + (size_t)e * a.tokens;
    const float* m = (const float*)a.input;
    for (int i0 = 0; i0 < n; i0 += MOE_TOKENS) {
        const int nt = min(MOE_TOKENS, n - i0);
        int pair[MOE_TOKENS];
        const float* in[MOE_TOKENS];
#pragma unroll
        for (int s = 0; s < MOE_TOKENS; ++s) {
            pair[s] = s < nt ? list[i0 + s] : 0;
            in[s] = m + (size_t)pair[s] * a.n_in;
        }
        float acc[1][MOE_TOKENS];
        moe_warp_dots<float, 1>(rows, in, nt, a.n_in, acc);
        if ((threadIdx.x & 31) == 0) {
#pragma unroll
            for (int s = 0; s < MOE_TOKENS; ++s)
                if (s < nt) a.out[(size_t)pair[s] * a.n_out + h] = acc[0][s];
        }
    }
}

// out[t][c] = Σ weights[t][s] · y[t·k + s][c] over the token's slots in ascending expert
// index (thread 0 sorts the k slots by id: ids of a token are distinct), starting from 0
// with each product and each sum rounded on its own (__fmul_rn / __fadd_rn: never fused).
extern "C" __global__ void moe_combine(const int* __restrict__ ids, const float* __restrict__ weights,
                                       const float* __restrict__ y, float* __restrict__ out,
                                       int top_k, int cols) { pdl_entry();
    __shared__ int order[MOE_MAX_TOP_K];
    const int t = blockIdx.x;
    const int* id = ids + (size_t)t * top_k;
    if (threadIdx.x == 0) {
        for (int j = 0; j < top_k; ++j) {
            int i = j;
            while (i > 0 && id[order[i - 1]] > id[j]) {
                order[i] = order[i - 1];
                --i;
            }
            order[i] = j;
        }
    }
    __syncthreads();
    const float* w = weights + (size_t)t * top_k;
    const float* yt = y + (size_t)t * top_k * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < top_k; ++j) {
            const int s = order[j];
            acc = __fadd_rn(acc, __fmul_rn(w[s], yt[(size_t)s * cols + c]));
        }
        out[(size_t)t * cols + c] = acc;
    }
}
