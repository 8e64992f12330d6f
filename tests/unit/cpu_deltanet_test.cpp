// The CPU delta rule (backend/cpu/deltanet_cpu.h) against the double-precision reference
// ref::gated_delta_rule_recurrent, for both forms (token by token, chunks of 64), on the portable build
// and on the AVX-512 build when the machine has it: outputs and the final state within the fp32 bound,
// across chunk boundaries, from a non-zero state, value heads grouped and tiled, the 35B-A3B head shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/deltanet_cpu.h"
#include "ops/ops.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using test::max_rel_to_largest;
using test::randn;

// fp32 sums of d_k (<= 128) products per output and per state update against double sums, relative to
// the largest magnitude: measured worst 5.6e-7 on the dev VM (the chunked form, 128-wide heads, AVX-512);
// the bound is 64 ulps (2^-24 * 64 = 3.8e-6), about 7x that.
constexpr double kBound = 64.0 / (1 << 24);

void check(const DeltaNetShape& s, int64_t n, cpu::Isa isa, uint32_t seed) {
    SCOPED_TRACE(::testing::Message() << "dk " << s.d_k << " nv " << s.n_v_heads << " tiled " << s.v_tiled
                                      << " n " << n << " isa " << cpu::isa_name(isa));
    std::mt19937 rng(seed);
    std::vector<float> q = randn(static_cast<size_t>(n * s.key_dim()), rng);
    std::vector<float> k = randn(q.size(), rng);
    const std::vector<float> v = randn(static_cast<size_t>(n * s.value_dim()), rng);
    ref::l2norm(q.data(), n * s.n_k_heads, s.d_k);
    ref::l2norm(k.data(), n * s.n_k_heads, s.d_k);
    for (auto& x : q) x /= std::sqrt(static_cast<float>(s.d_k));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> g(static_cast<size_t>(n * s.n_v_heads)), beta(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
        g[i] = u(rng) < 0.1f ? -3.0f * u(rng) : -0.3f * u(rng);
        beta[i] = u(rng);
    }
    const std::vector<float> state0 = randn(static_cast<size_t>(s.state_floats()), rng, 0.3f);
    std::vector<float> s_ref = state0, o_ref(v.size());
    ref::gated_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), n, s, s_ref.data(),
                                    o_ref.data());
    cpu::set_isa(isa);
    ThreadPool pool(2);
    for (bool chunked : {false, true}) {
        std::vector<float> st = state0, o(v.size());
        cpu::gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), n, s, st.data(), o.data(),
                              chunked, pool);
        const double eo = max_rel_to_largest(o, o_ref), es = max_rel_to_largest(st, s_ref);
        EXPECT_LT(eo, kBound) << (chunked ? "chunked" : "recurrent") << " outputs";
        EXPECT_LT(es, kBound) << (chunked ? "chunked" : "recurrent") << " state";
        std::printf("cpu delta rule %s dk %d n %lld %s: outputs %.2e, state %.2e\n", cpu::isa_name(isa),
                    s.d_k, static_cast<long long>(n), chunked ? "chunked" : "recurrent", eo, es);
        // Out of place (state_in read, state written without being read): the same bits, state_in untouched.
        std::vector<float> out_state(state0.size(), NAN), o2(v.size());
        const std::vector<float> in_copy = state0;
        cpu::gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), n, s, out_state.data(),
                              o2.data(), chunked, pool, in_copy.data());
        EXPECT_EQ(out_state, st) << (chunked ? "chunked" : "recurrent") << " out-of-place state";
        EXPECT_EQ(o2, o) << (chunked ? "chunked" : "recurrent") << " out-of-place outputs";
        EXPECT_EQ(in_copy, state0) << "state_in was written";
    }
    cpu::set_isa(cpu::detected_isa());
}

TEST(CpuDeltaRule, BothFormsMatchTheReferenceOnEveryIsa) {
    std::vector<cpu::Isa> isas = {cpu::Isa::kScalar};
    if (cpu::detected_isa() == cpu::Isa::kAvx512) isas.push_back(cpu::Isa::kAvx512);
    uint32_t seed = 3;
    for (cpu::Isa isa : isas) {
        for (bool tiled : {false, true})
            for (int64_t n : {1, 3, 64, 150})
                check({.n_k_heads = 2, .n_v_heads = 4, .d_k = 16, .d_v = 12, .v_tiled = tiled}, n, isa,
                      ++seed);
        check({.n_k_heads = 4, .n_v_heads = 8, .d_k = 128, .d_v = 128, .v_tiled = true}, 70, isa, ++seed);
        check({.n_k_heads = 4, .n_v_heads = 8, .d_k = 128, .d_v = 128, .v_tiled = true}, 1, isa, ++seed);
    }
}

}  // namespace
}  // namespace pelican
