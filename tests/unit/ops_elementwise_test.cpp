// cpu:: rms_norm, softmax, activations, element-wise helpers and rope against the double
// references on fresh random inputs, for every ISA this CPU has. u = 2^-24 (fp32 unit roundoff);
// each tolerance below counts the fp32 roundings of the fast formula (exp: libm expf <= 2u, the
// AVX-512 exp_ps <= 3u: we allow 3u; libm erfcf <= 8u relative).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using test::Rng;
const double u = std::ldexp(1.0, -24);

std::vector<cpu::Isa> isas() {
    std::vector<cpu::Isa> v{cpu::Isa::kScalar};
    if (cpu::detected_isa() >= cpu::Isa::kAvx2) v.push_back(cpu::Isa::kAvx2);
    if (cpu::detected_isa() >= cpu::Isa::kAvx512) v.push_back(cpu::Isa::kAvx512);
    return v;
}

// Runs body once per ISA (restoring the detected one afterwards).
template <typename F>
void for_each_isa(F&& body) {
    for (cpu::Isa isa : isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        cpu::set_isa(isa);
        body();
    }
    cpu::set_isa(cpu::detected_isa());
}

void rms_norm_case();
TEST(OpsElementwise, RmsNorm) {
    for_each_isa([] { rms_norm_case(); });
}

void softmax_case();
void activations_case();
TEST(OpsElementwise, Softmax) {
    for_each_isa([] { softmax_case(); });
}
TEST(OpsElementwise, Activations) {
    for_each_isa([] { activations_case(); });
}

void rms_norm_case() {
    Rng rng;
    ThreadPool pool(3);
    for (int64_t n : {1, 7, 64, 2048, 5000}) {
        for (NormWeight kind : {NormWeight::kPlain, NormWeight::kOnePlus}) {
            for (bool with_w : {true, false}) {
                const int64_t rows = 5;
                std::vector<float> x = test::random_vec(rng, n * rows, 3.0f), w = test::random_vec(rng, n);
                std::vector<float> y(x.size()), yr(x.size()), yi = x;
                const float* wp = with_w ? w.data() : nullptr;
                ref::rms_norm(x.data(), wp, yr.data(), rows, n, 1e-5f, kind);
                cpu::rms_norm(x.data(), wp, y.data(), rows, n, 1e-5f, kind, &pool);
                cpu::rms_norm(yi.data(), wp, yi.data(), rows, n, 1e-5f, kind);  // in place, no pool
                // sum of squares: 8 (portable) or 16 (AVX-512) fp32 lanes of <= n/8 terms and a
                // <= 8-way lane sum -> (n/8 + 10) u relative;
                // sqrt halves it; /n, +eps, sqrt, 1/x, x*inv, *w (or 1+w): <= 7 u more.
                const double rel = ((static_cast<double>(n) / 8 + 12) / 2 + 7) * u;
                for (size_t i = 0; i < y.size(); ++i) {
                    ASSERT_NEAR(y[i], yr[i], rel * std::fabs(yr[i]) + 1e-30) << "n=" << n << " i=" << i;
                    ASSERT_EQ(yi[i], y[i]);
                }
            }
        }
    }
}

void softmax_case() {
    Rng rng;
    for (int64_t n : {1, 5, 16, 100, 4099}) {
        const int64_t rows = 3;
        std::vector<float> x = test::random_vec(rng, n * rows, 4.0f);
        x[1 % n] = -INFINITY;  // masked entry
        std::vector<float> y = x, yr = x;
        ref::softmax(yr.data(), rows, n);
        cpu::softmax(y.data(), rows, n);
        for (int64_t r = 0; r < rows; ++r) {
            float mx = -INFINITY;
            for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[r * n + i]);
            for (int64_t i = 0; i < n; ++i) {
                const size_t k = static_cast<size_t>(r * n + i);
                // exp argument rounding u|x - max|, exp 3u, sum (n/8 + 10)u, 1/sum and product 2u.
                const double d = std::isinf(x[k]) ? 0.0 : std::fabs(static_cast<double>(x[k]) - mx);
                const double rel = (d + 3 + static_cast<double>(n) / 8 + 12) * u;
                ASSERT_NEAR(y[k], yr[k], rel * yr[k] + 1e-37) << "n=" << n << " i=" << i;
            }
        }
    }
    std::vector<float> masked(4, -INFINITY);
    cpu::softmax(masked.data(), 1, 4);
    for (float v : masked) EXPECT_EQ(v, 0.0f);
}

void activations_case() {
    Rng rng;
    const int64_t n = 10007;
    std::vector<float> x = test::random_vec(rng, n, 3.0f), up = test::random_vec(rng, n);
    x[0] = -90.0f;  // exp overflow side
    x[1] = 90.0f;
    std::vector<float> y(n), yr(n);

    ref::silu(x.data(), yr.data(), n);
    cpu::silu(x.data(), y.data(), n);
    // exp(-x) 3u; 1 + e: 3u + u; division u -> 5u (+ second order): 6u. Absolute 1e-36: for
    // x < -88.7 exp(-x) overflows fp32 and y flushes to 0, while |y| < 90 e^-88.7 < 3e-37.
    for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[i], yr[i], 6 * u * std::fabs(yr[i]) + 1e-36) << "silu " << x[i];

    ref::swiglu(x.data(), up.data(), yr.data(), n);
    cpu::swiglu(x.data(), up.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[i], yr[i], 7 * u * std::fabs(yr[i]) + 1e-36 * std::max(1.0f, std::fabs(up[i])))
            << "swiglu " << x[i];

    ref::gelu_tanh(x.data(), yr.data(), n);
    cpu::gelu_tanh(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        // z carries ~7 u relative (products, float constants); exp(-2z) then has 14|z| u, plus
        // exp 3u, 1 + e 4u, division u. Absolute 1e-36: exp(-2z) overflow for x < ~-9.4 flushes
        // y (|y| < 3e-38 there) to 0.
        const double v = x[i], z = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
        ASSERT_NEAR(y[i], yr[i], (14 * std::fabs(z) + 9) * u * std::fabs(yr[i]) + 1e-36) << "gelu_tanh " << v;
    }

    ref::gelu_erf(x.data(), yr.data(), n);
    cpu::gelu_erf(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        // s = -x/sqrt2 carries 2u; erfc's log-derivative is <= 2|s| + 1.2; erfcf <= 8 u; 2 products.
        const double s = std::fabs(x[i]) / std::sqrt(2.0);
        ASSERT_NEAR(y[i], yr[i], ((2 * s + 1.2) * s * 2 + 10) * u * std::fabs(yr[i]) + 1e-37)
            << "gelu_erf " << x[i];
    }
}

TEST(OpsElementwise, AddMulScaleBiasAreExact) {
    Rng rng;
    const int64_t rows = 3, n = 1001;
    std::vector<float> a = test::random_vec(rng, rows * n), b = test::random_vec(rng, rows * n),
                       bias = test::random_vec(rng, n);
    std::vector<float> y(a.size()), yr(a.size());
    cpu::add(a.data(), b.data(), y.data(), rows * n);
    ref::add(a.data(), b.data(), yr.data(), rows * n);
    EXPECT_EQ(y, yr);
    cpu::mul(a.data(), b.data(), y.data(), rows * n);
    ref::mul(a.data(), b.data(), yr.data(), rows * n);
    EXPECT_EQ(y, yr);
    cpu::scale(a.data(), 0.37f, y.data(), rows * n);
    ref::scale(a.data(), 0.37f, yr.data(), rows * n);
    EXPECT_EQ(y, yr);
    y = a;
    yr = a;
    cpu::add_bias(y.data(), bias.data(), rows, n);
    ref::add_bias(yr.data(), bias.data(), rows, n);
    EXPECT_EQ(y, yr);
}

TEST(OpsElementwise, RopeTableAndRotation) {
    Rng rng;
    struct Case {
        int n_head, head_dim, n_rot;
        RopeLayout layout;
    };
    const Case cases[] = {{4, 64, 64, RopeLayout::kInterleaved},
                          {3, 128, 128, RopeLayout::kNeox},
                          {2, 80, 32, RopeLayout::kNeox},
                          {5, 96, 48, RopeLayout::kInterleaved}};
    for (const Case& c : cases) {
        const int half = c.n_rot / 2;
        std::vector<float> inv_freq(static_cast<size_t>(half));
        for (int i = 0; i < half; ++i)
            inv_freq[i] = std::pow(10000.0f, -2.0f * i / c.n_rot) * rng.uniform(0.5f, 1.0f);
        const int64_t n_tok = 7;
        std::vector<int64_t> pos(n_tok);
        for (auto& p : pos) p = rng.index(100000);
        std::vector<float> cs(n_tok * half), sn(n_tok * half), csr(cs.size()), snr(sn.size());
        cpu::rope_table(inv_freq.data(), c.n_rot, pos.data(), n_tok, 1.1f, cs.data(), sn.data());
        ref::rope_table(inv_freq.data(), c.n_rot, pos.data(), n_tok, 1.1f, csr.data(), snr.data());
        ASSERT_EQ(cs, csr);
        // x with a token stride larger than n_head * head_dim (e.g. a slice of a fused QKV row).
        const int64_t stride = int64_t{c.n_head} * c.head_dim + 40;
        std::vector<float> x = test::random_vec(rng, n_tok * stride), y = x, yr = x;
        ref::rope(yr.data(), n_tok, c.n_head, c.head_dim, stride, c.n_rot, cs.data(), sn.data(), c.layout);
        cpu::rope(y.data(), n_tok, c.n_head, c.head_dim, stride, c.n_rot, cs.data(), sn.data(), c.layout);
        for (int64_t t = 0; t < n_tok; ++t) {
            for (int h = 0; h < c.n_head; ++h) {
                for (int d = 0; d < c.head_dim; ++d) {
                    const size_t k = static_cast<size_t>(t * stride + h * c.head_dim + d);
                    if (d >= c.n_rot) {
                        ASSERT_EQ(y[k], x[k]);  // partial rotary: untouched
                        continue;
                    }
                    // pair partner and angle index of dim d in this layout
                    const bool neox = c.layout == RopeLayout::kNeox;
                    const int i = neox ? d % half : d / 2;
                    const int partner = neox ? (d < half ? d + half : d - half) : (d ^ 1);
                    const size_t kp = static_cast<size_t>(t * stride + h * c.head_dim + partner);
                    // a*c - b*s in fp32: two products and one sum -> 2u (|a c| + |b s|)
                    const double mag =
                        std::fabs(x[k] * cs[t * half + i]) + std::fabs(x[kp] * sn[t * half + i]);
                    ASSERT_NEAR(y[k], yr[k], 2 * u * mag + 1e-37) << "t=" << t << " h=" << h << " d=" << d;
                }
            }
        }
        // Padding between tokens is untouched.
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t k = int64_t{c.n_head} * c.head_dim; k < stride; ++k)
                ASSERT_EQ(y[t * stride + k], x[t * stride + k]);
    }
}

TEST(OpsElementwise, RopeNeoxMatchesInterleavedOnPermutedDims) {
    // The two layouts are the same rotation on permuted dims: NeoX dim i / i+half pairs are
    // interleaved dims 2i / 2i+1. Catches a layout mix-up that a shared reference would not.
    Rng rng;
    const int hd = 64, half = 32;
    std::vector<float> cs(half), sn(half);
    for (int i = 0; i < half; ++i) {
        const float a = rng.uniform(-3.0f, 3.0f);
        cs[i] = std::cos(a);
        sn[i] = std::sin(a);
    }
    std::vector<float> xi = test::random_vec(rng, hd), xn(hd);
    for (int i = 0; i < half; ++i) {
        xn[i] = xi[2 * i];
        xn[i + half] = xi[2 * i + 1];
    }
    cpu::rope(xi.data(), 1, 1, hd, hd, hd, cs.data(), sn.data(), RopeLayout::kInterleaved);
    cpu::rope(xn.data(), 1, 1, hd, hd, hd, cs.data(), sn.data(), RopeLayout::kNeox);
    for (int i = 0; i < half; ++i) {
        EXPECT_EQ(xn[i], xi[2 * i]);
        EXPECT_EQ(xn[i + half], xi[2 * i + 1]);
    }
}

}  // namespace
}  // namespace pelican
