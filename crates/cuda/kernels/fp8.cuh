// E4M3 activations for the FP8 W8A8 GEMMs (concatenated before norm.cu, elementwise.cu
// and quant_gemm.cu by kernels.rs): the encoder, and the per-token scale rule every
// producer of a GEMM input shares, so a fused producer writes exactly the codes
// fp8_quantize_rows would write from the same bf16 row.

// f32 -> E4M3, round to nearest even, saturating at +-448 (the CPU encoder's rule).
__device__ __forceinline__ u32 f32_to_e4m3(float x) {
    const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
    const float a = fabsf(x);
    if (a != a) return 0x7Fu;
    if (a >= 448.0f) return sign | 0x7Eu;
    // Below 2^-6: subnormal steps of 2^-9 (a rounded code 8 is 2^-6 itself).
    if (a < 0.015625f) return sign | (u32)rintf(a * 512.0f);
    const u32 u = __float_as_uint(a);
    int e = (int)(u >> 23) - 127;
    // The top 3 of f32's 23 mantissa bits, rounded (exact: an integer times 2^-20).
    u32 mant = (u32)rintf((float)(u & 0x7FFFFFu) * 9.5367431640625e-07f);
    if (mant == 8u) { mant = 0u; e += 1; }
    u32 code = ((u32)(e + 7) << 3) | mant;
    return sign | (code > 0x7Eu ? 0x7Eu : code);
}

// Per-token scale of a row whose largest |value| is `amax` (1 for an all-zero row).
__device__ __forceinline__ float fp8_row_scale(float amax) {
    return amax > 0.0f ? amax / 448.0f : 1.0f;
}
