// qmatmul (backend/cuda/qmatmul.h): the tensor-core dequantizing matmul of batched decode against a
// double reference, for Q4_0, Q8_0, Q4_K and Q6_K.
//
// Reference: y_ref = sum_i w_i x16_i in double, w_i = dequantize_row (core/dequantize: the fp32 values
// dequantize_matrix computes), x16_i = x_i rounded to f16 (the kernel's first rounding).
// Bound per output, with M = sum_i |w_i x16_i| and X = sum_i |x16_i|:
//   * the kernel rounds each w_i once to f16: |w16_i - w_i| <= 2^-11 |w_i| (normal range) or <= 2^-25
//     (f16 subnormals), so sum_i |w16_i - w_i| |x16_i| <= 2^-11 M + 2^-25 X;
//   * f16 x f16 products are exact in fp32; the mma sums them in fp32 along k (n_in / 16 chained mma
//     steps, each adding at most ~2 units of 2^-23 of the running magnitude, allowing for the tensor
//     cores' truncating alignment), plus at most 16 split-K partial additions: |err| <= a M16 with
//     a = (n_in / 16 + 32) 2^-22 and M16 = sum |w16 x16| <= (1 + 2^-11) M + 2^-25 X.
//   tol = (2^-11 + a (1 + 2^-11)) M + 2^-25 (1 + a) X.
// An indexing, nibble-order or scale slip is O(1) of the value, far outside this bound.
// Also: y's padding columns and the row after the last token keep their sentinel (nothing is written
// outside [n_tok, n_out]), every split-K factor gives the same bound and a fixed split is bitwise
// deterministic, and a captured CUDA graph replays correctly with new x contents.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every type,
// tile configuration (n_tok 1 .. 16, 33, 65) and the split paths still run, with the token lists cut to
// 1 / 9 / 33 / 65, every configuration at n_tok 9 only, and the long-K case at n_out 40.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/qmatmul.h"
#include "core/dequantize.h"
#include "core/float_convert.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::Rng;

const DType kTypes[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K};
constexpr float kSentinel = 12345.0f;

float to_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// A matrix on the device with its exactly dequantized rows on the host.
struct Mat {
    DType type;
    int64_t n_in, n_out;
    cuda::GpuMatrix gm;
    std::vector<float> w;  // [n_out, n_in] fp32 (dequantize_row)
    Mat(Rng& rng, DType t, int64_t in, int64_t out, bool quantized) : type(t), n_in(in), n_out(out) {
        test::RandomMatrix m = test::random_matrix(rng, t, in, out, quantized);
        const size_t rb = *dtype_row_bytes(t, static_cast<uint64_t>(in));
        cuda::HostRows hr{m.bytes.data(), rb, out};
        const char* err = nullptr;
        EXPECT_TRUE(cuda::upload_matrix(t, in, &hr, 1, gm, nullptr, &err)) << (err ? err : "");
        w.resize(static_cast<size_t>(in * out));
        for (int64_t r = 0; r < out; ++r)
            EXPECT_TRUE(dequantize_row(t, m.bytes.data() + r * rb, w.data() + r * in, in).ok());
    }
    ~Mat() { cuda::free_matrix(gm); }
    Mat(const Mat&) = delete;
    Mat& operator=(const Mat&) = delete;
};

// Checks y [n_tok rows of y_stride] against the reference of x [n_tok rows of x_stride]; returns the
// worst |err| / tol.
double check_y(const Mat& m, const std::vector<float>& x, int64_t x_stride, int n_tok,
               const std::vector<float>& y, int64_t y_stride) {
    const double a = (static_cast<double>(m.n_in) / 16.0 + 32.0) * 0x1p-22;
    const double rel = 0x1p-11 + a * (1.0 + 0x1p-11), abs_x = 0x1p-25 * (1.0 + a);
    double worst = 0.0;
    int bad = 0;
    std::vector<double> xr(static_cast<size_t>(m.n_in));
    for (int tk = 0; tk < n_tok; ++tk) {
        double sx = 0.0;
        for (int64_t i = 0; i < m.n_in; ++i) {
            xr[static_cast<size_t>(i)] = to_f16(x[static_cast<size_t>(tk * x_stride + i)]);
            sx += std::fabs(xr[static_cast<size_t>(i)]);
        }
        const float* yr = y.data() + tk * y_stride;
        for (int64_t o = 0; o < m.n_out; ++o) {
            const float* wr = m.w.data() + o * m.n_in;
            double s = 0.0, mag = 0.0;
            for (int64_t i = 0; i < m.n_in; ++i) {
                const double p = static_cast<double>(wr[i]) * xr[static_cast<size_t>(i)];
                s += p;
                mag += std::fabs(p);
            }
            const double tol = rel * mag + abs_x * sx + 1e-30, e = std::fabs(static_cast<double>(yr[o]) - s);
            worst = std::max(worst, e / tol);
            if (!(e <= tol) && bad++ < 8)
                ADD_FAILURE() << "y[" << tk << ", " << o << "] gpu " << yr[o] << " ref " << s << " |err| "
                              << e << " tol " << tol;
        }
        for (int64_t o = m.n_out; o < y_stride; ++o)
            if (yr[o] != kSentinel && bad++ < 8)
                ADD_FAILURE() << "y[" << tk << "] padding column " << o << " written";
    }
    for (int64_t o = 0; o < y_stride; ++o)  // the row after the last token
        if (y[static_cast<size_t>(n_tok * y_stride + o)] != kSentinel && bad++ < 8)
            ADD_FAILURE() << "row " << n_tok << " (past n_tok) column " << o << " written";
    EXPECT_EQ(bad, 0);
    return worst;
}

// One call: random x with rows of x_stride (n_in + x_pad), y rows of n_out + y_pad; returns y (n_tok + 1
// rows, the last one the sentinel row).
std::vector<float> run_qmatmul(const Mat& m, const std::vector<float>& x, int64_t x_stride, int n_tok,
                               int64_t y_stride, int max_tok) {
    const size_t y_elems = static_cast<size_t>((n_tok + 1) * y_stride);
    DeviceBuffer dx = test::to_device(x), dy = test::to_device(std::vector<float>(y_elems, kSentinel));
    const size_t wsb = cuda::qmatmul_workspace_bytes(m.n_in, m.n_out, max_tok);
    DeviceBuffer ws(wsb);
    EXPECT_TRUE(ws.ok());
    EXPECT_LE(cuda::qmatmul_plan(m.gm, n_tok).workspace, wsb);
    cuda::qmatmul(m.gm, dx.as<float>(), x_stride, n_tok, dy.as<float>(), y_stride, ws.get(), wsb, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return test::from_device<float>(dy, y_elems);
}

void check_case(Rng& rng, const Mat& m, int n_tok, int x_pad, int y_pad) {
    const int64_t x_stride = m.n_in + x_pad, y_stride = m.n_out + y_pad;
    SCOPED_TRACE(std::string(dtype_name(m.type)) + " " + std::to_string(m.n_out) + "x" +
                 std::to_string(m.n_in) + " n_tok " + std::to_string(n_tok) + " x_stride " +
                 std::to_string(x_stride) + " y_stride " + std::to_string(y_stride));
    const std::vector<float> x = test::random_vec(rng, n_tok * x_stride);
    const std::vector<float> y = run_qmatmul(m, x, x_stride, n_tok, y_stride, n_tok);
    const cuda::QmatmulPlan pl = cuda::qmatmul_plan(m.gm, n_tok);
    const double worst = check_y(m, x, x_stride, n_tok, y, y_stride);
    std::printf(
        "  %-5s %6lld x %-6lld n_tok %4d  cfg %d tile %3dx%-3d split %2d ctas %5d  worst err/tol %.4f\n",
        std::string(dtype_name(m.type)).c_str(), static_cast<long long>(m.n_out),
        static_cast<long long>(m.n_in), n_tok, pl.config, pl.rows_per_cta, pl.tokens_per_cta, pl.split,
        pl.ctas, worst);
}

struct SplitReset {
    ~SplitReset() {
        cuda::qmatmul_force_split(0);
        cuda::qmatmul_force_config(-1);
    }
};

TEST(CudaQmatmul, SupportedTypesAndShapes) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (DType t : kTypes) {
        Mat m(rng, t, 256, 3, false);
        EXPECT_TRUE(cuda::qmatmul_supported(m.gm)) << dtype_name(t);
    }
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {  // cuBLAS (PrefillMatmul) covers these
        Mat m(rng, t, 256, 16, false);
        EXPECT_FALSE(cuda::qmatmul_supported(m.gm)) << dtype_name(t);
    }
    for (DType t : {DType::Q4_0, DType::Q8_0}) {  // n_in a multiple of 32 but not of 256
        Mat m(rng, t, 288, 16, false);
        EXPECT_FALSE(cuda::qmatmul_supported(m.gm)) << dtype_name(t);
    }
    EXPECT_FALSE(cuda::qmatmul_supported(cuda::GpuMatrix{}));
    EXPECT_EQ(cuda::qmatmul_workspace_bytes(0, 10, 10), 0u);
}

TEST(CudaQmatmul, AllTypesAndTokenCounts) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const std::vector<int> toks = test::cuda_test_small() ? std::vector<int>{1, 9, 33, 65}
                                                          : std::vector<int>{1, 7, 8, 9, 16, 33, 128, 300};
    const std::vector<int> toks2 =
        test::cuda_test_small() ? std::vector<int>{9, 65} : std::vector<int>{8, 33, 65, 300};
    for (DType t : kTypes) {
        {
            Mat m(rng, t, 512, 256, false);
            for (int n : toks) check_case(rng, m, n, 0, 0);
        }
        {
            Mat m(rng, t, 768, 1000, false);                  // odd row count: a partial last row tile
            for (int n : toks2) check_case(rng, m, n, 3, 5);  // unaligned x rows (scalar pre-pass loads)
            check_case(rng, m, 17, 4, 1);
        }
        {
            Mat m(rng, t, 256, 333, true);  // realistic codes from the reference quantizer, one super-block
            check_case(rng, m, 5, 0, 2);
            check_case(rng, m, 40, 8, 0);
        }
    }
}

// K beyond what a whole-row staging kernel could hold (the down projection's 14336).
TEST(CudaQmatmul, LongK) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (DType t : kTypes) {
        Mat m(rng, t, 14336, test::cuda_test_size<int64_t>(200, 40), false);
        check_case(rng, m, 9, 0, 0);
        if (!test::cuda_test_small()) check_case(rng, m, 128, 0, 3);
    }
}

// Every split-K factor (forced) stays within the bound, and one factor is bitwise repeatable.
TEST(CudaQmatmul, SplitFactorsAndDeterminism) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    SplitReset reset;
    Rng rng;
    for (DType t : kTypes) {
        Mat m(rng, t, 2048, 300, false);  // 16 k tiles
        for (int n_tok : {12, 100}) {
            const std::vector<float> x = test::random_vec(rng, n_tok * m.n_in);
            for (int split : {1, 2, 5, 16}) {
                cuda::qmatmul_force_split(split);
                SCOPED_TRACE(std::string(dtype_name(t)) + " n_tok " + std::to_string(n_tok) + " split " +
                             std::to_string(split));
                EXPECT_EQ(cuda::qmatmul_plan(m.gm, n_tok).split, split);
                const std::vector<float> y = run_qmatmul(m, x, m.n_in, n_tok, m.n_out, n_tok);
                check_y(m, x, m.n_in, n_tok, y, m.n_out);
                const std::vector<float> y2 = run_qmatmul(m, x, m.n_in, n_tok, m.n_out, n_tok);
                EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)), 0)
                    << "not deterministic";
            }
        }
    }
}

// Every tile configuration (the built-in ones and the A/B candidates) on every type, with one, several
// and a partial token tile, a partial row tile, and split-K on and off.
TEST(CudaQmatmul, EveryConfiguration) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    SplitReset reset;
    Rng rng;
    for (DType t : kTypes) {
        Mat m(rng, t, 512, 300, false);
        for (int c = 0; c < cuda::qmatmul_config_count(); ++c) {
            cuda::qmatmul_force_config(c);
            for (int split : {1, 3}) {
                cuda::qmatmul_force_split(split);
                for (int n_tok :
                     test::cuda_test_small() ? std::vector<int>{9} : std::vector<int>{3, 40, 150}) {
                    ASSERT_EQ(cuda::qmatmul_plan(m.gm, n_tok).config, c);
                    check_case(rng, m, n_tok, 1, 1);
                }
            }
        }
    }
}

// A CUDA graph of two qmatmul calls (two token counts sharing one workspace), replayed twice with new x.
TEST(CudaQmatmul, GraphCaptureReplay) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (DType t : kTypes) {
        SCOPED_TRACE(dtype_name(t));
        Mat m(rng, t, 1024, 520, false);
        const int na = 33, nb = 130;
        const size_t wsb = cuda::qmatmul_workspace_bytes(m.n_in, m.n_out, nb);
        DeviceBuffer ws(wsb), dxa(static_cast<size_t>(na * m.n_in) * 4),
            dxb(static_cast<size_t>(nb * m.n_in) * 4);
        const size_t ya_elems = static_cast<size_t>((na + 1) * m.n_out),
                     yb_elems = static_cast<size_t>((nb + 1) * m.n_out);
        DeviceBuffer dya = test::to_device(std::vector<float>(ya_elems, kSentinel));
        DeviceBuffer dyb = test::to_device(std::vector<float>(yb_elems, kSentinel));
        ASSERT_TRUE(ws.ok() && dxa.ok() && dxb.ok());
        cudaStream_t st = nullptr;
        ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
        cuda::qmatmul(m.gm, dxa.as<float>(), m.n_in, na, dya.as<float>(), m.n_out, ws.get(), wsb, st);
        cuda::qmatmul(m.gm, dxb.as<float>(), m.n_in, nb, dyb.as<float>(), m.n_out, ws.get(), wsb, st);
        ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        for (int rep = 0; rep < 2; ++rep) {
            const std::vector<float> xa = test::random_vec(rng, na * m.n_in),
                                     xb = test::random_vec(rng, nb * m.n_in);
            ASSERT_EQ(cudaMemcpy(dxa.get(), xa.data(), xa.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(dxb.get(), xb.data(), xb.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
            ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
            ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
            check_y(m, xa, m.n_in, na, test::from_device<float>(dya, ya_elems), m.n_out);
            check_y(m, xb, m.n_in, nb, test::from_device<float>(dyb, yb_elems), m.n_out);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
    }
}

}  // namespace
}  // namespace pelican
