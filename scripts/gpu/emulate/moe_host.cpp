// Runs crates/cuda/kernels/moe.cu unchanged on the host (cuda_host.h) with the launches of
// CudaBackend::moe_ffn_op (crates/cuda/src/backend/moe.rs: same kernels, grids, block sizes
// and arguments, in the same order; keep the two in step) and checks, for several layer
// shapes and token counts:
//   - the routing: ids equal to `wring_backend::moe::route` of the token's logits (a
//     transcription below; exact ties come from experts with equal router rows; tokens whose
//     k-th and (k+1)-th probabilities differ by less than 1e-5 are counted, not compared),
//     weights within 1e-6;
//   - the expert lists: each expert's pairs ascending, every pair exactly once;
//   - the combine: each token's output is the sum of its pairs' weight · y from 0 in
//     ascending expert order, bit for bit;
//   - the output against a float64 evaluation of the CPU backend's moe_ffn on the same bf16
//     weights and input (relative error per token, 1e-4 allowed: only f32 rounding differs);
//   - determinism (two runs, same bits) and batch invariance (a token alone, or among the
//     step's tokens in reverse order, gives the same bits as in the step).
// Built and run by moe.py (`python3 scripts/gpu/emulate moe`).
#include "cuda_host.h"
#include "common.cuh"
#include "moe.cu"

#include <random>
#include <string>

namespace {

struct Layer {
    const char* name;
    int E, k, H, I;
    bool renorm;
    std::vector<float> router;                   // [E][H]
    std::vector<std::vector<bf16_t>> gate_up;    // [E][2I][H]
    std::vector<std::vector<bf16_t>> down;       // [E][H][I]
};

std::mt19937 rng(7);
float uniform(float a) { return std::uniform_real_distribution<float>(-a, a)(rng); }

Layer make_layer(const char* name, int E, int k, int H, int I, bool renorm) {
    Layer L{name, E, k, H, I, renorm, {}, {}, {}};
    const float r = 3.0f / std::sqrt((float)H);  // logits of a few units: distinct probabilities
    for (int i = 0; i < E * H; ++i) L.router.push_back(uniform(r));
    // Experts 3 and E - 1 route exactly as 1 and 0 do: exact ties, which go to the lower index.
    if (E >= 5)
        for (int h = 0; h < H; ++h) {
            L.router[(size_t)3 * H + h] = L.router[(size_t)1 * H + h];
            L.router[(size_t)(E - 1) * H + h] = L.router[h];
        }
    for (int e = 0; e < E; ++e) {
        std::vector<bf16_t> gu((size_t)2 * I * H), d((size_t)H * I);
        for (auto& v : gu) v = f2bf(uniform(1.7f / std::sqrt((float)H)));
        for (auto& v : d) v = f2bf(uniform(1.7f / std::sqrt((float)I)));
        L.gate_up.push_back(gu);
        L.down.push_back(d);
    }
    return L;
}

struct Run {
    std::vector<float> out;     // [T][H]
    std::vector<int> ids;       // [T][k]
    std::vector<float> weights; // [T][k]
    std::vector<int> counts;    // [E]
    std::vector<int> lists;     // [E][T]
    std::vector<float> y;       // [T·k][H]: each pair's expert output
};

unsigned blocks(size_t n, size_t per) { return (unsigned)((n + per - 1) / per); }

// CudaBackend::moe_ffn_op on a bf16 input x[T][H]. Buffers start as NaN / -1, as the arena
// holds whatever the last step left.
Run run_op(const Layer& L, const std::vector<bf16_t>& x, int T) {
    const int E = L.E, k = std::min(L.k, L.E), H = L.H, I = L.I;
    Run r;
    r.out.assign((size_t)T * H, NAN);
    std::vector<float> logits((size_t)T * E, NAN), m((size_t)T * k * I, NAN);
    std::vector<float>& y = r.y;
    y.assign((size_t)T * k * H, NAN);
    r.ids.assign((size_t)T * k, -1);
    r.weights.assign((size_t)T * k, NAN);
    r.lists.assign((size_t)E * T, -1);
    r.counts.assign(E, -1);
    if (T > 0) emu::launch({(unsigned)T}, 256, [&] { moe_router(x.data(), L.router.data(), logits.data(), E, H); });
    if (T > 0)
        emu::launch({blocks(T, 128)}, 128, [&] {
            moe_route(logits.data(), r.ids.data(), r.weights.data(), T, E, k, L.renorm ? 1 : 0);
        });
    emu::launch({(unsigned)E}, 256, [&] { moe_group(r.ids.data(), T * k, T, r.lists.data(), r.counts.data()); });
    MoeExpertArgs a{}, b{};
    for (int e = 0; e < E; ++e) {
        a.w[e] = L.gate_up[e].data();
        b.w[e] = L.down[e].data();
    }
    a.input = x.data(); a.out = m.data(); a.counts = r.counts.data(); a.lists = r.lists.data();
    a.tokens = T; a.top_k = k; a.n_in = H; a.n_out = I;
    b.input = m.data(); b.out = y.data(); b.counts = r.counts.data(); b.lists = r.lists.data();
    b.tokens = T; b.top_k = k; b.n_in = I; b.n_out = H;
    emu::launch({(unsigned)E, blocks(I, MOE_WARPS)}, 32 * MOE_WARPS, [&] { moe_gate_up(a); });
    emu::launch({(unsigned)E, blocks(H, MOE_WARPS)}, 32 * MOE_WARPS, [&] { moe_down(b); });
    if (T > 0)
        emu::launch({(unsigned)T}, 256, [&] {
            moe_combine(r.ids.data(), r.weights.data(), y.data(), r.out.data(), k, H);
        });
    return r;
}

// wring_backend::moe::route, transcribed: softmax in f32 (NaN as smallest), top k by
// total order with ties to the lower index, renormalised when asked.
std::vector<std::pair<int, float>> route(const std::vector<float>& logits, int top_k, bool renorm) {
    const int E = (int)logits.size(), k = std::min(top_k, E);
    float mx = -INFINITY;
    for (float l : logits)
        if (!std::isnan(l)) mx = std::max(mx, l);
    std::vector<float> p(E);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) {
        p[e] = std::isnan(logits[e]) ? 0.0f : std::exp(logits[e] - mx);
        sum += p[e];
    }
    for (auto& v : p) v = v / sum;
    auto key = [](float f) { int i = __float_as_int(f); return i ^ (int)(((unsigned)(i >> 31)) >> 1); };
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(p[a]) > key(p[b]); });
    std::vector<std::pair<int, float>> picked;
    for (int j = 0; j < k; ++j) picked.push_back({order[j], p[order[j]]});
    if (renorm) {
        float total = 0.0f;
        for (auto& q : picked) total += q.second;
        if (total > 0.0f)
            for (auto& q : picked) q.second /= total;
    }
    return picked;
}

double bf(bf16_t v) { return (double)bf2f(v); }

struct Check {
    int failures = 0;
    void fail(const std::string& what) {
        if (++failures <= 20) std::printf("  FAIL %s\n", what.c_str());
    }
};

// The step's result against the references; returns the worst relative error of a token.
double compare(const Layer& L, const std::vector<bf16_t>& x, int T, const Run& r, Check& c, int& near_ties) {
    const int E = L.E, k = std::min(L.k, L.E), H = L.H, I = L.I;
    double worst = 0.0;
    std::vector<int> seen((size_t)T * k, 0);
    for (int e = 0; e < E; ++e) {
        if (r.counts[e] < 0 || r.counts[e] > T) { c.fail(std::string(L.name) + ": count of expert " + std::to_string(e)); continue; }
        for (int i = 0; i < r.counts[e]; ++i) {
            const int p = r.lists[(size_t)e * T + i];
            if (p < 0 || p >= T * k || r.ids[p] != e) { c.fail(std::string(L.name) + ": list entry of expert " + std::to_string(e)); continue; }
            if (i > 0 && r.lists[(size_t)e * T + i - 1] >= p) c.fail(std::string(L.name) + ": list not ascending");
            seen[p]++;
        }
    }
    for (size_t p = 0; p < seen.size(); ++p)
        if (seen[p] != 1) c.fail(std::string(L.name) + ": pair " + std::to_string(p) + " listed " + std::to_string(seen[p]) + " times");
    for (int t = 0; t < T; ++t) {
        std::vector<float> logits(E);
        for (int e = 0; e < E; ++e) {
            double s = 0.0;
            for (int h = 0; h < H; ++h) s += bf(x[(size_t)t * H + h]) * (double)L.router[(size_t)e * H + h];
            logits[e] = (float)s;
        }
        auto want = route(logits, L.k, L.renorm);
        // Near ties: the kernel's f32 logits may order them the other way.
        {
            auto all = route(logits, E, false);
            const float margin = k < E ? all[k - 1].second - all[k].second : 1.0f;
            const bool tie = margin > 0.0f && margin < 1e-5f;  // exact ties are compared
            if (tie) { near_ties++; continue; }
        }
        for (int j = 0; j < k; ++j) {
            if (r.ids[(size_t)t * k + j] != want[j].first)
                c.fail(std::string(L.name) + ": token " + std::to_string(t) + " slot " + std::to_string(j) + " expert " +
                       std::to_string(r.ids[(size_t)t * k + j]) + ", route says " + std::to_string(want[j].first));
            if (std::fabs(r.weights[(size_t)t * k + j] - want[j].second) > 1e-6f)
                c.fail(std::string(L.name) + ": token " + std::to_string(t) + " weight " + std::to_string(j));
        }
        // CpuBackend::moe_ffn in float64: experts in ascending index, out += w · y.
        auto asc = want;
        std::sort(asc.begin(), asc.end());
        std::vector<double> ref(H, 0.0);
        for (auto [e, w] : asc) {
            std::vector<double> m(I);
            for (int i = 0; i < I; ++i) {
                double g = 0.0, u = 0.0;
                for (int h = 0; h < H; ++h) {
                    g += bf(L.gate_up[e][(size_t)i * H + h]) * bf(x[(size_t)t * H + h]);
                    u += bf(L.gate_up[e][(size_t)(I + i) * H + h]) * bf(x[(size_t)t * H + h]);
                }
                m[i] = g / (1.0 + std::exp(-g)) * u;
            }
            for (int h = 0; h < H; ++h) {
                double s = 0.0;
                for (int i = 0; i < I; ++i) s += bf(L.down[e][(size_t)h * I + i]) * m[i];
                ref[h] += (double)w * s;
            }
        }
        // The sum itself, bit for bit: from 0, weight · y rounded, then added, in ascending
        // expert order (the CPU backend's loop).
        std::vector<int> slots(k);
        for (int j = 0; j < k; ++j) slots[j] = j;
        std::sort(slots.begin(), slots.end(), [&](int a, int b) { return r.ids[(size_t)t * k + a] < r.ids[(size_t)t * k + b]; });
        for (int h = 0; h < H; ++h) {
            float acc = 0.0f;
            for (int s : slots) {
                const float prod = r.weights[(size_t)t * k + s] * r.y[((size_t)t * k + s) * H + h];
                acc = acc + prod;
            }
            if (std::memcmp(&acc, &r.out[(size_t)t * H + h], 4) != 0) {
                c.fail(std::string(L.name) + ": token " + std::to_string(t) + " is not the ascending-expert sum of its pairs");
                break;
            }
        }
        double num = 0.0, den = 1e-30;
        for (int h = 0; h < H; ++h) {
            const double got = r.out[(size_t)t * H + h];
            if (!std::isfinite(got)) { num = INFINITY; break; }
            num = std::max(num, std::fabs(got - ref[h]));
            den = std::max(den, std::fabs(ref[h]));
        }
        worst = std::max(worst, num / den);
    }
    if (!(worst <= 1e-4)) c.fail(std::string(L.name) + ": output relative error " + std::to_string(worst) + " with " + std::to_string(T) + " tokens");
    return worst;
}

bool same_row(const Run& a, int ta, const Run& b, int tb, int H) {
    return std::memcmp(&a.out[(size_t)ta * H], &b.out[(size_t)tb * H], (size_t)H * 4) == 0;
}

std::vector<bf16_t> tokens_of(const std::vector<bf16_t>& x, const std::vector<int>& which, int H) {
    std::vector<bf16_t> out;
    for (int t : which) out.insert(out.end(), x.begin() + (size_t)t * H, x.begin() + (size_t)(t + 1) * H);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    // `quick`: the first two shapes at 3 and 37 tokens (for trying a change to the kernel).
    const bool quick = argc > 1 && std::string(argv[1]) == "quick";
    Check c;
    // The tiny transformers-made models' layers (tests/data/hf_tiny), shapes whose rows take
    // the one-value loop (H or I not a multiple of 8), k = E, k > E, and the kernels' limits.
    std::vector<Layer> layers;
    layers.push_back(make_layer("qwen3_moe-tiny E16 k4 H64 I32", 16, 4, 64, 32, true));
    layers.push_back(make_layer("mixtral-tiny E8 k2 H64 I64", 8, 2, 64, 64, true));
    layers.push_back(make_layer("odd E37 k5 H100 I24 unnormalised", 37, 5, 100, 24, false));
    layers.push_back(make_layer("all E5 k6 H40 I12", 5, 6, 40, 12, false));
    layers.push_back(make_layer("limits E256 k32 H16 I8", 256, 32, 16, 8, true));
    if (quick) layers.resize(2);
    for (const Layer& L : layers) {
        std::printf("%s\n", L.name);
        std::vector<int> counts = {1, 3, 37};
        if (L.E <= 16) counts.push_back(300);
        if (quick) counts = {3, 37};  // experts with more than MOE_TOKENS pairs, several group tiles
        for (int T : counts) {
            std::vector<bf16_t> x((size_t)T * L.H);
            for (auto& v : x) v = f2bf(uniform(1.7f));
            Run r = run_op(L, x, T);
            int ties = 0;
            const double worst = compare(L, x, T, r, c, ties);
            std::printf("  T=%-3d worst token rel err %.2e, near ties skipped %d\n", T, worst, ties);
            Run again = run_op(L, x, T);
            if (std::memcmp(r.out.data(), again.out.data(), r.out.size() * 4) != 0) c.fail(std::string(L.name) + ": two runs differ");
            if (T == 37 && L.E <= 37) {
                std::vector<int> rev;
                for (int t = T - 1; t >= 0; --t) rev.push_back(t);
                Run rr = run_op(L, tokens_of(x, rev, L.H), T);
                for (int t = 0; t < T; ++t)
                    if (!same_row(r, t, rr, T - 1 - t, L.H)) c.fail(std::string(L.name) + ": token " + std::to_string(t) + " changes with the step's order");
                for (int t : {0, 17, 36}) {
                    Run one = run_op(L, tokens_of(x, {t}, L.H), 1);
                    if (!same_row(r, t, one, 0, L.H)) c.fail(std::string(L.name) + ": token " + std::to_string(t) + " alone differs");
                }
                std::printf("  T=37 reversed and single tokens: same bits checked\n");
            }
        }
    }
    // moe_to_bf16 (an f32 input): grid as CudaBackend::grid_for.
    {
        const long n = 1000;
        std::vector<float> xf(n);
        std::vector<bf16_t> xb(n, 0xffff);
        for (auto& v : xf) v = uniform(3.0f);
        emu::launch({(unsigned)std::clamp<long>((n + 255) / 256, 1, 132 * 16)}, 256, [&] { moe_to_bf16(xf.data(), xb.data(), n); });
        for (long i = 0; i < n; ++i)
            if (xb[i] != f2bf(xf[i])) { c.fail("moe_to_bf16"); break; }
    }
    if (emu::diverged) c.fail("a warp-wide step ran after some lane of the warp had returned");
    std::printf("%s (%d failures)\n", c.failures ? "FAIL" : "PASS", c.failures);
    return c.failures ? 1 : 0;
}
