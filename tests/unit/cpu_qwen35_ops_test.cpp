// The CPU versions of the Qwen3.5 hybrid pieces (backend/cpu/qwen35_ops.h, cpu::sigmoid_mul) against the
// double-precision references of ops/ops_qwen35.h, on the portable build and on AVX-512 when present:
// the conv's outputs and rolling state (runs shorter than its history too), the L2 norm, the gates,
// the gated RMSNorm and the sigmoid gate, each within a few fp32 ulps of the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/qwen35_ops.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using test::max_rel_to_largest;
using test::randn;

// fp32 sums of at most a few hundred terms and an exp of <= 3 ulps: 16 ulps of the largest value.
constexpr double kBound = 16.0 / (1 << 24);

class CpuQwen35Ops : public ::testing::TestWithParam<cpu::Isa> {
protected:
    void SetUp() override {
        if (GetParam() == cpu::Isa::kAvx512 && cpu::detected_isa() != cpu::Isa::kAvx512)
            GTEST_SKIP() << "no AVX-512";
        cpu::set_isa(GetParam());
    }
    void TearDown() override { cpu::set_isa(cpu::detected_isa()); }
};

TEST_P(CpuQwen35Ops, ConvOutputsAndRollingState) {
    std::mt19937 rng(1);
    for (int kernel : {4, 2, 8})
        for (int64_t n_tok : {1, 2, 5, 37}) {
            SCOPED_TRACE(::testing::Message() << "kernel " << kernel << " n_tok " << n_tok);
            const int64_t n_ch = 200;  // not a multiple of 16
            const auto x = randn(static_cast<size_t>(n_tok * n_ch), rng);
            const auto w = randn(static_cast<size_t>(n_ch * kernel), rng, 0.5f);
            auto st_ref = randn(static_cast<size_t>((kernel - 1) * n_ch), rng);
            auto st = st_ref;
            std::vector<float> y_ref(x.size()), y(x.size());
            ref::causal_conv1d_silu(x.data(), n_tok, n_ch, kernel, w.data(), st_ref.data(), y_ref.data());
            cpu::causal_conv1d_silu(x.data(), n_tok, n_ch, kernel, w.data(), st.data(), y.data());
            EXPECT_LT(max_rel_to_largest(y, y_ref), kBound);
            EXPECT_EQ(st, st_ref);  // the state is a copy of inputs: exact
        }
}

TEST_P(CpuQwen35Ops, NormsGatesAndSigmoid) {
    std::mt19937 rng(2);
    const int64_t rows = 7, n = 128;
    auto x = randn(static_cast<size_t>(rows * n), rng, 3.0f);
    auto x_ref = x;
    ref::l2norm(x_ref.data(), rows, n);
    cpu::l2norm(x.data(), rows, n);
    EXPECT_LT(max_rel_to_largest(x, x_ref), kBound) << "l2norm";

    const int heads = 32, n_tok = 9;
    const auto a = randn(static_cast<size_t>(n_tok * heads), rng, 4.0f), b = randn(a.size(), rng, 4.0f);
    const auto a_log = randn(heads, rng), dt = randn(heads, rng);
    std::vector<float> g(a.size()), beta(a.size()), g_ref(a.size()), beta_ref(a.size());
    ref::deltanet_gates(a.data(), b.data(), a_log.data(), dt.data(), n_tok, heads, g_ref.data(),
                        beta_ref.data());
    cpu::deltanet_gates(a.data(), b.data(), a_log.data(), dt.data(), n_tok, heads, g.data(), beta.data());
    EXPECT_LT(max_rel_to_largest(g, g_ref), kBound) << "g";
    EXPECT_LT(max_rel_to_largest(beta, beta_ref), kBound) << "beta";

    const auto z = randn(static_cast<size_t>(rows * n), rng, 2.0f), wn = randn(n, rng);
    const auto v = randn(static_cast<size_t>(rows * n), rng);
    std::vector<float> y(v.size()), y_ref(v.size());
    ref::rms_norm_gated(v.data(), z.data(), wn.data(), y_ref.data(), rows, n, 1e-6f);
    cpu::rms_norm_gated(v.data(), z.data(), wn.data(), y.data(), rows, n, 1e-6f);
    EXPECT_LT(max_rel_to_largest(y, y_ref), kBound) << "rms_norm_gated";
    std::vector<float> yy = v;  // in place (y == x), as the hybrid block calls it
    cpu::rms_norm_gated(yy.data(), z.data(), wn.data(), yy.data(), rows, n, 1e-6f);
    EXPECT_EQ(yy, y) << "rms_norm_gated in place";

    auto s = v, s_ref = v;
    ref::sigmoid_gate_mul(s_ref.data(), z.data(), static_cast<int64_t>(s.size()) - 3);  // a tail too
    cpu::sigmoid_mul(s.data(), z.data(), static_cast<int64_t>(s.size()) - 3);
    EXPECT_LT(max_rel_to_largest(s, s_ref), kBound) << "sigmoid_mul";
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuQwen35Ops, ::testing::Values(cpu::Isa::kScalar, cpu::Isa::kAvx512),
                         [](const auto& info) { return std::string(cpu::isa_name(info.param)); });

}  // namespace
}  // namespace pelican
