// Rotary position embedding in place on f32 rows `[T][n_heads*head_dim]`.
// inv_freq is precomputed on the host with any scaling (llama3, linear) applied.
// The angle is formed in double so long positions keep their precision.
extern "C" __global__ void rope(float* __restrict__ x, const u32* __restrict__ positions,
                                const float* __restrict__ inv_freq, int n_heads, int head_dim,
                                int interleaved) {
    const int half = head_dim / 2;
    const double pos = (double)positions[blockIdx.x];
    float* row = x + (size_t)blockIdx.x * n_heads * head_dim;
    for (int p = threadIdx.x; p < n_heads * half; p += blockDim.x) {
        const int h = p / half, i = p % half;
        double s, c;
        sincos(pos * (double)inv_freq[i], &s, &c);
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        float* head = row + h * head_dim;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * (float)c - x1 * (float)s;
        head[b] = x0 * (float)s + x1 * (float)c;
    }
}
