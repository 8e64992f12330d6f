// moe_group_mma (moe_mma.cu): the tensor-core grouped expert matmul of prompt chunks (Q4_0 and Q4_K
// stacks) against a double reference on the same f16 inputs: W dequantized by core/dequantize (the
// fp32 values, then rounded to f16, as the kernel does), x rounded to f16. What remains is the
// fp32 accumulation of the mma: |err| <= (n_in / 16 + 16) 2^-22 sum |w x| per dot product (a loose
// bound for the tensor cores' fp32 sums; an indexing or nibble-order slip is O(1) of the value).
// glu outputs silu(g) u get |silu'(g)| |u| tol_g + |silu(g)| tol_u. Rows of unused groups and the
// row padding past n_out must keep their sentinel. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/moe.h"
#include "core/dequantize.h"
#include "core/float_convert.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::from_device;
using test::Rng;
using test::to_device;

float to_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

struct MmaCase {
    DType type;
    int64_t n_in, n_out;  // outputs per token row (glu: gate rows = up rows = n_out)
    bool glu;
    int n_exp, n_groups;
};

void check_mma(Rng& rng, const MmaCase& c, bool quantized = false) {
    SCOPED_TRACE(std::string(dtype_name(c.type)) + " n_in " + std::to_string(c.n_in) + " n_out " +
                 std::to_string(c.n_out) + (c.glu ? " glu" : " plain"));
    const int64_t expert_rows = c.glu ? 2 * c.n_out : c.n_out;
    const test::RandomMatrix m = test::random_matrix(rng, c.type, c.n_in, c.n_exp * expert_rows, quantized);
    const int64_t rb = static_cast<int64_t>(*dtype_row_bytes(c.type, static_cast<uint64_t>(c.n_in)));
    cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(rb), m.n_out};
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(c.type, c.n_in, &hr, 1, gm, nullptr, &err)) << err;
    ASSERT_TRUE(cuda::moe_mma_supported(gm, c.glu, expert_rows));
    // Reference weights: the f16 values the kernel multiplies.
    std::vector<float> w(static_cast<size_t>(m.n_out * c.n_in));
    for (int64_t r = 0; r < m.n_out; ++r)
        ASSERT_TRUE(dequantize_row(c.type, m.bytes.data() + r * rb, w.data() + r * c.n_in, c.n_in).ok());
    for (float& v : w) v = to_f16(v);

    // Groups: unused ones (-1) in the middle and at the end, one id past the stack (reads expert 0).
    std::vector<int32_t> ge(static_cast<size_t>(c.n_groups));
    for (auto& e : ge) e = static_cast<int32_t>(rng.index(static_cast<size_t>(c.n_exp)));
    if (c.n_groups > 2) ge[1] = -1;
    if (c.n_groups > 3) ge[static_cast<size_t>(c.n_groups - 1)] = -1;
    if (c.n_groups > 4) ge[2] = c.n_exp + 3;
    const int64_t rows = int64_t{c.n_groups} * cuda::kMoeGroupRows;
    const int64_t x_stride = c.n_in + 4, y_stride = c.n_out + 3;  // padded rows
    const std::vector<float> x = test::random_vec(rng, rows * x_stride);
    const float sentinel = 12345.0f;
    DeviceBuffer dge = to_device(ge), dx = to_device(x),
                 dy = to_device(std::vector<float>(static_cast<size_t>(rows * y_stride), sentinel));
    cuda::MoeMmaArgs a;
    a.w = gm;
    a.expert_rows = expert_rows;
    a.glu = c.glu;
    a.n_out = c.n_out;
    a.group_expert = dge.as<int32_t>();
    a.n_groups = c.n_groups;
    a.x = dx.as<float>();
    a.x_stride = x_stride;
    a.y = dy.as<float>();
    a.y_stride = y_stride;
    cuda::moe_group_mma(a, nullptr);
    const std::vector<float> y = from_device<float>(dy.get(), static_cast<size_t>(rows * y_stride));

    const double rel = (static_cast<double>(c.n_in) / 16.0 + 16.0) * std::ldexp(1.0, -22);
    int bad = 0;
    double worst = 0.0;
    for (int g = 0; g < c.n_groups; ++g) {
        int e = ge[static_cast<size_t>(g)];
        for (int i = 0; i < cuda::kMoeGroupRows; ++i) {
            const int64_t r = int64_t{g} * cuda::kMoeGroupRows + i;
            const float* yr = y.data() + r * y_stride;
            for (int64_t j = c.n_out; j < y_stride; ++j)
                if (yr[j] != sentinel && bad++ < 10)
                    ADD_FAILURE() << "row " << r << " padding " << j << " written";
            if (e < 0) {
                for (int64_t j = 0; j < c.n_out; ++j)
                    if (yr[j] != sentinel && bad++ < 10)
                        ADD_FAILURE() << "row " << r << " of an unused group written";
                continue;
            }
            const int ee = e >= c.n_exp ? 0 : e;
            std::vector<double> xr(static_cast<size_t>(c.n_in));
            for (int64_t k = 0; k < c.n_in; ++k) xr[static_cast<size_t>(k)] = to_f16(x[r * x_stride + k]);
            const auto dot = [&](int64_t wrow, double* mag) {
                const float* wr = w.data() + wrow * c.n_in;
                double s = 0.0, a2 = 0.0;
                for (int64_t k = 0; k < c.n_in; ++k) {
                    s += wr[k] * xr[static_cast<size_t>(k)];
                    a2 += std::fabs(wr[k] * xr[static_cast<size_t>(k)]);
                }
                *mag = a2;
                return s;
            };
            for (int64_t j = 0; j < c.n_out; ++j) {
                double mg = 0.0, want = dot(ee * expert_rows + j, &mg), tol = rel * mg + 1e-30;
                if (c.glu) {
                    double mu = 0.0;
                    const double gv = want, u = dot(ee * expert_rows + c.n_out + j, &mu);
                    const double sg = 1.0 / (1.0 + std::exp(-gv)), silu = gv * sg;
                    const double dsilu = sg * (1.0 + gv * (1.0 - sg));
                    want = silu * u;
                    tol = std::fabs(dsilu) * std::fabs(u) * rel * mg + std::fabs(silu) * rel * mu +
                          1e-6 * std::fabs(want) + 1e-30;
                }
                const double got = yr[j], e2 = std::fabs(got - want);
                worst = std::max(worst, e2 / tol);
                if (!(e2 <= tol) && bad++ < 10)
                    ADD_FAILURE() << "group " << g << " (expert " << e << ") row " << i << " out " << j
                                  << ": gpu " << got << " ref " << want << " tol " << tol;
            }
        }
    }
    EXPECT_EQ(bad, 0);
    std::printf("moe_group_mma %s n_in %lld n_out %lld %s, %d groups: max |err| / tol %.4f\n",
                std::string(dtype_name(c.type)).c_str(), static_cast<long long>(c.n_in),
                static_cast<long long>(c.n_out), c.glu ? "glu" : "plain", c.n_groups, worst);
    cuda::free_matrix(gm);
}

TEST(CudaMoeMma, PlainRows) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    check_mma(rng, {DType::Q4_0, 128, 16, false, 3, 5});    // one warp of rows
    check_mma(rng, {DType::Q4_0, 384, 272, false, 4, 7});   // two CTAs of rows, the second one partly used
    check_mma(rng, {DType::Q4_0, 512, 2048, false, 5, 6});  // Qwen3.5-35B expert down (n_in = ff 512)
    check_mma(rng, {DType::Q4_K, 256, 16, false, 3, 5});
    check_mma(rng, {DType::Q4_K, 768, 272, false, 4, 7});  // 3 super-blocks: the scale pairs of units 0..11
    check_mma(rng, {DType::Q4_K, 512, 2048, false, 5, 6});
}

TEST(CudaMoeMma, GluRows) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    check_mma(rng, {DType::Q4_0, 256, 48, true, 5, 9});
    check_mma(rng, {DType::Q4_0, 2048, 512, true, 3, test::cuda_test_size(12, 5)});  // Qwen3.5-35B gate/up
    check_mma(rng, {DType::Q4_K, 256, 48, true, 5, 9});
    check_mma(rng, {DType::Q4_K, 2048, 512, true, 3, test::cuda_test_size(12, 5)});
}

// Realistic quantized codes (the reference quantizer on N(0, 1/sqrt(n_in)) weights) for both types.
TEST(CudaMoeMma, QuantizedWeights) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    check_mma(rng, {DType::Q4_0, 512, 64, true, 4, 6}, true);
    check_mma(rng, {DType::Q4_K, 512, 64, true, 4, 6}, true);
}

}  // namespace
}  // namespace pelican
