// Shared by the GPU sampling tests (cuda_sampling_test.cpp, cuda_sampling_batch_test.cpp): a
// sampling configuration, the draw order and cumulative weights that runtime/sampler.h's rules
// give on logits already rewritten by Sampler::sample, the verdict on a GPU token that differs from
// the CPU's, and the reference log-softmax of a token. Host-only.
//
// Why a GPU token may differ: the softmax weights are expf on the device and exp on the host (a
// few ulp apart) and their cumulative sums are added in another order, so when u * total lies
// within ~1e-6 (relative) of the boundary between two neighbouring candidates of the draw order,
// the two sides may pick either neighbour. Such a mismatch is accepted only when this reference
// walk shows that boundary next to u, and such cases must stay rare.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace pelican::test {

struct SamplingConfig {
    float temperature, top_p, min_p;
    int top_k;
    float rep = 1.0f, freq = 0.0f, pres = 0.0f;
};

inline std::string describe(const SamplingConfig& c) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "T %g top_k %d top_p %g min_p %g rep %g freq %g pres %g", c.temperature,
                  c.top_k, c.top_p, c.min_p, c.rep, c.freq, c.pres);
    return buf;
}

inline bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

// Draw order and cumulative weights of the kept set, from logits already penalised and scaled
// (as Sampler::sample leaves them), following sampler.h.
struct RefDraw {
    std::vector<int32_t> ids;
    std::vector<double> cum;  // inclusive cumulative weight
};
inline RefDraw reference_draw(std::span<const float> l, const SamplingConfig& c) {
    const int64_t n = static_cast<int64_t>(l.size());
    std::vector<int32_t> cand;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
        if (std::isfinite(l[i])) {
            cand.push_back(static_cast<int32_t>(i));
            m = std::max(m, l[i]);
        }
    const auto before = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
    std::sort(cand.begin(), cand.end(), before);
    const bool limited = c.top_k > 0 && c.top_k < n;
    if (limited && static_cast<int64_t>(cand.size()) > c.top_k) cand.resize(static_cast<size_t>(c.top_k));
    std::vector<float> w(cand.size());
    double z = 0;
    for (size_t j = 0; j < cand.size(); ++j) z += w[j] = std::exp(l[cand[j]] - m);
    size_t kept = cand.size();
    if (c.min_p > 0) {
        size_t k2 = 0;
        while (k2 < kept && w[k2] >= c.min_p) ++k2;
        kept = k2;
    }
    if (c.top_p < 1) {
        double cum = 0;
        for (size_t j = 0; j < kept; ++j) {
            cum += w[j] / z;
            if (cum >= c.top_p) {
                kept = j + 1;
                break;
            }
        }
    }
    cand.resize(kept);
    std::vector<float> wk(w.begin(), w.begin() + static_cast<ptrdiff_t>(kept));
    if (!limited && c.top_p >= 1) {  // sampler.cpp draws in id order then
        std::vector<size_t> idx(kept);
        for (size_t j = 0; j < kept; ++j) idx[j] = j;
        std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return cand[a] < cand[b]; });
        std::vector<int32_t> c2;
        std::vector<float> w2;
        for (size_t j : idx) {
            c2.push_back(cand[j]);
            w2.push_back(wk[j]);
        }
        cand = c2;
        wk = w2;
    }
    RefDraw r{cand, {}};
    double s = 0;
    for (float x : wk) r.cum.push_back(s += x);
    return r;
}

// A GPU token `got` that differs from the CPU's `want` (sampling, u the draw): true when both are
// neighbours in the draw order and u * total lies within 1e-6 * total of the boundary between them.
// *why describes the case either way.
inline bool near_boundary(std::span<const float> rewritten, const SamplingConfig& c, double u, int32_t got,
                          int32_t want, std::string* why) {
    const RefDraw r = reference_draw(rewritten, c);
    const auto pos = [&](int32_t id) { return std::find(r.ids.begin(), r.ids.end(), id) - r.ids.begin(); };
    const ptrdiff_t pg = pos(got), pc = pos(want);
    const double total = r.cum.empty() ? 0 : r.cum.back();
    bool ok = false;
    double gap = -1;
    if (pg < static_cast<ptrdiff_t>(r.ids.size()) && pc < static_cast<ptrdiff_t>(r.ids.size())) {
        const ptrdiff_t lo = std::min(pg, pc);
        gap = std::fabs(r.cum[static_cast<size_t>(lo)] - u * total) / total;
        ok = std::abs(pg - pc) == 1 && gap <= 1e-6;
    }
    char buf[300];
    std::snprintf(buf, sizeof buf,
                  "u %.9g: gpu token %d (kept position %td) cpu token %d (position %td), kept %zu, "
                  "|boundary - u| / total %g",
                  u, got, pg, want, pc, r.ids.size(), gap);
    *why = buf;
    return ok;
}

// log p(tok) under the softmax over every finite logit of `rewritten`, in double.
inline double reference_logprob(std::span<const float> rewritten, int32_t tok) {
    double m = -INFINITY;
    for (float x : rewritten)
        if (std::isfinite(x)) m = std::max(m, static_cast<double>(x));
    double z = 0;
    for (float x : rewritten)
        if (std::isfinite(x)) z += std::exp(static_cast<double>(x) - m);
    return (static_cast<double>(rewritten[static_cast<size_t>(tok)]) - m) - std::log(z);
}

// Logits ~ N(0, sigma); with specials, 1% -inf, 20 NaN and 5 +inf (not finite: never sampled).
inline std::vector<float> normal_logits(std::mt19937& rng, int64_t n, float sigma, bool specials) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng);
    if (specials) {
        std::uniform_int_distribution<int64_t> pick(0, n - 1);
        for (int i = 0; i < n / 100; ++i) v[pick(rng)] = -INFINITY;
        for (int i = 0; i < 20; ++i) v[pick(rng)] = NAN;
        for (int i = 0; i < 5; ++i) v[pick(rng)] = INFINITY;
    }
    return v;
}

// A penalty history of len ids below n_vocab with repeats, plus two ids outside the vocabulary.
inline std::vector<int32_t> random_history(std::mt19937& rng, int64_t n_vocab, int len) {
    std::vector<int32_t> h;
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_vocab - 1));
    for (int i = 0; i < len; ++i)
        h.push_back(i % 4 == 3 && !h.empty() ? h[h.size() / 2] : pick(rng));  // repeats
    h.push_back(-5);  // ignored: outside the vocabulary
    h.push_back(static_cast<int32_t>(n_vocab + 10));
    return h;
}

}  // namespace pelican::test
