// The one-kernel decode MoE block (backend/cuda/moe_fused.h) against the chain of kernels it replaces,
// on fresh random inputs (PELICAN_TEST_SEED replays a failure). Per type pair and shape:
//  * the logits against a double host dot of W with x' (the router test's bound), the ids and weights
//    against ref::moe_route on the kernel's own logits (check_route_result) plus the shared slot, for the
//    route by logits (the default) and the softmax route; router rows copied to make exact ties (the
//    lower id must win, also across the route's 32-expert lists);
//  * act (silu(gate) * up per slot) bit for bit against the expert-slot gate/up GEMV (variant 0: one
//    row pair per warp, the same sum order) run on the kernel's ids;
//  * x against expert down GEMV + moe_combine on those ids and weights: |err| <= 1e-5 of the largest
//    |x| (the down sums and the combine are reordered, fp32);
//  * forced grids of 1 and 3 CTAs (every CTA loops over more rows) give the same bits as one CTA per SM;
//    the barrier's arrival count ends at 2 x grid per launch; two launches from a graph (PDL-chained,
//    the second reading the first's x) equal two eager ones bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_fused.h"
#include "cuda_moe_test_util.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::check_route_result;
using test::copy_to;
using test::from_device;
using test::kU;
using test::Rng;
using test::same_bits;
using test::to_device;
using test::upload_rows;

struct FusedCase {
    DType gu = DType::Q4_0, dn = DType::Q4_0;
    int64_t n_embd = 256, n_ff = 64;
    int n_expert = 16, k = 4;
    // > 0: router row r >= tie_stride is a copy of row r - tie_stride (equal logits: the lower id must
    // win every tie, across the route's 32-expert lists too); the ids are then checked exactly.
    int tie_stride = 0;
    std::string describe() const {
        std::ostringstream s;
        s << dtype_name(gu) << "/" << dtype_name(dn) << " n_embd " << n_embd << " n_ff " << n_ff
          << " experts " << n_expert << " top-" << k;
        if (tie_stride > 0) s << " tied rows " << tie_stride << " apart";
        return s.str();
    }
};

void run_fused_case(Rng& rng, const FusedCase& c) {
    SCOPED_TRACE(c.describe());
    const int64_t n = c.n_embd, ff = c.n_ff;
    const int E1 = c.n_expert + 1, S = c.k + 1;
    const test::RandomMatrix gu = test::random_matrix(rng, c.gu, n, E1 * 2 * ff, true);
    const test::RandomMatrix dn = test::random_matrix(rng, c.dn, ff, E1 * n, true);
    cuda::GpuMatrix g_gu = upload_rows(gu, 0, gu.n_out), g_dn = upload_rows(dn, 0, dn.n_out);
    ASSERT_TRUE(cuda::moe_fused_supported(g_gu, g_dn, n, ff, c.n_expert, c.k));
    std::vector<float> rw = test::random_vec(rng, n * E1, 0.05f);
    if (c.tie_stride > 0)
        for (int r = c.tie_stride; r < c.n_expert; ++r)
            std::copy_n(rw.begin() + (r - c.tie_stride) * n, n, rw.begin() + r * n);
    cuda::HostRows hr{reinterpret_cast<const uint8_t*>(rw.data()), static_cast<size_t>(n) * 4, E1};
    cuda::GpuMatrix g_r;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(DType::F32, n, &hr, 1, g_r, nullptr, &err)) << err;
    const std::vector<float> x0 = test::random_vec(rng, n, 2.0f);
    std::vector<float> nw(static_cast<size_t>(n));
    for (auto& v : nw) v = 0.2f * rng.normal();

    DeviceBuffer dx = to_device(x0), dnw = to_device(nw), dl = to_device(std::vector<float>(E1, NAN)),
                 dids = to_device(std::vector<int32_t>(static_cast<size_t>(S), -7)),
                 dw = to_device(std::vector<float>(static_cast<size_t>(S), NAN)),
                 dact = to_device(std::vector<float>(static_cast<size_t>(S * ff), NAN)),
                 dbar = to_device(std::vector<uint64_t>(1, 0u));
    int sms = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    const auto count = [](const DeviceBuffer& b) { return from_device<uint64_t>(b.get(), 1)[0]; };
    cuda::MoeFusedArgs a;
    a.x = dx.as<float>();
    a.n_embd = n;
    a.norm_w = dnw.as<float>();
    a.eps = 1e-6f;
    a.norm_one_plus = true;
    a.router_w = cuda::gpu_matrix_f32_rows(g_r);
    a.router_stride = cuda::gpu_matrix_f32_row_floats(g_r);
    a.n_expert = c.n_expert;
    a.k = c.k;
    a.gate_up = g_gu;
    a.down = g_dn;
    a.n_ff = ff;
    a.logits = dl.as<float>();
    a.ids = dids.as<int32_t>();
    a.weights = dw.as<float>();
    a.act = dact.as<float>();
    a.barrier = reinterpret_cast<unsigned long long*>(dbar.get());
    cuda::moe_fused_decode(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> logits = from_device<float>(dl.get(), static_cast<size_t>(E1)),
                             wts = from_device<float>(dw.get(), static_cast<size_t>(S)),
                             act = from_device<float>(dact.get(), static_cast<size_t>(S * ff)),
                             x1 = from_device<float>(dx.get(), static_cast<size_t>(n));
    const std::vector<int32_t> ids = from_device<int32_t>(dids.get(), static_cast<size_t>(S));
    EXPECT_EQ(count(dbar), 2u * static_cast<uint64_t>(sms)) << "two barriers per launch, one arrival per CTA";

    // Logits: x' as the kernel (fp32 rstd, products rounded as there), a double dot per row.
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i)
        ss = std::fmaf(x0[static_cast<size_t>(i)], x0[static_cast<size_t>(i)], ss);
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(n) + 1e-6f);
    int bad = 0;
    for (int r = 0; r < E1; ++r) {
        double dot = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const float xn = x0[static_cast<size_t>(i)] * rstd * (1.0f + nw[static_cast<size_t>(i)]);
            const double p = static_cast<double>(rw[static_cast<size_t>(r * n + i)]) * xn;
            dot += p;
            mag += std::fabs(p);
        }
        const double tol = (static_cast<double>(n) * kU + 1e-5) * mag + 1e-30;
        if (!(std::fabs(logits[static_cast<size_t>(r)] - dot) <= tol) && bad++ < 10)
            ADD_FAILURE() << "logit " << r << ": gpu " << logits[static_cast<size_t>(r)] << " ref " << dot;
    }
    EXPECT_EQ(bad, 0);
    check_route_result(std::vector<float>(logits.begin(), logits.begin() + c.n_expert), 1, c.n_expert, c.k,
                       true, c.tie_stride > 0, std::vector<int32_t>(ids.begin(), ids.begin() + c.k),
                       std::vector<float>(wts.begin(), wts.begin() + c.k));
    EXPECT_EQ(ids[static_cast<size_t>(c.k)], c.n_expert) << "the shared expert is the last slot";
    {
        const double g = logits[static_cast<size_t>(c.n_expert)], want = 1.0 / (1.0 + std::exp(-g));
        EXPECT_NEAR(wts[static_cast<size_t>(c.k)], want, 4e-7 * want);
    }

    // The chain on the kernel's ids: gate/up GEMV (variant 0), down GEMV, moe_combine.
    DeviceBuffer rx = to_device(x0), ract = to_device(std::vector<float>(static_cast<size_t>(S * ff), NAN)),
                 rout = to_device(std::vector<float>(static_cast<size_t>(S * n), NAN));
    {
        test::GemvKernelReset reset;
        cuda::gemv_force_variant(0);
        cuda::GemvArgs g;
        g.x = rx.as<float>();
        g.norm_w = dnw.as<float>();
        g.norm_eps = 1e-6f;
        g.norm_one_plus = true;
        g.glu = true;
        g.expert_ids = dids.as<int32_t>();
        g.n_expert_slots = S;
        g.expert_rows = 2 * ff;
        g.x_slot_stride = n;
        g.x_slot_div = S;
        g.y = ract.as<float>();
        cuda::gemv(g_gu, g, nullptr);
        cuda::gemv_force_variant(-1);
    }
    cuda::GemvArgs d;
    d.x = ract.as<float>();
    d.expert_ids = dids.as<int32_t>();
    d.n_expert_slots = S;
    d.expert_rows = n;
    d.x_slot_stride = ff;
    d.y = rout.as<float>();
    cuda::gemv(g_dn, d, nullptr);
    cuda::MoeCombineArgs cb;
    cb.n_tok = 1;
    cb.n_embd = n;
    cb.k = S;
    cb.expert_out = rout.as<float>();
    cb.weights = dw.as<float>();
    cb.residual = rx.as<float>();
    cb.y = rx.as<float>();
    cuda::moe_combine(cb, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> ref_act = from_device<float>(ract.get(), static_cast<size_t>(S * ff)),
                             ref_x = from_device<float>(rx.get(), static_cast<size_t>(n));
    size_t first = 0;
    EXPECT_TRUE(same_bits(act, ref_act, &first))
        << "act element " << first << ": fused " << act[first] << " gemv " << ref_act[first];
    double amax = 0.0;
    for (float v : ref_x) amax = std::max(amax, static_cast<double>(std::fabs(v)));
    bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double e =
            std::fabs(static_cast<double>(x1[static_cast<size_t>(i)]) - ref_x[static_cast<size_t>(i)]);
        if (!(e <= 1e-5 * amax) && bad++ < 10)
            ADD_FAILURE() << "x[" << i << "]: fused " << x1[static_cast<size_t>(i)] << " chain "
                          << ref_x[static_cast<size_t>(i)] << " (|x| max " << amax << ")";
    }
    EXPECT_EQ(bad, 0);

    // Smaller grids: the same bits.
    for (int grid : {1, 3}) {
        SCOPED_TRACE("grid " + std::to_string(grid));
        copy_to(dx, x0);
        copy_to(dact, std::vector<float>(static_cast<size_t>(S * ff), NAN));
        DeviceBuffer own = to_device(std::vector<uint64_t>(1, 0u));  // a counter per grid size
        cuda::MoeFusedArgs b = a;
        b.grid = grid;
        b.barrier = reinterpret_cast<unsigned long long*>(own.get());
        cuda::moe_fused_decode(b, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(count(own), 2u * static_cast<uint64_t>(grid));
        EXPECT_TRUE(same_bits(from_device<float>(dx.get(), static_cast<size_t>(n)), x1, &first))
            << "x " << first;
        EXPECT_TRUE(same_bits(from_device<float>(dact.get(), static_cast<size_t>(S * ff)), act, &first))
            << "act " << first;
    }

    // The softmax route (route_by_logits = false): the reference's choice too, the same logits.
    {
        SCOPED_TRACE("softmax route");
        copy_to(dx, x0);
        cuda::MoeFusedArgs b = a;
        b.route_by_logits = false;
        DeviceBuffer own = to_device(std::vector<uint64_t>(1, 0u));
        b.barrier = reinterpret_cast<unsigned long long*>(own.get());
        cuda::moe_fused_decode(b, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<int32_t> ids2 = from_device<int32_t>(dids.get(), static_cast<size_t>(S));
        const std::vector<float> wts2 = from_device<float>(dw.get(), static_cast<size_t>(S));
        EXPECT_TRUE(same_bits(from_device<float>(dl.get(), static_cast<size_t>(E1)), logits, &first))
            << "logit " << first;
        check_route_result(std::vector<float>(logits.begin(), logits.begin() + c.n_expert), 1, c.n_expert,
                           c.k, true, c.tie_stride > 0,
                           std::vector<int32_t>(ids2.begin(), ids2.begin() + c.k),
                           std::vector<float>(wts2.begin(), wts2.begin() + c.k));
    }

    // Two launches eagerly, then the same two from a graph (PDL chained): the same bits.
    copy_to(dx, x0);
    cuda::moe_fused_decode(a, nullptr);
    cuda::moe_fused_decode(a, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> x2 = from_device<float>(dx.get(), static_cast<size_t>(n));
    cudaStream_t st = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cuda::moe_fused_decode(a, st);
    cuda::moe_fused_decode(a, st);
    ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int rep = 0; rep < 3; ++rep) {
        copy_to(dx, x0);
        ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
        EXPECT_TRUE(same_bits(from_device<float>(dx.get(), static_cast<size_t>(n)), x2, &first))
            << "graph replay " << rep << ", x " << first;
    }
    EXPECT_EQ(count(dbar), 2u * 9u * static_cast<uint64_t>(sms)) << "9 launches on this counter";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
    for (cuda::GpuMatrix* m : {&g_gu, &g_dn, &g_r}) cuda::free_matrix(*m);
}

TEST(CudaMoeFused, MatchesChain) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    std::vector<FusedCase> cases = {
        {DType::Q4_0, DType::Q4_0, 256, 64, 16, 4},
        {DType::Q8_0, DType::Q8_0, 256, 64, 16, 4},
        {DType::Q4_K, DType::Q4_K, 512, 256, 12, 3},
        {DType::Q4_K, DType::Q6_K, 512, 256, 12, 3},
        {DType::Q6_K, DType::Q6_K, 256, 256, 9, 2},
        {DType::F32, DType::F32, 128, 32, 8, 2},
        {DType::Q4_0, DType::Q4_0, 96, 96, 33, 15},
        {DType::Q8_0, DType::Q8_0, 2048, 128, 16, 4},     // two chunks per lane: the shared slot in phase B
        {DType::Q4_0, DType::Q4_0, 256, 64, 16, 4, 1},    // all logits equal: ids 0..k-1
        {DType::Q4_0, DType::Q4_0, 256, 64, 64, 6, 32},   // ties across the two 32-expert lists
        {DType::Q4_0, DType::Q4_0, 128, 64, 200, 15, 0},  // 7 lists, the last partial; k = 15
    };
    if (!test::cuda_test_small()) {  // the Qwen3.5-35B-A3B and 122B-A10B expert shapes
        cases.push_back({DType::Q4_0, DType::Q4_0, 2048, 512, 256, 8});
        cases.push_back({DType::Q4_K, DType::Q4_K, 2048, 512, 256, 8});
        cases.push_back({DType::Q4_0, DType::Q4_0, 3072, 1024, 256, 8});
    }
    for (const FusedCase& c : cases) run_fused_case(rng, c);
}

// The speed rule (no GPU needed): on an H200 (132 SMs) the Qwen3.5-35B-A3B expert shape (ff 512; 64 units
// per gate/up row in Q4_0, 32 in Q4_K) and the 122B-A10B one (ff 1024; 96 / 48 units) take the fused
// kernel; fewer SMs (more items per warp than measured) keep the chain.
TEST(CudaMoeFused, PreferredShapes) {
    EXPECT_TRUE(cuda::moe_fused_preferred(512, 8, 64, 132));
    EXPECT_TRUE(cuda::moe_fused_preferred(512, 8, 32, 132));
    EXPECT_TRUE(cuda::moe_fused_preferred(1024, 8, 96, 132));
    EXPECT_TRUE(cuda::moe_fused_preferred(1024, 8, 48, 132));
    EXPECT_FALSE(cuda::moe_fused_preferred(1024, 8, 96, 100));  // 17.3 items per warp
    EXPECT_FALSE(cuda::moe_fused_preferred(512, 8, 64, 40));    // 14.4
    EXPECT_FALSE(cuda::moe_fused_preferred(0, 8, 64, 132));
}

TEST(CudaMoeFused, RejectsUnsupported) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const test::RandomMatrix gu = test::random_matrix(rng, DType::Q4_0, 256, 5 * 2 * 64, true);
    const test::RandomMatrix dn = test::random_matrix(rng, DType::Q8_0, 64, 5 * 256, true);
    const test::RandomMatrix dn4 = test::random_matrix(rng, DType::Q4_0, 64, 5 * 256, true);
    cuda::GpuMatrix g_gu = upload_rows(gu, 0, gu.n_out), g_dn = upload_rows(dn, 0, dn.n_out),
                    g_dn4 = upload_rows(dn4, 0, dn4.n_out);
    EXPECT_FALSE(cuda::moe_fused_supported(g_gu, g_dn, 256, 64, 4, 2)) << "Q4_0 gate/up with Q8_0 down";
    EXPECT_TRUE(cuda::moe_fused_supported(g_gu, g_dn4, 256, 64, 4, 2));
    EXPECT_FALSE(cuda::moe_fused_supported(g_gu, g_dn4, 256, 64, 5, 2)) << "expert count off by one";
    EXPECT_FALSE(cuda::moe_fused_supported(g_gu, g_dn4, 256, 32, 4, 2)) << "n_ff not the matrices'";
    for (cuda::GpuMatrix* m : {&g_gu, &g_dn, &g_dn4}) cuda::free_matrix(*m);
}

}  // namespace
}  // namespace pelican
