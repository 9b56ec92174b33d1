// Just enough of CUDA to run a wring kernel source unchanged on the host (g++ -std=c++20),
// on one OS thread: a block's threads are fibers (ucontext) run round-robin, each until it
// returns or waits at a barrier; __syncthreads releases when every thread of the block that
// has not returned waits there (as on a GPU), and a warp's shuffles and ballots exchange
// values through a per-warp buffer between two warp-wide barriers. A barrier nobody can
// release (threads of one block waiting at different barriers) is reported as a deadlock; a
// warp-wide step after some lane of the warp returned is reported as divergence (undefined
// on a GPU). __shared__ variables are function statics (blocks run one after another).
// Float arithmetic is the host's IEEE single precision: compile with -ffp-contract=off so
// nothing is fused that the kernel does not fuse (fmaf is fused in both).
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
// 16-byte aligned as on the GPU, so -fsanitize=alignment reports a misaligned vector load.
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(n)

using std::max;
using std::min;

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return std::exp(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline unsigned long long __cvta_generic_to_shared(const void*) { return 0; }

namespace emu {
enum State { Runnable, AtBlockBarrier, AtWarpBarrier, Done };
constexpr size_t STACK = 256 << 10;

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    State state = Runnable;
};

inline ucontext_t scheduler;
inline std::vector<Fiber> fibers;
inline unsigned current = 0;
inline const std::function<void()>* body = nullptr;
inline float shfl_f[1024];
inline unsigned shfl_u[1024];
inline bool diverged = false;

inline void wait(State s) {
    fibers[current].state = s;
    swapcontext(&fibers[current].ctx, &scheduler);
}

inline void entry() {
    (*body)();
    fibers[current].state = Done;
    // Returning resumes uc_link (the scheduler).
}

// Releases the barriers every live thread concerned waits at; false if none could be.
inline bool release(unsigned threads) {
    bool any = false;
    bool all_block = true, some_block = false;
    for (unsigned t = 0; t < threads; ++t) {
        if (fibers[t].state == Done) continue;
        if (fibers[t].state == AtBlockBarrier) some_block = true;
        else all_block = false;
    }
    if (some_block && all_block) {
        for (unsigned t = 0; t < threads; ++t)
            if (fibers[t].state == AtBlockBarrier) fibers[t].state = Runnable;
        any = true;
    }
    for (unsigned w = 0; w < threads / 32; ++w) {
        bool all = true, some = false, exited = false;
        for (unsigned t = 32 * w; t < 32 * w + 32; ++t) {
            if (fibers[t].state == Done) { exited = true; continue; }
            if (fibers[t].state == AtWarpBarrier) some = true;
            else all = false;
        }
        if (some && all) {
            if (exited) diverged = true;
            for (unsigned t = 32 * w; t < 32 * w + 32; ++t)
                if (fibers[t].state == AtWarpBarrier) fibers[t].state = Runnable;
            any = true;
        }
    }
    return any;
}

// Runs `kernel` over `grid` blocks of `threads` threads (a multiple of 32, at most 1024),
// block after block.
inline void launch(dim3 grid, unsigned threads, std::function<void()> kernel) {
    if (threads % 32 != 0 || threads > 1024) { std::fprintf(stderr, "bad blockDim %u\n", threads); std::exit(2); }
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    body = &kernel;
    if (fibers.size() < threads) fibers.resize(threads);
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = dim3{x, y, z};
                for (unsigned t = 0; t < threads; ++t) {
                    Fiber& f = fibers[t];
                    if (f.stack.empty()) f.stack.resize(STACK);
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.data();
                    f.ctx.uc_stack.ss_size = f.stack.size();
                    f.ctx.uc_link = &scheduler;
                    makecontext(&f.ctx, entry, 0);
                    f.state = Runnable;
                }
                for (;;) {
                    bool ran = false, live = false;
                    for (unsigned t = 0; t < threads; ++t) {
                        if (fibers[t].state != Done) live = true;
                        if (fibers[t].state != Runnable) continue;
                        current = t;
                        threadIdx = dim3{t, 0, 0};
                        swapcontext(&scheduler, &fibers[t].ctx);
                        ran = true;
                    }
                    if (!live) break;
                    if (!ran && !release(threads)) {
                        std::fprintf(stderr, "deadlock in block (%u,%u,%u): threads wait at barriers nobody can release\n", x, y, z);
                        std::exit(3);
                    }
                }
            }
}
}  // namespace emu

inline void __syncthreads() { emu::wait(emu::AtBlockBarrier); }

inline float __shfl_xor_sync(unsigned, float v, int o) {
    const unsigned t = threadIdx.x, lane = t & 31;
    emu::shfl_f[t] = v;
    emu::wait(emu::AtWarpBarrier);
    const float r = emu::shfl_f[(t - lane) + (lane ^ (unsigned)o)];
    emu::wait(emu::AtWarpBarrier);
    return r;
}

inline unsigned __ballot_sync(unsigned, bool p) {
    const unsigned t = threadIdx.x, base = t & ~31u;
    emu::shfl_u[t] = p ? 1u : 0u;
    emu::wait(emu::AtWarpBarrier);
    unsigned r = 0;
    for (unsigned i = 0; i < 32; ++i) r |= emu::shfl_u[base + i] << i;
    emu::wait(emu::AtWarpBarrier);
    return r;
}
