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
