// One launch for a run of a step's kernels (WRING_CUDA_PERSISTENT=on): the bf16 gemv forms
// (q|k|v with RoPE and the K/V store, o and down with the residual add, gate|up with SiLU,
// the norm prologue: gemv.cu) and decode attention (attention/mma.cu) of every layer, as a
// list of ops in device memory that a grid of one block per SM walks in order. An op is the
// launch it replaces: its kernel, its grid and its argument struct; each block takes the
// op's virtual blocks b = blockIdx.x, blockIdx.x + gridDim.x, ... and runs the same device
// function the one-op kernel runs with blockIdx = b, so every value is that kernel's bits.
// Between ops, a grid barrier (an arrival counter in global memory, zeroed by the host
// before the launch) stands where a kernel boundary was: the writes of every block of op i
// are visible to every block of op i + 1 (fence, release add, acquire spin, fence), and
// the K/V pools written by op i are read through L2 (WRING_PERSISTENT: ld.global.cg).
// What it removes is the launch and drain between kernels: the 135M decode step runs 275
// kernels in 0.98 ms against ~0.06 ms of weight reads (results/2026-12-03-decode-latency).

#define PK_GEMV_STORE 0
#define PK_GEMV_SILU 1
#define PK_GEMV_QKV 2
#define PK_ATTENTION 3
// The attention build of each head_dim: the default's (prefetching for 64, serial for 128;
// host: kernels.rs `persistent_attention_build`).
#define PK_MMA_BUILD(D) ((D) == 64 ? MMA_PREFETCH : MMA_SERIAL)

// Mirrored by `PersistentOp` in crates/cuda/src/persistent.rs.
struct PkOp {
    int kind;
    u32 gx, gy, gz;
    union {
        GemvArgs g;
        AttnArgs at;
    };
};

// Every block arrives, then waits until all gridDim.x blocks have arrived `target /
// gridDim.x` times in all. A wait of seconds means a block never came (the grid was not all
// resident): the kernel traps, so the step fails with an error instead of hanging the GPU.
__device__ __forceinline__ void pk_grid_barrier(u32* bar, u32 target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
        u32 seen;
        unsigned long long spins = 0;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(bar) : "memory");
            if (seen >= target) break;
            if (++spins > (1ull << 24)) __trap();
        }
        __threadfence();
    }
    __syncthreads();
}

template <int TB, int D>
__device__ __forceinline__ void persistent_ops(const PkOp* ops, int n_ops, u32* bar) {
    extern __shared__ __align__(128) unsigned char pk_smem[];
    __shared__ __align__(16) PkOp op;
    pdl_entry();
    for (int i = 0; i < n_ops; ++i) {
        const u32* src = (const u32*)(ops + i);
        for (int j = threadIdx.x; j < (int)(sizeof(PkOp) / 4); j += blockDim.x) ((u32*)&op)[j] = src[j];
        __syncthreads();
        const u32 blocks = op.gx * op.gy * op.gz;
        for (u32 b = blockIdx.x; b < blocks; b += gridDim.x) {
            const int x = b % op.gx, y = (b / op.gx) % op.gy, z = b / (op.gx * op.gy);
            switch (op.kind) {
                case PK_GEMV_STORE: gemv<GV_BF16, GV_STORE, TB>(op.g, pk_smem, x, y, false); break;
                case PK_GEMV_SILU: gemv<GV_BF16, GV_SILU, TB>(op.g, pk_smem, x, y, false); break;
                case PK_GEMV_QKV: gemv<GV_BF16, GV_QKV, TB>(op.g, pk_smem, x, y, false); break;
                default: attention_mma<D, 1, PK_MMA_BUILD(D)>(op.at, x, y, z); break;
            }
            // The next virtual block reuses the shared memory.
            __syncthreads();
        }
        if (i + 1 < n_ops) pk_grid_barrier(bar, (u32)(i + 1) * gridDim.x);
    }
}

// Dynamic shared memory: the gemv's (GvSmem<GV_BF16, TB>::BYTES, host:
// params.rs `persistent_smem_bytes`, allowed at load); attention_mma's register builds need none.
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t1_d64(const PkOp* ops, int n, u32* bar) { persistent_ops<1, 64>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t2_d64(const PkOp* ops, int n, u32* bar) { persistent_ops<2, 64>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t4_d64(const PkOp* ops, int n, u32* bar) { persistent_ops<4, 64>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t8_d64(const PkOp* ops, int n, u32* bar) { persistent_ops<8, 64>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t1_d128(const PkOp* ops, int n, u32* bar) { persistent_ops<1, 128>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t2_d128(const PkOp* ops, int n, u32* bar) { persistent_ops<2, 128>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t4_d128(const PkOp* ops, int n, u32* bar) { persistent_ops<4, 128>(ops, n, bar); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) persistent_t8_d128(const PkOp* ops, int n, u32* bar) { persistent_ops<8, 128>(ops, n, bar); }
