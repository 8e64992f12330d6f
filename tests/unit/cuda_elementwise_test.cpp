// CUDA element-wise ops (backend/cuda/elementwise.h) against the scalar references, on fresh
// random inputs (PELICAN_TEST_SEED replays a failure). Shapes cover both the float4 and the
// scalar kernel paths (lengths not a multiple of 4, misaligned pointers).
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every
// case and kernel still runs (get_rows per type incl. padded rows and quantized codes, rms_norm
// at block sizes 1024 / 256 / 64 on the float4 and scalar paths, in place and misaligned; the
// float4 and scalar add_scaled / scale / add_bias / swiglu / convert kernels), with fewer rows:
// get_rows' padded case at n_embd 512 instead of 768, rms_norm at 1..8 rows instead of 2..64,
// add_scaled / scale / add_bias and convert_f32 at n 1024 instead of 4096, swiglu at 2 rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/elementwise.h"
#include "core/dequantize.h"
#include "core/float_convert.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::Rng;

template <typename T>
DeviceBuffer upload(const std::vector<T>& v, size_t extra_bytes = 0) {
    DeviceBuffer b(v.size() * sizeof(T) + extra_bytes + 16);
    EXPECT_TRUE(b.ok());
    EXPECT_EQ(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return b;
}
template <typename T>
std::vector<T> download(const void* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// ---- get_rows -----------------------------------------------------------------------------------

// Every value must equal scale * core/dequantize's value bit for bit (same fp32 operations).
void check_get_rows(DType t, int64_t n_embd, bool quantized, size_t pad) {
    SCOPED_TRACE(std::string(dtype_name(t)) + " n_embd " + std::to_string(n_embd) +
                 (quantized ? " quantized" : "") + " pad " + std::to_string(pad));
    Rng rng;
    const int64_t n_vocab = 37;
    test::RandomMatrix m = test::random_matrix(rng, t, n_embd, n_vocab, quantized);
    const size_t row_bytes = *dtype_row_bytes(t, static_cast<uint64_t>(n_embd));
    const size_t stride = row_bytes + pad;
    std::vector<uint8_t> table(stride * n_vocab, 0xa5);
    for (int64_t r = 0; r < n_vocab; ++r) std::memcpy(&table[r * stride], &m.bytes[r * row_bytes], row_bytes);
    std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, 36, 2, 30, 11, 0, 23, 9};
    for (int i = 0; i < 6; ++i) ids.push_back(static_cast<int32_t>(rng.index(n_vocab)));
    const int n = static_cast<int>(ids.size());
    const float scale = rng.index(2) ? 1.0f : rng.uniform(0.5f, 3.0f);

    DeviceBuffer d_table = upload(table), d_ids = upload(ids), d_out(n * n_embd * sizeof(float));
    ASSERT_TRUE(d_out.ok());
    cuda::get_rows(d_table.get(), t, n_embd, stride, d_ids.as<int32_t>(), n, scale, d_out.as<float>(),
                   nullptr);
    const std::vector<float> got = download<float>(d_out.get(), static_cast<size_t>(n * n_embd));

    std::vector<float> ref(static_cast<size_t>(n_embd));
    int bad = 0;
    for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(dequantize_row(t, &table[ids[i] * stride], ref.data(), n_embd).ok());
        for (int64_t j = 0; j < n_embd; ++j) {
            const float want = scale * ref[j];
            const float g = got[i * n_embd + j];
            if (!same_bits(g, want) && bad++ < 10)
                ADD_FAILURE() << "token " << i << " (id " << ids[i] << ") elem " << j << ": gpu " << g
                              << " want " << want << " (scale " << scale << ")";
        }
    }
    EXPECT_EQ(bad, 0) << "mismatching elements";
}

TEST(CudaElementwise, GetRowsMatchesDequantizeExactly) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    for (DType t :
         {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        check_get_rows(t, 512, false, 0);
        check_get_rows(t, test::cuda_test_size<int64_t>(768, 512), false, 64);  // padded row stride
        if (can_quantize(t)) check_get_rows(t, 256, true, 0);
    }
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        check_get_rows(t, 67, false, 6);  // scalar tail path
    check_get_rows(DType::Q8_0, 96, false, 2);
}

// ---- rms_norm ---------------------------------------------------------------------------------------

// fp32 sum of squares over <= ~40 terms per thread plus a <= 10-level tree, then sqrt, divide and
// two multiplies: relative error well below 64 * 2^-24 ~ 4e-6 of |x * inv * w|.
void check_rms_norm(int64_t n_rows, int64_t n, bool one_plus, bool in_place, bool misalign) {
    SCOPED_TRACE("rows " + std::to_string(n_rows) + " n " + std::to_string(n) +
                 (one_plus ? " one_plus" : "") + (in_place ? " in_place" : "") +
                 (misalign ? " misaligned" : ""));
    Rng rng;
    const std::vector<float> x = test::random_vec(rng, n_rows * n, 2.0f);
    const std::vector<float> w = test::random_vec(rng, n, 0.5f);
    const float eps = 1e-5f;
    std::vector<float> want(x.size());
    ref::rms_norm(x.data(), w.data(), want.data(), n_rows, n, eps,
                  one_plus ? NormWeight::kOnePlus : NormWeight::kPlain);

    const size_t off = misalign ? 1 : 0;
    std::vector<float> xpad(off, 0.0f);
    xpad.insert(xpad.end(), x.begin(), x.end());
    DeviceBuffer d_x = upload(xpad), d_w = upload(w), d_y((x.size() + off) * sizeof(float));
    float* dx = d_x.as<float>() + off;
    float* dy = in_place ? dx : d_y.as<float>() + off;
    cuda::rms_norm(dx, d_w.as<float>(), dy, n_rows, n, eps, one_plus, nullptr);
    const std::vector<float> got = download<float>(dy, x.size());

    int bad = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double{x[r * n + i]} * x[r * n + i];
        const double inv = 1.0 / std::sqrt(ss / n + eps);
        for (int64_t i = 0; i < n; ++i) {
            const size_t k = static_cast<size_t>(r * n + i);
            const double mag = std::fabs(x[k] * inv * ((one_plus ? 1.0 : 0.0) + w[i]));
            const double tol = 4e-6 * mag + 1e-30;
            if (!(std::fabs(got[k] - want[k]) <= tol) && bad++ < 10)
                ADD_FAILURE() << "row " << r << " i " << i << ": gpu " << got[k] << " ref " << want[k]
                              << " tol " << tol;
        }
    }
    EXPECT_EQ(bad, 0);
}

TEST(CudaElementwise, RmsNorm) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const bool small = test::cuda_test_small();
    check_rms_norm(small ? 1 : 3, 4096, false, false, false);  // 256 threads
    check_rms_norm(small ? 1 : 2, 8192, true, false, false);   // 1024 threads
    check_rms_norm(small ? 2 : 5, 1000, false, true, false);   // 64 threads
    check_rms_norm(small ? 8 : 64, 128, true, false, false);   // qk-norm rows
    check_rms_norm(small ? 2 : 7, 129, false, false, false);   // scalar path
    check_rms_norm(small ? 1 : 3, 2048, false, true, true);    // misaligned: scalar path, 1024 threads
}

// ---- add_scaled, scale, add_bias, swiglu_stacked --------------------------------------------------

// One or two fp32 roundings (an FMA may fuse a + s * b): |err| <= 2^-23 (|a| + |s b|).
TEST(CudaElementwise, AddScaledScaleAddBias) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (int64_t n : {test::cuda_test_size<int64_t>(4096, 1024), int64_t{1001}}) {
        SCOPED_TRACE("n " + std::to_string(n));
        const std::vector<float> a = test::random_vec(rng, n), b = test::random_vec(rng, n);
        const float s = rng.uniform(-2.0f, 2.0f);
        DeviceBuffer d_a = upload(a), d_b = upload(b), d_y(n * sizeof(float));
        cuda::add_scaled(d_a.as<float>(), d_b.as<float>(), s, d_y.as<float>(), n, nullptr);
        std::vector<float> y = download<float>(d_y.get(), n);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_LE(std::fabs(double{y[i]} - (double{a[i]} + double{s} * b[i])),
                      0x1p-23 * (std::fabs(a[i]) + std::fabs(s * b[i])))
                << "add_scaled i " << i;
        // in place (y aliases a)
        cuda::add_scaled(d_a.as<float>(), d_b.as<float>(), s, d_a.as<float>(), n, nullptr);
        EXPECT_EQ(download<float>(d_a.get(), n), y) << "add_scaled in place differs";

        cuda::scale(d_b.as<float>(), s, d_y.as<float>(), n, nullptr);
        y = download<float>(d_y.get(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(y[i], s * b[i])) << "scale i " << i;

        const int64_t cols = n % 512 == 0 ? 512 : 143, rows = n / cols;
        const std::vector<float> bias = test::random_vec(rng, cols);
        DeviceBuffer d_bias = upload(bias);
        cuda::add_bias(d_b.as<float>(), d_bias.as<float>(), rows, cols, nullptr);
        y = download<float>(d_b.get(), n);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                ASSERT_TRUE(same_bits(y[r * cols + c], b[r * cols + c] + bias[c]))
                    << "add_bias " << r << "," << c;
    }
}

// silu(g) * u = g / (1 + expf(-g)) * u in fp32: expf within 2 ulp, then an add, a divide and a
// multiply: relative error <= ~6 ulp; 2e-6 relative (plus denormal slack) against double.
TEST(CudaElementwise, SwigluStacked) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (int64_t n_half : {int64_t{1024}, int64_t{333}}) {
        const int64_t n_rows = test::cuda_test_size(5, 2);
        SCOPED_TRACE("n_half " + std::to_string(n_half));
        std::vector<float> gu = test::random_vec(rng, n_rows * 2 * n_half, 3.0f);
        gu[0] = -100.0f;  // exp overflow side
        gu[1] = 90.0f;
        DeviceBuffer d_gu = upload(gu), d_y(n_rows * n_half * sizeof(float));
        cuda::swiglu_stacked(d_gu.as<float>(), d_y.as<float>(), n_rows, n_half, nullptr);
        const std::vector<float> y = download<float>(d_y.get(), n_rows * n_half);
        for (int64_t r = 0; r < n_rows; ++r) {
            std::vector<float> want(n_half);
            ref::swiglu(&gu[r * 2 * n_half], &gu[r * 2 * n_half + n_half], want.data(), n_half);
            for (int64_t i = 0; i < n_half; ++i)
                ASSERT_LE(std::fabs(y[r * n_half + i] - want[i]), 2e-6 * std::fabs(want[i]) + 1e-37)
                    << "row " << r << " i " << i << " gate " << gu[r * 2 * n_half + i];
        }
    }
}

// x * (1 / (1 + expf(-g))) in fp32: expf within 2 ulp, an add, a divide, a multiply: <= ~6 ulp;
// 2e-6 relative (plus denormal slack) against ref::sigmoid_gate_mul (double sigmoid). Strided rows
// (the gate sits in wider rows, as in the gated attention's QKV+gate output), x updated in place.
TEST(CudaElementwise, SigmoidGateMul) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const int64_t n_rows = test::cuda_test_size(4, 2), n = 513, x_stride = 520, g_stride = 1100;
    std::vector<float> x = test::random_vec(rng, n_rows * x_stride, 4.0f);
    std::vector<float> g = test::random_vec(rng, n_rows * g_stride, 6.0f);
    g[0] = -100.0f;  // exp overflow side: sigmoid 0
    g[1] = 90.0f;
    DeviceBuffer dx = upload(x), dg = upload(g);
    cuda::sigmoid_gate_mul(dx.as<float>(), x_stride, dg.as<float>(), g_stride, n_rows, n, nullptr);
    const std::vector<float> y = download<float>(dx.get(), n_rows * x_stride);
    for (int64_t r = 0; r < n_rows; ++r) {
        std::vector<float> want(&x[r * x_stride], &x[r * x_stride] + n);
        ref::sigmoid_gate_mul(want.data(), &g[r * g_stride], n);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_LE(std::fabs(y[r * x_stride + i] - want[i]), 2e-6 * std::fabs(want[i]) + 1e-37)
                << "row " << r << " i " << i;
        for (int64_t i = n; i < x_stride; ++i)
            ASSERT_EQ(y[r * x_stride + i], x[r * x_stride + i]) << "padding changed: row " << r << " i " << i;
    }
}

// ---- convert_f32 ------------------------------------------------------------------------------------

TEST(CudaElementwise, ConvertF32RoundsToNearestEven) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (DType t : {DType::F16, DType::BF16}) {
        for (int64_t n : {test::cuda_test_size<int64_t>(4096, 1024), int64_t{1003}}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n));
            std::vector<float> x = test::random_vec(rng, n, 4.0f);
            // Exact ties, subnormals, overflow, signed zero, inf.
            const float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                                     1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f,
                                     3e-6f,           -5.9e-8f,
                                     1e-41f,          65519.0f,
                                     65520.0f,        -1e30f,
                                     -0.0f,           INFINITY};
            for (size_t i = 0; i < std::size(special); ++i) x[i * 7] = special[i];
            for (int i = 0; i < 40; ++i) x[100 + i] = std::ldexp(rng.uniform(1.0f, 2.0f), -30 + i);
            DeviceBuffer d_x = upload(x), d_y(n * 2);
            cuda::convert_f32(d_x.as<float>(), d_y.get(), t, n, nullptr);
            const std::vector<uint16_t> y = download<uint16_t>(d_y.get(), n);
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t want = t == DType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
                ASSERT_EQ(y[i], want) << "x[" << i << "] = " << x[i];
            }
        }
        // NaN stays NaN.
        const std::vector<float> nan = {NAN, -NAN, 1.0f, 2.0f};
        DeviceBuffer d_x = upload(nan), d_y(8);
        cuda::convert_f32(d_x.as<float>(), d_y.get(), t, 4, nullptr);
        const std::vector<uint16_t> y = download<uint16_t>(d_y.get(), 4);
        for (int i = 0; i < 2; ++i)
            EXPECT_TRUE(std::isnan(t == DType::F16 ? f16_to_f32(y[i]) : bf16_to_f32(y[i]))) << dtype_name(t);
    }
}

}  // namespace
}  // namespace pelican
