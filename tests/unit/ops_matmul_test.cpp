// cpu::matmul (every ISA this CPU has, every weight type and layout, 1 and 3 threads) against the
// scalar references on fresh random weights and activations.
//
// Two checks per output y[t, o]:
//  1. Against ref::matmul_act_rounded (same activation rounding, products summed in double). The
//     kernels' integer dot products are exact, so the only difference is fp32 rounding: each
//     partial product carries <= 2 roundings (scale product, fma) and sits on an addition path of
//     at most n_in/16 + 300 fp32 additions (16-lane accumulators over n_in/16 steps plus a 4-level
//     lane reduction; the scalar fallback sums <= 256 products per block, then n_in/32 blocks).
//     Every partial term is bounded by the weight's magnitude incl. its zero point (see
//     partial_magnitude), so |err| <= 2 * (n_in/16 + 300) * 2^-24 * M  with M = sum mag_i |x_i|.
//  2. Against ref::matmul (unrounded activations): the Q8 rounding errors e_i = x^_i - x_i are
//     bounded by d/2 (d = block amax / 127) and, for random inputs, independent and uniform, so
//     sum_i w_i e_i has standard deviation sigma = sqrt(sum_i w_i^2 d_i^2 / 12). We allow 8 sigma
//     (chance of a false failure ~1e-15 per output) plus the fp32 bound of check 1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul_kernels.h"
#include "ops/act_quant.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using test::Rng;

std::vector<cpu::Isa> isas() {
    std::vector<cpu::Isa> v{cpu::Isa::kScalar};
    if (cpu::detected_isa() >= cpu::Isa::kAvx2) v.push_back(cpu::Isa::kAvx2);
    if (cpu::detected_isa() >= cpu::Isa::kAvx512) v.push_back(cpu::Isa::kAvx512);
    return v;
}

struct IsaGuard {
    ~IsaGuard() { cpu::set_isa(cpu::detected_isa()); }
};

// sigma of sum_i w_i (x^_i - x_i) for uniform rounding errors (check 2).
std::vector<double> rounding_sigma(const test::RandomMatrix& m, const float* x) {
    std::vector<double> out(static_cast<size_t>(m.n_out), 0.0);
    const int block = act_quant_block(m.type);
    if (block == 0) return out;
    std::vector<float> w(static_cast<size_t>(m.n_in));
    std::vector<double> d(static_cast<size_t>(m.n_in / block));
    for (int64_t b = 0; b < m.n_in / block; ++b) {
        double amax = 0.0;
        for (int j = 0; j < block; ++j)
            amax = std::max(amax, std::fabs(static_cast<double>(x[b * block + j])));
        d[static_cast<size_t>(b)] = amax / 127.0;
    }
    const int64_t row_bytes = static_cast<int64_t>(*dtype_row_bytes(m.type, static_cast<uint64_t>(m.n_in)));
    for (int64_t o = 0; o < m.n_out; ++o) {
        EXPECT_TRUE(dequantize_row(m.type, m.bytes.data() + o * row_bytes, w.data(), m.n_in).ok());
        double v = 0.0;
        for (int64_t i = 0; i < m.n_in; ++i) {
            const double e = w[i] * d[static_cast<size_t>(i / block)];
            v += e * e / 12.0;
        }
        out[static_cast<size_t>(o)] = std::sqrt(v);
    }
    return out;
}

void check_matmul(Rng& rng, DType t, int64_t n_in, int64_t n_out, int64_t n_tok, bool quantized) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " n_in=" << n_in << " n_out=" << n_out << " n_tok="
                                    << n_tok << (quantized ? " (ref-quantized)" : " (random blocks)"));
    test::RandomMatrix m = test::random_matrix(rng, t, n_in, n_out, quantized);
    const Tensor wt = m.tensor();
    const std::vector<float> x = test::random_vec(rng, n_in * n_tok);
    std::vector<float> y_twin(static_cast<size_t>(n_tok * n_out)), y_exact(y_twin.size());
    ref::matmul_act_rounded(wt, x.data(), n_tok, y_twin.data());
    ref::matmul(wt, x.data(), n_tok, y_exact.data());

    std::vector<std::vector<double>> mag, sigma;
    for (int64_t tok = 0; tok < n_tok; ++tok) {
        mag.push_back(test::partial_magnitude(m, x.data() + tok * n_in));
        sigma.push_back(rounding_sigma(m, x.data() + tok * n_in));
    }
    const double u = std::ldexp(1.0, -24);
    const double k_path = 2.0 * (static_cast<double>(n_in) / 16.0 + 300.0);

    IsaGuard guard;
    for (cpu::Isa isa : isas()) {
        cpu::set_isa(isa);
        for (bool repack : {false, true}) {
            auto w = cpu::Weight::prepare(wt, repack);
            ASSERT_TRUE(w.ok()) << w.error().message;
            for (int threads : {1, 3}) {
                SCOPED_TRACE(testing::Message()
                             << "isa=" << cpu::isa_name(isa) << " repack=" << repack
                             << " layout=" << static_cast<int>(w->layout()) << " threads=" << threads);
                ThreadPool pool(threads);
                std::vector<float> y(y_twin.size(), NAN);
                cpu::matmul(*w, x.data(), n_tok, y.data(), pool);
                for (int64_t tok = 0; tok < n_tok; ++tok) {
                    for (int64_t o = 0; o < n_out; ++o) {
                        const size_t i = static_cast<size_t>(tok * n_out + o);
                        const double tol1 = k_path * u * mag[tok][o] + 1e-30;
                        ASSERT_NEAR(y[i], y_twin[i], tol1) << "vs twin, token " << tok << " row " << o;
                        ASSERT_NEAR(y[i], y_exact[i], 8.0 * sigma[tok][o] + tol1)
                            << "vs exact, token " << tok << " row " << o;
                    }
                }
            }
        }
    }
}

struct Shape {
    int64_t n_in, n_out, n_tok;
};

TEST(OpsMatmul, Block32Types) {
    Rng rng;
    const Shape shapes[] = {{32, 16, 1},  {64, 17, 1},    {256, 48, 3},
                            {512, 33, 5}, {1024, 80, 17}, {2048, 64, 70}};
    for (DType t : {DType::Q4_0, DType::Q8_0})
        for (const Shape& s : shapes)
            for (bool quantized : {false, true}) check_matmul(rng, t, s.n_in, s.n_out, s.n_tok, quantized);
}

TEST(OpsMatmul, KQuantTypes) {
    Rng rng;
    const Shape shapes[] = {{256, 16, 1}, {512, 21, 1}, {768, 40, 4}, {2048, 33, 9}, {1024, 20, 67}};
    for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
        for (const Shape& s : shapes)
            for (bool quantized : {false, true}) {
                if (quantized && !can_quantize(t)) continue;
                check_matmul(rng, t, s.n_in, s.n_out, s.n_tok, quantized);
            }
}

TEST(OpsMatmul, FloatTypes) {
    Rng rng;
    // {1000, 37, 1} and {1040, 45, 1}: decode over several 8-row groups plus leftover rows, with a
    // masked (1000) and a full 16-element (1040) tail after the 32-element steps.
    const Shape shapes[] = {{1, 3, 1},     {16, 5, 1},   {100, 7, 1},   {1000, 37, 1},
                            {1040, 45, 1}, {257, 13, 6}, {1024, 37, 9}, {640, 20, 70}};
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        for (const Shape& s : shapes) check_matmul(rng, t, s.n_in, s.n_out, s.n_tok, true);
}

TEST(OpsMatmul, ActQuantFastEqualsReference) {
    // The SIMD activation quantizers must be bit-identical to the reference: the matmul
    // tolerances above assume both sides round the activations the same way.
    Rng rng;
    std::vector<const cpu::detail::KernelTable*> tables{&cpu::detail::scalar_kernels()};
    if (cpu::detected_isa() >= cpu::Isa::kAvx2) tables.push_back(&cpu::detail::avx2_kernels());
    if (cpu::detected_isa() >= cpu::Isa::kAvx512) tables.push_back(&cpu::detail::avx512_kernels());
    for (const auto* tab : tables) {
        for (int64_t n : {256, 512, 2048}) {
            std::vector<float> x = test::random_vec(rng, n);
            for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero block
            for (int j = 32; j < 64; ++j)
                x[static_cast<size_t>(j)] =
                    127.0f / 4.0f * static_cast<float>(j % 9 - 4) / 2.0f;  // exact .5 ties
            std::vector<int8_t> q(n), qr(n);
            std::vector<float> d(n / 32), dr(n / 32), s(n / 32), sr(n / 32);
            tab->quantize_act32(x.data(), n, q.data(), d.data(), s.data());
            ref::quantize_act_q32(x.data(), n, qr.data(), dr.data(), sr.data());
            EXPECT_EQ(q, qr);
            EXPECT_EQ(d, dr);
            EXPECT_EQ(s, sr);
            std::vector<int16_t> bs(n / 16), bsr(n / 16);
            tab->quantize_act256(x.data(), n, q.data(), d.data(), bs.data());
            ref::quantize_act_q256(x.data(), n, qr.data(), dr.data(), bsr.data());
            EXPECT_EQ(q, qr);
            EXPECT_EQ(std::vector<float>(d.begin(), d.begin() + n / 256),
                      std::vector<float>(dr.begin(), dr.begin() + n / 256));
            EXPECT_EQ(bs, bsr);
        }
    }
}

TEST(OpsMatmul, ScratchSizeAndExplicitScratch) {
    Rng rng;
    test::RandomMatrix m = test::random_matrix(rng, DType::Q4_K, 512, 24, false);
    auto w = cpu::Weight::prepare(m.tensor());
    ASSERT_TRUE(w.ok());
    const int64_t n_tok = 3;
    std::vector<float> x = test::random_vec(rng, 512 * n_tok), y(24 * n_tok), y2(24 * n_tok);
    auto scratch = Buffer::allocate(cpu::matmul_scratch_bytes(512, n_tok));
    ASSERT_TRUE(scratch.ok());
    ThreadPool pool(2);
    cpu::matmul(*w, x.data(), n_tok, y.data(),
                std::span<std::byte>(static_cast<std::byte*>(scratch->data()), scratch->size()), pool);
    cpu::matmul(*w, x.data(), n_tok, y2.data(), pool);
    EXPECT_EQ(y, y2);  // same kernel, same inputs, deterministic split: identical bits
}

TEST(OpsMatmul, MultiEqualsSeparateCalls) {
    // One pass over several weights gives the same bits as one matmul per weight (every output
    // row is computed by the same kernel code whatever the task split), also when the weights
    // need different activation formats (then it runs them one by one).
    Rng rng;
    IsaGuard guard;
    for (cpu::Isa isa : isas()) {
        cpu::set_isa(isa);
        const std::vector<std::vector<DType>> sets = {{DType::Q4_0, DType::Q4_0, DType::Q8_0},
                                                      {DType::Q4_K, DType::Q6_K},
                                                      {DType::F16, DType::Q4_0},
                                                      {DType::Q4_0, DType::Q6_K}};
        for (const auto& types : sets) {
            for (int64_t n_tok : {1, 5, 70}) {
                const int64_t n_in = 512;
                std::vector<test::RandomMatrix> ms;
                std::vector<cpu::Weight> ws;
                for (size_t k = 0; k < types.size(); ++k)
                    ms.push_back(
                        test::random_matrix(rng, types[k], n_in, 16 * static_cast<int64_t>(k) + 40, false));
                for (auto& m : ms) ws.push_back(cpu::Weight::prepare(m.tensor()).value());
                const std::vector<float> x = test::random_vec(rng, n_in * n_tok);
                std::vector<std::vector<float>> y_sep, y_multi;
                std::vector<const cpu::Weight*> wp;
                std::vector<float*> yp;
                ThreadPool pool(3);
                for (auto& w : ws) {
                    y_sep.emplace_back(static_cast<size_t>(w.n_out() * n_tok));
                    y_multi.emplace_back(static_cast<size_t>(w.n_out() * n_tok), NAN);
                    cpu::matmul(w, x.data(), n_tok, y_sep.back().data(), pool);
                    wp.push_back(&w);
                }
                for (auto& y : y_multi) yp.push_back(y.data());
                auto scratch = Buffer::allocate(cpu::matmul_scratch_bytes(n_in, n_tok)).value();
                cpu::matmul_multi(
                    wp, x.data(), n_tok, yp,
                    std::span<std::byte>(static_cast<std::byte*>(scratch.data()), scratch.size()), pool);
                for (size_t k = 0; k < ws.size(); ++k)
                    EXPECT_EQ(y_multi[k], y_sep[k])
                        << cpu::isa_name(isa) << " weight " << k << " n_tok " << n_tok;
            }
        }
    }
}

TEST(OpsMatmul, OwnCopyIsIndependentOfTheSource) {
    Rng rng;
    ThreadPool pool(2);
    for (DType t : {DType::F16, DType::Q4_0, DType::Q6_K}) {
        test::RandomMatrix m = test::random_matrix(rng, t, 512, 40, false);
        const std::vector<float> x = test::random_vec(rng, 512 * 2);
        std::vector<float> y_view(80), y_copy(80);
        auto view = cpu::Weight::prepare(m.tensor(), false, false);
        auto copy = cpu::Weight::prepare(m.tensor(), false, true);
        ASSERT_TRUE(view.ok() && copy.ok());
        EXPECT_EQ(view->data(), m.bytes.data());
        EXPECT_NE(copy->data(), m.bytes.data());
        cpu::matmul(*view, x.data(), 2, y_view.data(), pool);
        std::fill(m.bytes.begin(), m.bytes.end(), uint8_t{0});  // the copy must not notice
        cpu::matmul(*copy, x.data(), 2, y_copy.data(), pool);
        EXPECT_EQ(y_view, y_copy) << dtype_name(t);
    }
}

TEST(OpsMatmul, PrepareRejectsBadWeights) {
    std::vector<uint8_t> bytes(4096);
    auto t3 = *Tensor::contiguous_view(DType::F32, {8, 4, 2}, bytes.data(), "w3");
    EXPECT_FALSE(cpu::Weight::prepare(t3).ok());
    auto tq = *Tensor::contiguous_view(DType::Q4_1, {32, 4}, bytes.data(), "wq41");
    auto r = cpu::Weight::prepare(tq);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("wq41"), std::string::npos);
    EXPECT_FALSE(cpu::matmul_supported(DType::Q4_1));
    EXPECT_TRUE(cpu::matmul_supported(DType::Q6_K));
}

}  // namespace
}  // namespace pelican
