// Scalar references of the Qwen3.5 hybrid blocks (ops/ops_qwen35.h): the chunked gated delta rule
// equals the token-by-token recurrence (across chunk boundaries, from a non-zero state, and when
// prefill and decode are mixed), the causal conv's rolling state makes split runs equal one run,
// and the MoE router's top-k / renormalisation / tie rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"
#include "ops/ops_qwen35.h"

namespace pelican {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f, float offset = 0.0f) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * nd(rng);
    return v;
}

double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
    double scale = 0, d = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
        d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    return d / std::max(scale, 1e-30);
}

// Random DeltaNet inputs as the layer produces them: L2-normed q, k (q scaled by 1/sqrt(dk)),
// g <= 0 (mostly mild decay, some strong), beta in (0, 1).
struct GdnInputs {
    DeltaNetShape s;
    int64_t n = 0;
    std::vector<float> q, k, v, g, beta, state;
};

GdnInputs make_inputs(const DeltaNetShape& s, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    GdnInputs in;
    in.s = s;
    in.n = n;
    in.q = randn(static_cast<size_t>(n * s.key_dim()), rng);
    in.k = randn(static_cast<size_t>(n * s.key_dim()), rng);
    in.v = randn(static_cast<size_t>(n * s.value_dim()), rng);
    ref::l2norm(in.q.data(), n * s.n_k_heads, s.d_k);
    ref::l2norm(in.k.data(), n * s.n_k_heads, s.d_k);
    for (auto& x : in.q) x /= std::sqrt(static_cast<float>(s.d_k));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    in.g.resize(static_cast<size_t>(n * s.n_v_heads));
    in.beta.resize(in.g.size());
    for (size_t i = 0; i < in.g.size(); ++i) {
        in.g[i] = u(rng) < 0.1f ? -3.0f * u(rng) : -0.3f * u(rng);
        in.beta[i] = u(rng);
    }
    in.state = randn(static_cast<size_t>(s.state_floats()), rng, 0.3f);
    return in;
}

TEST(GatedDeltaRule, ChunkedEqualsRecurrentAcrossChunks) {
    const DeltaNetShape s{.n_k_heads = 2, .n_v_heads = 4, .d_k = 16, .d_v = 12};
    for (const auto& [n, chunk] :
         {std::pair<int64_t, int>{150, 64}, {64, 64}, {37, 16}, {1, 64}, {129, 64}}) {
        const GdnInputs in = make_inputs(s, n, 11 + static_cast<uint32_t>(n));
        std::vector<float> s_rec = in.state, s_chk = in.state;
        std::vector<float> o_rec(static_cast<size_t>(n * s.value_dim())), o_chk(o_rec.size());
        ref::gated_delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n,
                                        s, s_rec.data(), o_rec.data());
        ref::gated_delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n,
                                      s, s_chk.data(), o_chk.data(), chunk);
        EXPECT_LT(max_rel(o_chk, o_rec), 1e-5) << "n " << n << " chunk " << chunk;
        EXPECT_LT(max_rel(s_chk, s_rec), 1e-5) << "n " << n << " chunk " << chunk;
        double mx = 0;
        for (float x : o_rec) mx = std::max(mx, std::abs(static_cast<double>(x)));
        EXPECT_GT(mx, 1e-2);  // not a vacuous comparison
    }
}

TEST(GatedDeltaRule, PrefillThenDecodeEqualsTokenByToken) {
    const DeltaNetShape s{.n_k_heads = 1, .n_v_heads = 3, .d_k = 8, .d_v = 8};
    const int64_t n = 140, split = 100;
    const GdnInputs in = make_inputs(s, n, 5);
    std::vector<float> s_all = in.state, s_mix = in.state;
    std::vector<float> o_all(static_cast<size_t>(n * s.value_dim())), o_mix(o_all.size());
    for (int64_t t = 0; t < n; ++t)  // one token per call, as decode runs
        ref::gated_delta_rule_recurrent(in.q.data() + t * s.key_dim(), in.k.data() + t * s.key_dim(),
                                        in.v.data() + t * s.value_dim(), in.g.data() + t * s.n_v_heads,
                                        in.beta.data() + t * s.n_v_heads, 1, s, s_all.data(),
                                        o_all.data() + t * s.value_dim());
    ref::gated_delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), split,
                                  s, s_mix.data(), o_mix.data());
    ref::gated_delta_rule_recurrent(in.q.data() + split * s.key_dim(), in.k.data() + split * s.key_dim(),
                                    in.v.data() + split * s.value_dim(), in.g.data() + split * s.n_v_heads,
                                    in.beta.data() + split * s.n_v_heads, n - split, s, s_mix.data(),
                                    o_mix.data() + split * s.value_dim());
    EXPECT_LT(max_rel(o_mix, o_all), 1e-5);
    EXPECT_LT(max_rel(s_mix, s_all), 1e-5);
}

TEST(GatedDeltaRule, OneStepByHand) {
    // d_k = d_v = 1: S' = S e^g + k beta (v - S e^g k); out = S' q.
    const DeltaNetShape s{.n_k_heads = 1, .n_v_heads = 1, .d_k = 1, .d_v = 1};
    const float q = 0.5f, k = 1.0f, v = 2.0f, g = -0.25f, beta = 0.75f;
    float S = 0.4f, out = 0;
    ref::gated_delta_rule_recurrent(&q, &k, &v, &g, &beta, 1, s, &S, &out);
    const double sd = 0.4 * std::exp(-0.25);
    const double want_s = sd + 0.75 * (2.0 - sd);
    EXPECT_NEAR(S, want_s, 1e-6);
    EXPECT_NEAR(out, 0.5 * want_s, 1e-6);
}

TEST(CausalConv, RollingStateSplitEqualsWhole) {
    std::mt19937 rng(3);
    const int64_t C = 10, n = 23;
    const int K = 4;
    const auto x = randn(static_cast<size_t>(n * C), rng);
    const auto w = randn(static_cast<size_t>(C * K), rng, 0.5f);
    std::vector<float> st_all((K - 1) * C, 0.0f), y_all(static_cast<size_t>(n * C));
    ref::causal_conv1d_silu(x.data(), n, C, K, w.data(), st_all.data(), y_all.data());
    // The first token sees zero padding: y = silu(w[c, K-1] * x).
    for (int64_t c = 0; c < C; ++c) {
        const double a = static_cast<double>(w[c * K + K - 1]) * x[c];
        EXPECT_NEAR(y_all[c], a / (1 + std::exp(-a)), 1e-6);
    }
    for (const int64_t split : {int64_t{1}, int64_t{2}, int64_t{17}}) {
        std::vector<float> st((K - 1) * C, 0.0f), y(y_all.size());
        ref::causal_conv1d_silu(x.data(), split, C, K, w.data(), st.data(), y.data());
        for (int64_t t = split; t < n; ++t)  // then decode, one token at a time
            ref::causal_conv1d_silu(x.data() + t * C, 1, C, K, w.data(), st.data(), y.data() + t * C);
        EXPECT_EQ(y, y_all) << "split " << split;
        EXPECT_EQ(st, st_all) << "split " << split;
    }
    // The state holds the last K-1 inputs.
    for (int r = 0; r < K - 1; ++r)
        for (int64_t c = 0; c < C; ++c) EXPECT_EQ(st_all[r * C + c], x[(n - (K - 1) + r) * C + c]);
}

TEST(MoeRouter, TopKRenormalisedAndTiesByLowerId) {
    std::mt19937 rng(9);
    const int E = 8, k = 3;
    const int64_t n = 50;
    auto logits = randn(static_cast<size_t>(n * E), rng, 2.0f);
    // Token 0: a three-way tie at the top, token 1: all equal.
    for (int e = 0; e < E; ++e) logits[e] = (e == 2 || e == 5 || e == 6) ? 3.0f : 0.0f;
    for (int e = 0; e < E; ++e) logits[E + e] = 1.0f;
    std::vector<int32_t> ids(static_cast<size_t>(n * k));
    std::vector<float> w(ids.size());
    ref::moe_route(logits.data(), n, E, k, true, ids.data(), w.data());
    EXPECT_EQ((std::vector<int32_t>(ids.begin(), ids.begin() + 3)), (std::vector<int32_t>{2, 5, 6}));
    EXPECT_EQ((std::vector<int32_t>(ids.begin() + 3, ids.begin() + 6)), (std::vector<int32_t>{0, 1, 2}));
    for (int64_t t = 0; t < n; ++t) {
        double sum = 0;
        for (int j = 0; j < k; ++j) {
            sum += w[t * k + j];
            if (j) {
                EXPECT_GE(w[t * k + j - 1], w[t * k + j]);
            }
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);
        // Every unselected expert has a logit no larger than the selected ones.
        float min_sel = INFINITY;
        for (int j = 0; j < k; ++j) min_sel = std::min(min_sel, logits[t * E + ids[t * k + j]]);
        for (int e = 0; e < E; ++e)
            if (std::find(&ids[t * k], &ids[t * k] + k, e) == &ids[t * k] + k) {
                EXPECT_LE(logits[t * E + e], min_sel);
            }
        // Renormalised weights are ratios of exp(logit).
        const double r =
            std::exp(static_cast<double>(logits[t * E + ids[t * k]]) - logits[t * E + ids[t * k + 1]]);
        EXPECT_NEAR(w[t * k] / w[t * k + 1], r, 1e-5 * r);
    }
    // Without renormalisation the weights are the softmax probabilities.
    ref::moe_route(logits.data() + E, 1, E, k, false, ids.data(), w.data());
    EXPECT_NEAR(w[0], 1.0 / E, 1e-7);
}

TEST(MoeExperts, SelectedExpertsOnly) {
    std::mt19937 rng(21);
    const int64_t e = 12, ff = 7, n = 3;
    const int E = 4, k = 2;
    std::vector<std::vector<float>> store;
    std::vector<ref::ExpertTensors> ex(E);
    const auto mk = [&](int64_t n_in, int64_t n_out) {
        store.push_back(randn(static_cast<size_t>(n_in * n_out), rng, 0.3f));
        return Tensor::contiguous_view(DType::F32, {n_in, n_out}, store.back().data(), "w").value();
    };
    store.reserve(3 * E);
    for (auto& x : ex) {
        x.gate = mk(e, ff);
        x.up = mk(e, ff);
        x.down = mk(ff, e);
    }
    const auto x = randn(static_cast<size_t>(n * e), rng);
    const std::vector<int32_t> ids = {3, 0, 1, 3, 2, 1};
    const std::vector<float> wts = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f};
    std::vector<float> y(static_cast<size_t>(n * e));
    ref::moe_experts(x.data(), n, e, ex, ids.data(), wts.data(), k, y.data());
    for (int64_t t = 0; t < n; ++t) {
        std::vector<double> want(static_cast<size_t>(e), 0.0);
        for (int j = 0; j < k; ++j) {
            const auto& X = ex[static_cast<size_t>(ids[t * k + j])];
            const auto* G = static_cast<const float*>(X.gate.data);
            const auto* U = static_cast<const float*>(X.up.data);
            const auto* D = static_cast<const float*>(X.down.data);
            std::vector<double> h(static_cast<size_t>(ff));
            for (int64_t f = 0; f < ff; ++f) {
                double gg = 0, uu = 0;
                for (int64_t i = 0; i < e; ++i) {
                    gg += static_cast<double>(G[f * e + i]) * x[t * e + i];
                    uu += static_cast<double>(U[f * e + i]) * x[t * e + i];
                }
                h[f] = gg / (1 + std::exp(-gg)) * uu;
            }
            for (int64_t o = 0; o < e; ++o) {
                double acc = 0;
                for (int64_t f = 0; f < ff; ++f) acc += static_cast<double>(D[o * ff + f]) * h[f];
                want[o] += wts[t * k + j] * acc;
            }
        }
        for (int64_t o = 0; o < e; ++o) EXPECT_NEAR(y[t * e + o], want[o], 1e-5) << t << " " << o;
    }
}

TEST(Qwen35Elementwise, NormsGatesAndSplit) {
    std::mt19937 rng(4);
    const int64_t n = 16;
    auto x = randn(n * 2, rng), z = randn(n * 2, rng), w = randn(n, rng, 0.2f, 1.0f);
    std::vector<float> y(x.size());
    ref::rms_norm_gated(x.data(), z.data(), w.data(), y.data(), 2, n, 1e-6f);
    for (int r = 0; r < 2; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
        const double inv = 1 / std::sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; ++i) {
            const double zz = z[r * n + i];
            EXPECT_NEAR(y[r * n + i], w[i] * x[r * n + i] * inv * zz / (1 + std::exp(-zz)), 1e-5);
        }
    }
    auto l = x;
    ref::l2norm(l.data(), 2, n);
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(l[i]) * l[i];
    EXPECT_NEAR(ss, 1.0, 1e-5);

    const float a[2] = {0.3f, -2.0f}, b[2] = {0.0f, 1.0f}, a_log[2] = {0.0f, std::log(2.0f)},
                dt[2] = {0.5f, -0.5f};
    float g[2], beta[2];
    ref::deltanet_gates(a, b, a_log, dt, 1, 2, g, beta);
    EXPECT_NEAR(beta[0], 0.5, 1e-7);
    EXPECT_NEAR(beta[1], 1 / (1 + std::exp(-1.0)), 1e-6);
    EXPECT_NEAR(g[0], -std::log1p(std::exp(0.8)), 1e-6);
    EXPECT_NEAR(g[1], -2.0 * std::log1p(std::exp(-2.5)), 1e-6);

    // q_proj rows per head: [q (hd) | gate (hd)].
    const int nh = 2, hd = 3;
    std::vector<float> qg(2 * nh * 2 * hd);
    for (size_t i = 0; i < qg.size(); ++i) qg[i] = static_cast<float>(i);
    std::vector<float> q(2 * nh * hd), gate(q.size());
    ref::split_query_gate(qg.data(), 2, nh, hd, q.data(), gate.data());
    EXPECT_EQ(q, (std::vector<float>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}));
    EXPECT_EQ(gate, (std::vector<float>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
    std::vector<float> o = {2.0f, 2.0f};
    const float gg[2] = {0.0f, 100.0f};
    ref::sigmoid_gate_mul(o.data(), gg, 2);
    EXPECT_FLOAT_EQ(o[0], 1.0f);
    EXPECT_FLOAT_EQ(o[1], 2.0f);
}

}  // namespace
}  // namespace pelican
