// cuda::gemv's register-streaming kernels (every decode variant, grid policies, token groups, the
// tuner) against the scalar references, on fresh random inputs; tolerances and the shared case
// runner: cuda_gemv_test_util.h; the weight upload and
// cuda::dequantize_matrix: cuda_gpu_matrix_test.cpp.
// Small mode (PELICAN_CUDA_TEST_SMALL=1, for compute-sanitizer): AllTypesPlain takes token counts
// 1, 3 and 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_gemv_test_util.h"

namespace pelican {
namespace {

using namespace test::gemv;

#define SKIP_WITHOUT_GPU()                \
    if (!cuda::gpu_available()) {         \
        GTEST_SKIP() << "no CUDA device"; \
    }                                     \
    static_assert(true, "")

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_K, DType::Q6_K};

int64_t odd_n_in(DType t) { return is_quant(t) ? 4096 + 256 : 1000; }

TEST(CudaGemv, AllTypesPlain) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const std::vector<int> tokens =
        test::cuda_test_size(std::vector<int>{1, 2, 3, 5, 8}, std::vector<int>{1, 3, 8});
    for (DType t : kTypes) {
        for (int n_tok : tokens) {
            Opts o;
            o.n_tok = n_tok;
            o.parts = {37};
            run_case(rng, t, 256, o);
            o.parts = {100};
            run_case(rng, t, odd_n_in(t), o);
            if (is_quant(t)) {
                o.random_blocks = true;
                o.parts = {45};
                run_case(rng, t, 512, o);
            }
        }
    }
    // Float types accept any n_in (rows padded on the device).
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        for (int64_t n_in : {1, 3, 100, 1000, 1040}) {
            Opts o;
            o.parts = {13};
            o.n_tok = 3;
            run_case(rng, t, n_in, o);
        }
}

TEST(CudaGemv, NormPrologue) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int n_tok : {1, 3, 8})
            for (bool one_plus : {false, true}) {
                Opts o;
                o.n_tok = n_tok;
                o.norm = true;
                o.one_plus = one_plus;
                o.parts = {41};
                run_case(rng, t, odd_n_in(t), o);
            }
}

TEST(CudaGemv, Epilogues) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int n_tok : {1, 2, 8}) {
            const int64_t n_in = is_quant(t) ? 512 : 264;
            Opts o;
            o.n_tok = n_tok;
            o.parts = {29};
            o.bias = true;
            run_case(rng, t, n_in, o);
            o.scale = 0.75f;
            run_case(rng, t, n_in, o);
            o.residual = true;
            run_case(rng, t, n_in, o);
            o.alias = true;
            o.bias = false;
            run_case(rng, t, n_in, o);
            // SwiGLU over [gate; up] stacked from two parts, alone and with everything else.
            Opts g;
            g.n_tok = n_tok;
            g.glu = true;
            g.parts = {35, 35};
            run_case(rng, t, n_in, g);
            g.bias = g.norm = g.residual = g.alias = true;
            g.scale = 1.25f;
            run_case(rng, t, n_in, g);
            g.alias = false;
            g.one_plus = true;
            run_case(rng, t, n_in, g);
        }
}

TEST(CudaGemv, StackedPartsAndStrides) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int n_tok : {1, 3}) {
            Opts o;
            o.n_tok = n_tok;
            o.parts = {64, 16, 0, 17};  // q, k, (an empty part), v
            o.stride_pad = 64;
            run_case(rng, t, 256, o);
            o.x_pad = 32;
            o.y_pad = 5;
            o.x_misalign = 1;  // scalar activation loads
            o.bias = o.residual = true;
            run_case(rng, t, 256, o);
            o.x_misalign = 0;
            o.x_pad = 4;
            o.norm = true;
            run_case(rng, t, 256, o);
        }
}

// Row groups looped over by fewer CTAs (grid policy 1/SM) and one CTA per group: every output
// row is computed by the same code in the same order, so the bits agree exactly.
TEST(CudaGemv, GridPolicyGivesSameBits) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes) {
        for (bool glu : {false, true}) {
            Opts o;
            o.n_tok = glu ? 2 : 1;
            o.glu = glu;
            o.parts = glu ? std::vector<int64_t>{1500, 1500} : std::vector<int64_t>{3001};
            o.grid_policy = 1;
            run_case(rng, t, 512, o);  // checks against the references
        }
        test::RandomMatrix m = test::random_matrix(rng, t, 512, 2999, true);
        cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(t, 512)), 2999};
        cuda::GpuMatrix gm;
        const char* err = nullptr;
        ASSERT_TRUE(cuda::upload_matrix(t, 512, &hr, 1, gm, nullptr, &err)) << err;
        const std::vector<float> x = test::random_vec(rng, 512 * 3);
        DeviceBuffer dx = to_device(x), dy(2999 * 3 * sizeof(float));
        cuda::GemvArgs a;
        a.x = dx.as<float>();
        a.n_tok = 3;
        a.y = dy.as<float>();
        std::vector<std::vector<float>> outs;
        for (int pol : {0, 1, 2, 100000}) {
            cuda::gemv_set_grid_policy(pol);
            cuda::gemv(gm, a, nullptr);
            outs.push_back(from_device<float>(dy, 2999 * 3));
        }
        cuda::gemv_set_grid_policy(0);
        for (size_t i = 1; i < outs.size(); ++i)
            EXPECT_EQ(std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * sizeof(float)), 0)
                << dtype_name(t) << ": grid policy " << i << " changed the bits";
        cuda::free_matrix(gm);
    }
}

// Every decode kernel variant (rows per warp, units in flight, split-K, grid policy; the table is
// iterated, so new variants are covered as they are added) against the
// references: long rows with a tail chunk, the short (n_in <= 4096) and long norm prologues,
// glu with every epilogue, and more rows than one CTA covers.
TEST(CudaGemv, EveryVariant) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const int n_var = cuda::gemv_variant_count();
    for (DType t : kTypes)
        for (int v = 0; v < n_var; ++v) {
            const bool q = is_quant(t);
            Opts o;
            o.variant = v;
            o.parts = {300};
            run_case(rng, t, q ? 4096 + 768 : 1000, o);  // several chunks, a partial last one
            o.norm = true;
            o.parts = {37};
            run_case(rng, t, q ? 4096 : 1040, o);  // short prologue (quantized)
            o.one_plus = true;
            run_case(rng, t, q ? 8192 + 256 : 264, o);  // long prologue
            Opts g;
            g.variant = v;
            g.glu = true;
            g.parts = {67, 67};
            g.bias = g.norm = g.residual = g.alias = true;
            g.scale = 1.25f;
            run_case(rng, t, q ? 1024 : 520, g);
            Opts r;
            r.variant = v;
            r.parts = {40, 9};
            r.bias = r.residual = true;
            r.x_misalign = 1;  // scalar activation loads
            run_case(rng, t, 256, r);
            if (v % 3 == 0) {  // token counts > 1 take the variant's grid policy only
                r.n_tok = 3;
                run_case(rng, t, 256, r);
            }
        }
}

// A chain of dependent PDL-launched GEMVs (y1 = W rms_norm(x); y2 += W y1; y1 = W y2) captured
// in a graph equals the same chain launched eagerly, for every variant.
TEST(CudaGemv, GraphCapturePdlChain) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : {DType::Q4_0, DType::Q6_K, DType::F16}) {
        constexpr int64_t n = 1024;
        test::RandomMatrix m = test::random_matrix(rng, t, n, n, true);
        cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(t, n)), n};
        cuda::GpuMatrix gm;
        const char* err = nullptr;
        ASSERT_TRUE(cuda::upload_matrix(t, n, &hr, 1, gm, nullptr, &err)) << err;
        const std::vector<float> x = test::random_vec(rng, n), nw = test::random_vec(rng, n),
                                 y2_0 = test::random_vec(rng, n);
        DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy1(n * sizeof(float)), dy2 = to_device(y2_0);
        cudaStream_t s;
        ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
        auto chain = [&] {
            cuda::GemvArgs a;
            a.x = dx.as<float>();
            a.norm_w = dnw.as<float>();
            a.y = dy1.as<float>();
            cuda::gemv(gm, a, s);
            cuda::GemvArgs b;
            b.x = dy1.as<float>();
            b.scale = 0.01f;
            b.residual = dy2.as<float>();
            b.y = dy2.as<float>();
            cuda::gemv(gm, b, s);
            cuda::GemvArgs c;
            c.x = dy2.as<float>();
            c.scale = 0.01f;
            c.y = dy1.as<float>();
            cuda::gemv(gm, c, s);
        };
        const auto reset = [&] {
            ASSERT_EQ(cudaMemcpy(dy2.get(), y2_0.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                      cudaSuccess);
        };
        const int n_var = cuda::gemv_variant_count();
        for (int v = 0; v < n_var; ++v) {
            test::GemvKernelReset restore;
            cuda::gemv_force_variant(v);
            expect_graph_matches_eager(s, reset, chain, {{&dy1, n}, {&dy2, n}},
                                       std::string(dtype_name(t)) + " " + cuda::gemv_variant_name(v));
        }
        cudaStreamDestroy(s);
        cuda::free_matrix(gm);
    }
}

// gemv_autotune picks a valid variant, gemv then uses it (same bits as forcing it), and tuning
// inside a stream capture is skipped.
TEST(CudaGemv, AutotuneChoosesAVariant) {
    SKIP_WITHOUT_GPU();
    test::GemvKernelReset reset;
    Rng rng;
    constexpr int64_t n_in = 2048, n_out = 700;
    test::RandomMatrix m = test::random_matrix(rng, DType::Q4_0, n_in, n_out, true);
    cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(DType::Q4_0, n_in)), n_out};
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_0, n_in, &hr, 1, gm, nullptr, &err)) << err;
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cuda::GemvArgs shape;
    static const float flag = 0.0f;
    shape.norm_w = &flag;  // never dereferenced
    std::vector<float> times(static_cast<size_t>(cuda::gemv_variant_count()));
    cuda::gemv_autotune(gm, shape, s, times.data());
    ASSERT_GE(gm.gemv_variant, 0);
    ASSERT_LT(gm.gemv_variant, cuda::gemv_variant_count());
    // Every variant is timed (one token: every configuration and grid policy).
    for (size_t v = 0; v < times.size(); ++v)
        EXPECT_GT(times[v], 0.0f) << cuda::gemv_variant_name(static_cast<int>(v));
    const std::vector<float> x = test::random_vec(rng, n_in), nw = test::random_vec(rng, n_in);
    DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy(n_out * sizeof(float));
    cuda::GemvArgs a;
    a.x = dx.as<float>();
    a.norm_w = dnw.as<float>();
    a.y = dy.as<float>();
    cuda::gemv(gm, a, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<float> tuned = from_device<float>(dy, n_out);
    cuda::gemv_force_variant(gm.gemv_variant);
    cuda::gemv(gm, a, s);
    cuda::gemv_force_variant(-1);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(from_device<float>(dy, n_out), tuned);
    // Cached: a second matrix of the same shape gets the same choice without timing.
    cuda::GpuMatrix gm2;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_0, n_in, &hr, 1, gm2, nullptr, &err)) << err;
    cuda::gemv_autotune(gm2, shape, s);
    EXPECT_EQ(gm2.gemv_variant, gm.gemv_variant);
    // Inside a capture: nothing happens (and the capture stays valid).
    cuda::GpuMatrix gm3;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_0, n_in, &hr, 1, gm3, nullptr, &err)) << err;
    cudaGraph_t g;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cuda::gemv_autotune(gm3, shape, s);
    cuda::gemv(gm3, a, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    EXPECT_EQ(gm3.gemv_variant, -1);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cuda::free_matrix(gm);
    cuda::free_matrix(gm2);
    cuda::free_matrix(gm3);
}

// Activations too large for one launch's shared memory run in token groups.
TEST(CudaGemv, TokenGroups) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    Opts o;
    o.n_tok = 8;
    o.parts = {21};
    o.bias = o.residual = true;
    run_case(rng, DType::F32, 20000, o);   // 80 KB per token: groups of 2
    run_case(rng, DType::F16, 14336, o);   // 56 KB per token: groups of 3, 3, 2
    run_case(rng, DType::Q8_0, 40960, o);  // 51 KB per token
    o.norm = true;
    run_case(rng, DType::Q4_K, 40960, o);
}

TEST(CudaGemv, GraphCaptureReplays) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    test::RandomMatrix m = test::random_matrix(rng, DType::Q4_K, 1024, 300, true);
    cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(DType::Q4_K, 1024)), 300};
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_K, 1024, &hr, 1, gm, nullptr, &err)) << err;
    const std::vector<float> x = test::random_vec(rng, 1024 * 2), nw = test::random_vec(rng, 1024);
    DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy(300 * 2 * sizeof(float)),
                 dy2(300 * 2 * sizeof(float));
    cuda::GemvArgs a;
    a.x = dx.as<float>();
    a.n_tok = 2;
    a.norm_w = dnw.as<float>();
    a.y = dy.as<float>();
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cuda::gemv(gm, a, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    a.y = dy2.as<float>();
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cuda::gemv(gm, a, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(from_device<float>(dy, 600), from_device<float>(dy2, 600));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cuda::free_matrix(gm);
}

}  // namespace
}  // namespace pelican
