// Replays a trace through ArcticInference 0.3.0's C++ suffix tree directly (no Python), with
// the same semantics as its SuffixDecodingCache and `wring drafter-eval` (corpus order, one
// request at a time): per-request tree over prompt + output, global tree over responses.
// Input (stdin): per request one line "n_prompt n_out" then the prompt ids, then the output ids.
// Usage: native_replay K DEPTH FACTOR OFFSET MIN_PROB < trace.txt
#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "suffix_tree.h"

using Clock = std::chrono::steady_clock;

static double pct_us(std::vector<long long> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    size_t rank = std::min(v.size(), std::max<size_t>(1, (size_t)std::ceil(q * v.size())));
    return v[rank - 1] / 1000.0;
}

int main(int argc, char** argv) {
    if (argc != 6) { fprintf(stderr, "usage: native_replay K DEPTH FACTOR OFFSET MIN_PROB\n"); return 2; }
    int k = atoi(argv[1]), depth = atoi(argv[2]);
    float factor = atof(argv[3]), offset = atof(argv[4]), min_prob = atof(argv[5]);
    SuffixTree global(depth);
    long long steps = 0, emitted = 0, drafted = 0, accepted = 0, cached = 0;
    std::vector<long long> spec_ns, app_ns;
    int n_prompt, n_out, seq = 0;
    while (scanf("%d %d", &n_prompt, &n_out) == 2) {
        std::vector<int32_t> prompt(n_prompt), out(n_out);
        for (auto& t : prompt) scanf("%d", &t);
        for (auto& t : out) scanf("%d", &t);
        auto local = std::make_unique<SuffixTree>(depth);
        local->extend(0, prompt);
        std::vector<int32_t> ctx = prompt;
        size_t pos = 0;
        while (pos < out.size()) {
            size_t start = ctx.size() > (size_t)depth ? ctx.size() - depth : 0;
            std::span<const int32_t> context(ctx.data() + start, ctx.size() - start);
            auto t0 = Clock::now();
            Draft d1 = local->speculate(context, k, factor, offset, min_prob, false);
            Draft d2 = global.speculate(context, k, factor, offset, min_prob, false);
            Draft& d = d1.score >= d2.score ? d1 : d2;
            auto t1 = Clock::now();
            size_t a = 0;
            while (a < d.token_ids.size() && pos + a < out.size() && d.token_ids[a] == out[pos + a]) a++;
            size_t n = std::min(a + 1, out.size() - pos);
            std::span<const int32_t> emit(out.data() + pos, n);
            auto t2 = Clock::now();
            local->extend(0, emit);
            global.extend(seq, emit);
            auto t3 = Clock::now();
            ctx.insert(ctx.end(), emit.begin(), emit.end());
            steps++; emitted += n; drafted += d.token_ids.size(); accepted += a;
            spec_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
            app_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t3 - t2).count());
            pos += n;
        }
        cached += out.size();
        seq++;
    }
    size_t mem = global.estimate_memory();
    printf("{\"k\": %d, \"steps\": %lld, \"tokens_per_step\": %.4f, \"accept_rate\": %.4f, "
           "\"speculate_us_p50\": %.3f, \"speculate_us_p99\": %.3f, \"append_us_p50\": %.3f, "
           "\"append_us_p99\": %.3f, \"global_memory_bytes\": %zu, \"bytes_per_cached_token\": %.1f}\n",
           k, steps, (double)emitted / steps, drafted ? (double)accepted / drafted : 0.0,
           pct_us(spec_ns, 0.5), pct_us(spec_ns, 0.99), pct_us(app_ns, 0.5), pct_us(app_ns, 0.99),
           mem, (double)mem / cached);
}
