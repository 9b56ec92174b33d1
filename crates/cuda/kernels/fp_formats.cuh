// Decoding the small float formats (same values as crates/backend/src/quant/fp.rs), shared
// by quant_gemm.cu and gemv.cu (kernels.rs puts this file before each).

// E4M3 byte -> f32 (finite codes): exponent and mantissa bits placed in an f32 are the
// value times 2^-120; the power-of-two product is exact (subnormals included).
__device__ __forceinline__ float e4m3_to_f32(u32 b) {
    return __uint_as_float(((b & 0x7Fu) << 20) | ((b & 0x80u) << 24)) * __uint_as_float((127u + 120u) << 23);
}

// E2M1 code (low 4 bits) -> f32, the same trick with bias 1 (times 2^126).
__device__ __forceinline__ float e2m1_to_f32(u32 c) {
    return __uint_as_float(((c & 7u) << 22) | ((c & 8u) << 28)) * __uint_as_float((127u + 126u) << 23);
}
