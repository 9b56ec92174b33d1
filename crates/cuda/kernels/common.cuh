// Shared helpers for every wring kernel. No CUDA headers: NVRTC compiles these
// sources without a toolkit include directory, so bf16 is handled as raw bits.
typedef unsigned short bf16_t;
typedef unsigned int u32;
#define WRING_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float(((u32)h) << 16); }

// Round to nearest even, NaN kept quiet.
__device__ __forceinline__ bf16_t f2bf(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions; `scratch` holds one float per warp. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? scratch[lane] : (-WRING_INF);
    return warp_max(r);
}

// Pool slot of position `pos` of the sequence whose block table starts at `bt_off`.
__device__ __forceinline__ u32 kv_slot(const u32* block_tables, u32 bt_off, u32 pos, int block_size) {
    return block_tables[bt_off + pos / block_size] * block_size + pos % block_size;
}

// Programmatic dependent launch (Hopper): the backend launches each of these kernels with
// programmatic stream serialization, so it may start while the previous kernel drains.
// Every kernel calls this first: it waits until the previous grid has completed and its
// writes are visible (nothing is read or written before), then lets the next kernel's
// blocks be scheduled as this grid's blocks retire. Without a programmatic dependency
// (older GPUs, other launches) both instructions do nothing.
__device__ __forceinline__ void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// One bf16 tensor-core product, D = A (16x16) . B (16x8) + C, f32 accumulators (sm_80+);
// used by the gemv kernels and the attention kernels.
__device__ __forceinline__ void mma_16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, bypassing L1; zero-filled (nothing read) when !ok. The _l2
// form also hints that L2 may fetch the following bytes (weight streams).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
    const u32 s = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async16_l2(void* dst, const void* src, bool ok) {
    const u32 s = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two floats to bf16 (round to nearest even) in one register, `lo` in the low half.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
