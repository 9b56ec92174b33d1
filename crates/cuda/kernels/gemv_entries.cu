// The one-op gemv kernels (gemv.cu's device code); persistent.cu runs the same device
// functions inside its own launch.
// One entry per format, epilogue and token bucket (T <= 1, 2, 4, 8): 4 warps a block.
// (The entry names stay written out: kernels.rs reads them from this text.)
#define GV_ONE_OP(F, E, TB)                                                  \
    __shared__ __align__(16) unsigned char smem[GvSmem<F, TB>::BYTES];    \
    gemv<F, E, TB>(a, smem, blockIdx.x, blockIdx.y, true)
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t1(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_STORE, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t2(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_STORE, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t4(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_STORE, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_store_t8(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_STORE, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t1(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_SILU, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t2(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_SILU, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t4(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_SILU, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_silu_t8(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_SILU, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t1(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_QKV, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t2(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_QKV, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t4(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_QKV, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_bf16_qkv_t8(GemvArgs a) { GV_ONE_OP(GV_BF16, GV_QKV, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t1(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_STORE, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t2(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_STORE, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t4(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_STORE, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_store_t8(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_STORE, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t1(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_SILU, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t2(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_SILU, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t4(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_SILU, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_silu_t8(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_SILU, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t1(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_QKV, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t2(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_QKV, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t4(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_QKV, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_fp8_qkv_t8(GemvArgs a) { GV_ONE_OP(GV_FP8, GV_QKV, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t1(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_STORE, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t2(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_STORE, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t4(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_STORE, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_store_t8(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_STORE, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t1(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_SILU, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t2(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_SILU, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t4(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_SILU, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_silu_t8(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_SILU, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t1(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_QKV, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t2(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_QKV, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t4(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_QKV, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_int4_qkv_t8(GemvArgs a) { GV_ONE_OP(GV_INT4, GV_QKV, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t1(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_STORE, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t2(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_STORE, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t4(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_STORE, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_store_t8(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_STORE, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t1(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_SILU, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t2(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_SILU, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t4(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_SILU, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_silu_t8(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_SILU, 8); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t1(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_QKV, 1); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t2(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_QKV, 2); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t4(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_QKV, 4); }
extern "C" __global__ void __launch_bounds__(GV_WARPS * 32) gemv_nvfp4_qkv_t8(GemvArgs a) { GV_ONE_OP(GV_NVFP4, GV_QKV, 8); }
