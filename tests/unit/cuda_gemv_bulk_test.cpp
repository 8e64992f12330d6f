// The bulk-copy decode GEMV (backend/cuda/gemv_bulk.cuh; one token, quantized weights; opt-in with
// PELICAN_GEMV_BULK=1, turned on here with cuda::gemv_set_bulk) against the scalar references, and a
// chain of its calls from a CUDA graph against the eager chain. Tolerances: cuda_gemv_test_util.h (a
// row's units are spread over <= 32 lanes, so the accumulation bound of the register kernels holds).
// Its expert-slot and combine modes: cuda_moe_experts_test.cpp. Small mode: the norm / plain cases of
// every shape, not the glu ones; fewer rows in the ring-refill case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// The bulk-copy kernel (gemv_bulk.cuh; one token, quantized weights) against the references: every
// lane layout (rows of 4 / 8 / 16 units packed side by side in a warp; 1, 2, 4 units per lane with
// activations in registers; longer rows with activations read from shared memory), a ring refilled
// many times (rows far more than a CTA's ring holds), fewer rows than CTAs, glu with every epilogue,
// the norm prologue, scalar activation loads, and a shape it must leave to the register kernels
// (Q6_K rows whose scale plane is not a multiple of 16 bytes).
TEST(CudaGemv, BulkKernelMatchesReferences) {
    SKIP_WITHOUT_GPU();
    test::GemvKernelReset bulk_on(1);
    Rng rng;
    const bool small = test::cuda_test_small();
    struct Shape {
        DType t;
        int64_t n_in, n_out;
    };
    const std::vector<Shape> shapes = {
        {DType::Q4_0, 256, 97},   {DType::Q4_0, 512, 300},  {DType::Q4_0, 1024, 131},
        {DType::Q4_0, 2048, 700}, {DType::Q4_0, 4096, 257}, {DType::Q4_0, 4352, 190},
        {DType::Q8_0, 512, 77},   {DType::Q8_0, 2048, 400}, {DType::Q8_0, 4352, 90},
        {DType::Q4_K, 256, 150},  {DType::Q4_K, 512, 300},  {DType::Q4_K, 2048, 333},
        {DType::Q4_K, 4096, 200}, {DType::Q4_K, 8192, 64},  {DType::Q4_K, 16384, 40},
        {DType::Q6_K, 2048, 500}, {DType::Q6_K, 4096, 100},
    };
    for (const Shape& sh : shapes) {
        Opts o;
        o.expect_bulk = 1;
        o.parts = {sh.n_out};
        run_case(rng, sh.t, sh.n_in, o);
        Opts n = o;
        n.norm = n.one_plus = true;
        n.residual = n.alias = true;
        run_case(rng, sh.t, sh.n_in, n);
        if (small) continue;
        Opts g = o;
        g.glu = true;
        g.parts = {sh.n_out, sh.n_out};
        g.bias = g.norm = g.residual = true;
        g.scale = 1.25f;
        run_case(rng, sh.t, sh.n_in, g);
    }
    for (DType t : {DType::Q4_0, DType::Q4_K}) {
        Opts r;  // ~12 ring refills per CTA
        r.expect_bulk = 1;
        r.parts = {small ? 3000 : 20000};
        r.norm = true;
        run_case(rng, t, 4096, r);
        Opts tiny;  // 5 rows: 5 CTAs
        tiny.expect_bulk = 1;
        tiny.parts = {2, 3};
        tiny.x_misalign = 1;
        tiny.x_pad = 3;
        tiny.y_pad = 2;
        tiny.bias = tiny.residual = true;
        run_case(rng, t, 1024, tiny);
    }
    Opts f;  // Q6_K n_in 256: 2-byte d plane rows, not 16-byte aligned: the register kernels
    f.expect_bulk = 0;
    f.parts = {100};
    run_case(rng, DType::Q6_K, 256, f);
    Opts tok;  // two tokens: the register kernels
    tok.expect_bulk = 0;
    tok.n_tok = 2;
    run_case(rng, DType::Q4_0, 2048, tok);
}

// A chain of dependent bulk-kernel GEMVs (each copies its weights before its PDL wait, while the
// previous one runs) captured in a graph equals the same chain launched eagerly, and the eager chain
// equals the register kernels' chain within the references' tolerance (checked by the plain cases).
TEST(CudaGemv, BulkGraphCapturePdlChain) {
    SKIP_WITHOUT_GPU();
    test::GemvKernelReset bulk_on(1);
    Rng rng;
    for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        SCOPED_TRACE(dtype_name(t));
        constexpr int64_t n = 2048;
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
            for (int rep = 0; rep < 3; ++rep) {
                cuda::GemvArgs a;
                a.x = dx.as<float>();
                a.norm_w = dnw.as<float>();
                a.y = dy1.as<float>();
                EXPECT_TRUE(cuda::gemv_bulk_applies(gm, a));
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
            }
        };
        const auto reset = [&] {
            ASSERT_EQ(cudaMemcpy(dy2.get(), y2_0.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                      cudaSuccess);
        };
        std::vector<std::vector<float>> eager;
        expect_graph_matches_eager(s, reset, chain, {{&dy1, n}, {&dy2, n}}, std::string(dtype_name(t)),
                                   &eager);
        ASSERT_EQ(eager.size(), 2u);
        EXPECT_TRUE(std::all_of(eager[0].begin(), eager[0].end(), [](float v) { return std::isfinite(v); }));
        cudaStreamDestroy(s);
        cuda::free_matrix(gm);
    }
}

}  // namespace
}  // namespace pelican
