// The attention_mma kernels (mma.cu's device code); persistent.cu runs the prefetching build
// inside its own launch.
// One entry point per (head_dim, row tiles) the host may pick (MMA_ROW_TILES in
// crates/cuda/src/params.rs); written out so the loader can find the names. The default
// (WRING_CUDA_ATTENTION=mma) prefetches for head_dim 64 and takes `_serial` for 128;
// `_staged` is `mma-staged`; `mma-serial` takes `_serial` everywhere (the earlier default).
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d64_n1(AttnArgs a) { pdl_entry(); attention_mma<64, 1, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d64_n2(AttnArgs a) { pdl_entry(); attention_mma<64, 2, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d64_n3(AttnArgs a) { pdl_entry(); attention_mma<64, 3, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d64_n4(AttnArgs a) { pdl_entry(); attention_mma<64, 4, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d64_n6(AttnArgs a) { pdl_entry(); attention_mma<64, 6, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d128_n1(AttnArgs a) { pdl_entry(); attention_mma<128, 1, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d128_n2(AttnArgs a) { pdl_entry(); attention_mma<128, 2, MMA_PREFETCH>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_d128_n3(AttnArgs a) { pdl_entry(); attention_mma<128, 3, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }  // prefetching spills (ptxas: 56 bytes)
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d64_n1(AttnArgs a) { pdl_entry(); attention_mma<64, 1, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d64_n2(AttnArgs a) { pdl_entry(); attention_mma<64, 2, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d64_n3(AttnArgs a) { pdl_entry(); attention_mma<64, 3, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d64_n4(AttnArgs a) { pdl_entry(); attention_mma<64, 4, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d64_n6(AttnArgs a) { pdl_entry(); attention_mma<64, 6, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d128_n1(AttnArgs a) { pdl_entry(); attention_mma<128, 1, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d128_n2(AttnArgs a) { pdl_entry(); attention_mma<128, 2, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_serial_d128_n3(AttnArgs a) { pdl_entry(); attention_mma<128, 3, MMA_SERIAL>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d64_n1(AttnArgs a) { pdl_entry(); attention_mma<64, 1, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d64_n2(AttnArgs a) { pdl_entry(); attention_mma<64, 2, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d64_n3(AttnArgs a) { pdl_entry(); attention_mma<64, 3, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d64_n4(AttnArgs a) { pdl_entry(); attention_mma<64, 4, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d64_n6(AttnArgs a) { pdl_entry(); attention_mma<64, 6, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d128_n1(AttnArgs a) { pdl_entry(); attention_mma<128, 1, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d128_n2(AttnArgs a) { pdl_entry(); attention_mma<128, 2, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) attention_mma_staged_d128_n3(AttnArgs a) { pdl_entry(); attention_mma<128, 3, MMA_STAGED>(a, blockIdx.x, blockIdx.y, blockIdx.z); }
