// PrefillMatmul (backend/cuda/prefill_matmul.h) against ref::matmul (double sums of the exactly
// dequantized weights) for all seven GPU weight types, n_tok 1 / 7 / 64 / 300, and matrices split
// into several weight tiles with a last partial tile (PELICAN_PREFILL_TILE_MIB=1 at init).
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): all
// seven types, the plain-rows GEMM and the dequantized-tile path, stacked parts, realistic
// quantized codes and several tiles with a partial last one all still run, with n_tok 1 / 7
// instead of 1 / 7 / 64 / 300 and the tiled matrix at n_out 1100 (3 F16 tiles of 512 / 512 / 76
// rows, 5 F32 tiles of 256 ... 76) at n_tok 7 / 64 instead of n_out 2500 at n_tok 7 / 300.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/prefill_matmul.h"
#include "backend/cuda/tuning.h"
#include "core/dequantize.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::Rng;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_K, DType::Q6_K};

// Error model per output o, with M = sum_i |w_i| |x_i| and k = n_in:
//   F32:  fp32 GEMM (no TF32): |err| <= k 2^-24 M (worst case of any summation order).
//   F16 / BF16 weights: W exact in its type, x rounded to it (relative u = 2^-11 / 2^-8, plus
//         2^-25 absolute for F16 subnormals), fp32 accumulation:  (u + k 2^-24) M + 2^-25 sum|w|.
//   quantized: W dequantized exactly, then rounded to F16 (u = 2^-11, 2^-25 absolute below
//         2^-14), x rounded to F16:  (2u + u^2 + k 2^-24) M + 2^-25 (sum|w| + sum|x|) + tiny.
// The worst-case k 2^-24 term is far above real GEMM error, so the L2 relative error is also
// checked: <= 1e-5 for F32 (exact fp32 path) and <= 2u for the rounded types.
struct Bound {
    double rel_m, abs_w, abs_x, l2;
};
Bound bound_for(DType t, int64_t n_in) {
    const double acc = static_cast<double>(n_in) * 0x1p-24;
    switch (t) {
        case DType::F32:
            return {acc, 0, 0, 1e-5};
        case DType::F16:
            return {0x1p-11 + acc, 0x1p-25, 0, 2 * 0x1p-11};
        case DType::BF16:
            return {0x1p-8 + acc, 0, 0, 2 * 0x1p-8};
        default:
            return {2 * 0x1p-11 + 0x1p-22 + acc, 0x1p-25, 0x1p-25, 4 * 0x1p-11};
    }
}

struct Case {
    DType type;
    int64_t n_in, n_out, n_tok;
    bool quantized;  // realistic codes from the reference quantizer instead of random blocks
    int parts;       // upload as this many stacked parts
};

std::string describe(const Case& c) {
    return std::string(dtype_name(c.type)) + " n_in " + std::to_string(c.n_in) + " n_out " +
           std::to_string(c.n_out) + " n_tok " + std::to_string(c.n_tok) + (c.quantized ? " quantized" : "") +
           " parts " + std::to_string(c.parts);
}

void run_case(cuda::PrefillMatmul& mm, const Case& c) {
    SCOPED_TRACE(describe(c));
    Rng rng;
    test::RandomMatrix w = test::random_matrix(rng, c.type, c.n_in, c.n_out, c.quantized);
    const std::vector<float> x = test::random_vec(rng, c.n_tok * c.n_in);
    std::vector<float> want(static_cast<size_t>(c.n_tok * c.n_out));
    ref::matmul(w.tensor(), x.data(), c.n_tok, want.data());

    const size_t row_bytes = *dtype_row_bytes(c.type, static_cast<uint64_t>(c.n_in));
    std::vector<cuda::HostRows> parts;
    int64_t r0 = 0;
    for (int p = 0; p < c.parts; ++p) {
        const int64_t rows = p + 1 < c.parts ? c.n_out / c.parts : c.n_out - r0;
        parts.push_back({w.bytes.data() + r0 * row_bytes, row_bytes, rows});
        r0 += rows;
    }
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(c.type, c.n_in, parts.data(), c.parts, gm, nullptr, &err)) << err;

    DeviceBuffer d_x(x.size() * sizeof(float)), d_y(want.size() * sizeof(float));
    ASSERT_TRUE(d_x.ok() && d_y.ok());
    ASSERT_EQ(cudaMemcpy(d_x.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_y.get(), 0xff, want.size() * sizeof(float)), cudaSuccess);  // NaN: unwritten shows
    mm.run(gm, d_x.as<float>(), c.n_tok, d_y.as<float>(), nullptr);
    std::vector<float> got(want.size());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_y.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cuda::free_matrix(gm);

    // Per-output magnitudes from the exactly dequantized weights.
    std::vector<float> wf(static_cast<size_t>(c.n_in * c.n_out));
    for (int64_t o = 0; o < c.n_out; ++o)
        ASSERT_TRUE(dequantize_row(c.type, w.bytes.data() + o * row_bytes, &wf[o * c.n_in], c.n_in).ok());
    const Bound b = bound_for(c.type, c.n_in);
    double err2 = 0, ref2 = 0, worst = 0;
    int bad = 0;
    for (int64_t t = 0; t < c.n_tok; ++t) {
        const float* xt = &x[t * c.n_in];
        double sum_x = 0;
        for (int64_t i = 0; i < c.n_in; ++i) sum_x += std::fabs(xt[i]);
        for (int64_t o = 0; o < c.n_out; ++o) {
            const float* wo = &wf[o * c.n_in];
            double m = 0, sum_w = 0;
            for (int64_t i = 0; i < c.n_in; ++i) {
                m += std::fabs(double{wo[i]} * xt[i]);
                sum_w += std::fabs(wo[i]);
            }
            const size_t k = static_cast<size_t>(t * c.n_out + o);
            const double e = std::fabs(double{got[k]} - want[k]);
            const double tol = b.rel_m * m + b.abs_w * sum_w + b.abs_x * sum_x + 1e-30;
            err2 += e * e;
            ref2 += double{want[k]} * want[k];
            worst = std::max(worst, e / tol);
            if (!(e <= tol) && bad++ < 8)
                ADD_FAILURE() << "y[" << t << ", " << o << "] gpu " << got[k] << " ref " << want[k]
                              << " |err| " << e << " bound " << tol;
        }
    }
    const double l2 = std::sqrt(err2 / std::max(ref2, 1e-300));
    EXPECT_EQ(bad, 0) << "outputs outside the bound (worst err/bound " << worst << ")";
    EXPECT_LE(l2, b.l2) << "L2 relative error";
    std::printf("  %-60s L2 rel %.2e  worst err/bound %.3f\n", describe(c).c_str(), l2, worst);
}

TEST(CudaPrefillMatmul, AllTypesAndTokenCounts) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    cuda::PrefillMatmul mm;
    const char* err = nullptr;
    ASSERT_TRUE(mm.init(1024, 1000, 300, nullptr, &err)) << err;
    for (DType t : kTypes) {
        std::vector<int64_t> toks = {1, 7, 64, 300};
        if (test::cuda_test_small()) toks = {1, 7};
        for (const int64_t n_tok : toks) run_case(mm, {t, 512, 333, n_tok, false, 1});
        run_case(mm, {t, 1024, 1000, 64, false, 2});
        if (t != DType::F32 && t != DType::F16 && t != DType::BF16 && can_quantize(t))
            run_case(mm, {t, 256, 96, 7, true, 1});
    }
}

// A 1 MiB weight tile (tuning prefill_tile_mib = 1 at init): n_in 768 gives 682 F16 rows -> 512-row tiles
// (256 for F32), so n_out 2500 runs 5 (10) tile GEMMs, the last one partial (small mode: n_out 1100, 3 (5)
// tiles).
TEST(CudaPrefillMatmul, SeveralTilesWithPartialLastTile) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const cuda::CudaTuning saved = cuda::cuda_tuning();
    cuda::CudaTuning small = saved;
    small.prefill_tile_mib = 1;
    cuda::set_cuda_tuning(small);
    cuda::PrefillMatmul mm;
    const char* err = nullptr;
    const int64_t n_out = test::cuda_test_size<int64_t>(2500, 1100);
    const bool ok = mm.init(768, n_out, 300, nullptr, &err);
    cuda::set_cuda_tuning(saved);
    ASSERT_TRUE(ok) << err;
    for (DType t : kTypes) {
        run_case(mm, {t, 768, n_out, 7, false, 1});
        run_case(mm, {t, 768, n_out, test::cuda_test_size<int64_t>(300, 64), false, 3});
    }
}

TEST(CudaPrefillMatmul, InitRejectsEmptyBounds) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    cuda::PrefillMatmul mm;
    const char* err = nullptr;
    EXPECT_FALSE(mm.init(0, 10, 10, nullptr, &err));
    EXPECT_NE(err, nullptr);
}

}  // namespace
}  // namespace pelican
