// The GPU MoE routing and combine (backend/cuda/moe.h) on fresh random inputs (PELICAN_TEST_SEED
// replays a failure); the expert GEMVs, grouped experts, the fused combine and a whole MoE block are in
// cuda_moe_experts_test.cpp, the shared helpers in cuda_moe_test_util.h.
//  * moe_route against ref::moe_route. The kernel computes the same double exp terms (its sum
//    in another order, ~1e-16 relative), so p agree to the fp32 rounding (at most 1 ulp apart,
//    almost always equal). Logits with clear gaps (consecutive p a factor e^0.1 apart) must
//    give exactly the reference ids; exactly equal logits (ties) too, since equal logits give
//    equal p in both; random logits may swap two choices only where their reference p are
//    within 1e-6 relative. Weights: within 8 u relative (u = 2^-24) of the reference.
//  * moe_combine against a double host loop: fp32 with one rounding per term and per sum, so
//    |err| <= (k + 8) u (|res| + |sg sh| + sum_j |w_j e_j|) (sigmoid via expf: a few ulps).
// Small mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every route case
// runs; the combine's float4 case at n 512 instead of 2048.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/moe.h"
#include "cuda_moe_test_util.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops/ops_qwen35.h"
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

#define SKIP_WITHOUT_GPU()                \
    if (!cuda::gpu_available()) {         \
        GTEST_SKIP() << "no CUDA device"; \
    }                                     \
    static_assert(true, "")

// ---- moe_route -----------------------------------------------------------------------------------

// logits: dense [n_tok, n_expert]; the kernel reads them stride_pad floats apart (NaN in the gaps).
void check_route(const std::vector<float>& logits, int n_tok, int n_expert, int k, bool renormalize,
                 int64_t stride_pad, bool exact_ids, const std::string& what) {
    SCOPED_TRACE(testing::Message() << what << ": n_tok " << n_tok << " n_expert " << n_expert << " k " << k
                                    << (renormalize ? " renorm" : "") << " pad " << stride_pad);
    const int64_t stride = n_expert + stride_pad;
    std::vector<float> buf(static_cast<size_t>(stride * n_tok), NAN);
    for (int t = 0; t < n_tok; ++t)
        std::copy_n(logits.begin() + static_cast<int64_t>(t) * n_expert, n_expert,
                    buf.begin() + static_cast<int64_t>(t) * stride);
    const size_t nk = static_cast<size_t>(n_tok) * static_cast<size_t>(k);
    DeviceBuffer dl = to_device(buf), dids = to_device(std::vector<int32_t>(nk, -7)),
                 dw = to_device(std::vector<float>(nk, NAN));
    cuda::moe_route(dl.as<float>(), stride_pad ? stride : 0, n_tok, n_expert, k, renormalize,
                    dids.as<int32_t>(), dw.as<float>(), nullptr);
    const cudaError_t st = cudaDeviceSynchronize();
    ASSERT_EQ(st, cudaSuccess) << cudaGetErrorString(st);
    check_route_result(logits, n_tok, n_expert, k, renormalize, exact_ids,
                       from_device<int32_t>(dids.get(), nk), from_device<float>(dw.get(), nk));
}

// Per token a random permutation of 0.1 * (0 .. n_expert-1) plus a random offset: distinct p,
// consecutive ones a factor e^0.1 apart.
std::vector<float> gapped_logits(Rng& rng, int n_tok, int n_expert) {
    std::vector<float> l(static_cast<size_t>(n_tok) * n_expert);
    std::vector<int> perm(static_cast<size_t>(n_expert));
    for (int t = 0; t < n_tok; ++t) {
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng.gen);
        const float off = rng.uniform(-3.0f, 3.0f);
        for (int e = 0; e < n_expert; ++e)
            l[static_cast<size_t>(t) * n_expert + e] =
                off + 0.1f * static_cast<float>(perm[static_cast<size_t>(e)]);
    }
    return l;
}

struct RouteShape {
    int n_tok, n_expert, k;
};
const RouteShape kRouteShapes[] = {{1, 8, 2},    {5, 8, 8},  {3, 64, 8}, {37, 128, 8}, {9, 256, 8},
                                   {4, 512, 16}, {7, 33, 4}, {2, 1, 1},  {6, 100, 10}, {1, 512, 1}};

TEST(CudaMoe, RouteGappedLogitsExactIds) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (const RouteShape& s : kRouteShapes)
        for (bool renorm : {true, false})
            for (int64_t pad : {int64_t{0}, int64_t{3}})
                check_route(gapped_logits(rng, s.n_tok, s.n_expert), s.n_tok, s.n_expert, s.k, renorm, pad,
                            true, "gapped");
}

// The shared expert as slot k: ids [n_tok, k + 1] with (n_expert, sigmoid(gate logit)) last, the
// routed k as without it.
TEST(CudaMoe, RouteSharedSlot) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (const RouteShape& s : {RouteShape{1, 8, 2}, RouteShape{9, 256, 8}, RouteShape{5, 64, 8}}) {
        SCOPED_TRACE(testing::Message() << "n_tok " << s.n_tok << " n_expert " << s.n_expert << " k " << s.k);
        const int E = s.n_expert, k = s.k, ko = k + 1;
        const std::vector<float> l = gapped_logits(rng, s.n_tok, E);
        std::vector<float> buf(static_cast<size_t>(s.n_tok) * (E + 1));
        std::vector<float> gate(static_cast<size_t>(s.n_tok));
        for (int t = 0; t < s.n_tok; ++t) {
            std::copy_n(l.begin() + static_cast<int64_t>(t) * E, E,
                        buf.begin() + static_cast<int64_t>(t) * (E + 1));
            gate[static_cast<size_t>(t)] = rng.uniform(-6.0f, 6.0f);
            buf[static_cast<size_t>(t) * (E + 1) + E] = gate[static_cast<size_t>(t)];
        }
        const size_t n = static_cast<size_t>(s.n_tok) * ko;
        DeviceBuffer dl = to_device(buf), dids = to_device(std::vector<int32_t>(n, -7)),
                     dw = to_device(std::vector<float>(n, NAN));
        cuda::moe_route(dl.as<float>(), E + 1, s.n_tok, E, k, true, dids.as<int32_t>(), dw.as<float>(),
                        nullptr,
                        /*shared_slot=*/true);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<int32_t> ids = from_device<int32_t>(dids.get(), n);
        const std::vector<float> w = from_device<float>(dw.get(), n);
        std::vector<int32_t> rids;
        std::vector<float> rw;
        for (int t = 0; t < s.n_tok; ++t) {
            for (int j = 0; j < k; ++j) {
                rids.push_back(ids[static_cast<size_t>(t) * ko + j]);
                rw.push_back(w[static_cast<size_t>(t) * ko + j]);
            }
            EXPECT_EQ(ids[static_cast<size_t>(t) * ko + k], E) << "token " << t;
            const double g = gate[static_cast<size_t>(t)], want = 1.0 / (1.0 + std::exp(-g));
            EXPECT_NEAR(w[static_cast<size_t>(t) * ko + k], want, 4e-7 * want) << "token " << t;
        }
        check_route_result(l, s.n_tok, E, k, true, true, rids, rw);
    }
}

// moe_router_route (router GEMV + top-k fused, one token): the logits against a double host dot of
// W with x' (x' as the GEMV prologue: fp32 rstd and products), |err| <= n_embd u sum |w x'|; the ids
// and weights against ref::moe_route on the kernel's own logits (random: near-ties may swap); the
// shared slot (k, sigmoid of the last row's logit); a second launch (the arrival counter wrapped back)
// and graph replays give the same bits.
TEST(CudaMoe, RouterRouteFused) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    struct Case {
        int64_t n_embd;
        int n_expert, k;
        bool shared, one_plus, norm;
    };
    const Case cases[] = {{2048, 256, 8, true, true, true},  {3072, 256, 8, true, true, true},
                          {64, 8, 2, false, false, true},    {1024, 128, 8, false, true, true},
                          {512, 512, 16, true, false, true}, {256, 33, 4, false, false, false}};
    for (const Case& c : cases) {
        SCOPED_TRACE(testing::Message() << "n_embd " << c.n_embd << " n_expert " << c.n_expert << " k " << c.k
                                        << (c.shared ? " shared" : "") << (c.one_plus ? " one_plus" : ""));
        const int n_rows = c.n_expert + (c.shared ? 1 : 0), ko = c.k + (c.shared ? 1 : 0);
        const int64_t n = c.n_embd;
        const std::vector<float> x = test::random_vec(rng, n, 2.0f);
        std::vector<float> nw(static_cast<size_t>(n));
        for (auto& v : nw) v = c.one_plus ? 0.2f * rng.normal() : 1.0f + 0.2f * rng.normal();
        const std::vector<float> w = test::random_vec(rng, n * n_rows, 0.05f);
        cuda::HostRows hr{reinterpret_cast<const uint8_t*>(w.data()), static_cast<size_t>(n) * 4, n_rows};
        cuda::GpuMatrix gm;
        const char* err = nullptr;
        ASSERT_TRUE(cuda::upload_matrix(DType::F32, n, &hr, 1, gm, nullptr, &err)) << err;
        DeviceBuffer dx = to_device(x), dnw = to_device(nw), dl = to_device(std::vector<float>(n_rows, NAN)),
                     dids = to_device(std::vector<int32_t>(static_cast<size_t>(ko), -7)),
                     dw = to_device(std::vector<float>(static_cast<size_t>(ko), NAN)),
                     dctr = to_device(std::vector<uint32_t>(4, 0u));
        cuda::MoeRouterArgs a;
        a.x = dx.as<float>();
        a.n_embd = n;
        a.norm_w = c.norm ? dnw.as<float>() : nullptr;
        a.eps = 1e-6f;
        a.norm_one_plus = c.one_plus;
        a.w = cuda::gpu_matrix_f32_rows(gm);
        a.w_stride = cuda::gpu_matrix_f32_row_floats(gm);
        a.n_rows = n_rows;
        a.logits = dl.as<float>();
        a.n_expert = c.n_expert;
        a.k = c.k;
        a.shared_slot = c.shared;
        a.ids = dids.as<int32_t>();
        a.weights = dw.as<float>();
        a.counter = dctr.as<uint32_t>();
        cuda::moe_router_route(a, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> got = from_device<float>(dl.get(), static_cast<size_t>(n_rows));
        const std::vector<int32_t> ids = from_device<int32_t>(dids.get(), static_cast<size_t>(ko));
        const std::vector<float> wts = from_device<float>(dw.get(), static_cast<size_t>(ko));
        EXPECT_EQ(from_device<uint32_t>(dctr.get(), 1)[0], 0u) << "the arrival counter must wrap to 0";

        // x' as the kernel (fp32 rstd, products rounded as there), then a double dot per row.
        float ss = 0.0f;
        for (int64_t i = 0; i < n; ++i)
            ss = std::fmaf(x[static_cast<size_t>(i)], x[static_cast<size_t>(i)], ss);
        const float rstd = c.norm ? 1.0f / std::sqrt(ss / static_cast<float>(n) + 1e-6f) : 1.0f;
        std::vector<float> xn(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            const float g =
                c.norm ? (c.one_plus ? 1.0f + nw[static_cast<size_t>(i)] : nw[static_cast<size_t>(i)]) : 1.0f;
            xn[static_cast<size_t>(i)] =
                c.norm ? x[static_cast<size_t>(i)] * rstd * g : x[static_cast<size_t>(i)];
        }
        int bad = 0;
        for (int r = 0; r < n_rows; ++r) {
            double dot = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const double p =
                    static_cast<double>(w[static_cast<size_t>(r * n + i)]) * xn[static_cast<size_t>(i)];
                dot += p;
                mag += std::fabs(p);
            }
            // fp32 accumulation plus the x' rounding differences (sum of squares order): n u mag + 1e-5 mag.
            const double tol = (static_cast<double>(n) * kU + 1e-5) * mag + 1e-30;
            if (!(std::fabs(got[static_cast<size_t>(r)] - dot) <= tol) && bad++ < 10)
                ADD_FAILURE() << "row " << r << ": gpu " << got[static_cast<size_t>(r)] << " ref " << dot
                              << " tol " << tol;
        }
        EXPECT_EQ(bad, 0);
        const std::vector<float> routed(got.begin(), got.begin() + c.n_expert);
        check_route_result(routed, 1, c.n_expert, c.k, true, false,
                           std::vector<int32_t>(ids.begin(), ids.begin() + c.k),
                           std::vector<float>(wts.begin(), wts.begin() + c.k));
        if (c.shared) {
            EXPECT_EQ(ids[static_cast<size_t>(c.k)], c.n_expert);
            const double g = got[static_cast<size_t>(c.n_expert)], want = 1.0 / (1.0 + std::exp(-g));
            EXPECT_NEAR(wts[static_cast<size_t>(c.k)], want, 4e-7 * want);
        }

        // Again, eagerly and from a graph: the same bits.
        copy_to(dids, std::vector<int32_t>(static_cast<size_t>(ko), -7));
        cuda::moe_router_route(a, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(from_device<int32_t>(dids.get(), static_cast<size_t>(ko)), ids);
        cudaStream_t st = nullptr;
        ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
        cudaGraph_t graph = nullptr;
        ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        cuda::moe_router_route(a, st);
        cuda::moe_router_route(a, st);
        ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        copy_to(dl, std::vector<float>(static_cast<size_t>(n_rows), NAN));
        copy_to(dw, std::vector<float>(static_cast<size_t>(ko), NAN));
        for (int rep = 0; rep < 3; ++rep) ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
        size_t first = 0;
        EXPECT_TRUE(same_bits(from_device<float>(dl.get(), static_cast<size_t>(n_rows)), got, &first))
            << "logit " << first;
        EXPECT_TRUE(same_bits(from_device<float>(dw.get(), static_cast<size_t>(ko)), wts, &first))
            << "weight " << first;
        EXPECT_EQ(from_device<uint32_t>(dctr.get(), 1)[0], 0u);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(st);
        cuda::free_matrix(gm);
    }
}

TEST(CudaMoe, RouteRandomLogits) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (const RouteShape& s : kRouteShapes)
        for (float scale : {0.5f, 3.0f}) {
            std::vector<float> l = test::random_vec(rng, static_cast<int64_t>(s.n_tok) * s.n_expert, scale);
            check_route(l, s.n_tok, s.n_expert, s.k, true, 0, false, "random");
        }
}

TEST(CudaMoe, RouteTiesAndMaskedRows) {
    SKIP_WITHOUT_GPU();
    // All equal: ids 0 .. k-1, weights 1/k (renormalised) or 1/n_expert.
    for (bool renorm : {true, false})
        check_route(std::vector<float>(3 * 64, 0.25f), 3, 64, 8, renorm, 0, true, "all equal");
    // Groups of equal logits: ties inside the top k and across its boundary.
    {
        const int E = 40, k = 6;
        std::vector<float> l(2 * E);
        for (int e = 0; e < E; ++e) {
            l[static_cast<size_t>(e)] = e % 5 == 3 ? 2.0f : (e % 7 == 0 ? 1.0f : -1.0f);      // 8 of 2.0 > k
            l[static_cast<size_t>(E + e)] = e % 9 == 4 ? 2.0f : (e % 6 == 1 ? 1.0f : -1.0f);  // 4 of 2.0 < k
        }
        check_route(l, 2, E, k, true, 0, true, "tie groups");
        check_route(l, 2, E, k, false, 5, true, "tie groups");
    }
    // Masked experts (-inf), and a fully masked row (p = 0: ids 0 .. k-1, weights 0).
    {
        const int E = 96, k = 8;
        Rng rng;
        std::vector<float> l = gapped_logits(rng, 3, E);
        for (int e = 0; e < E; e += 2) l[static_cast<size_t>(e)] = -INFINITY;
        for (int e = 0; e < E; ++e) l[static_cast<size_t>(2 * E + e)] = -INFINITY;
        check_route(l, 3, E, k, true, 0, true, "masked");
        check_route(l, 3, E, k, false, 0, true, "masked");
    }
}

// ---- moe_combine ---------------------------------------------------------------------------------

enum class Res { kNone, kSeparate, kInPlace };

struct CombineCase {
    int n_tok;
    int64_t n;
    int k;
    bool shared, gate;
    Res res;
    int64_t pad = 0;   // extra floats per row of every strided operand
    int misalign = 0;  // floats: residual / y start this far past a 16-byte boundary
};

void check_combine(Rng& rng, const CombineCase& c) {
    SCOPED_TRACE(testing::Message() << "n_tok " << c.n_tok << " n " << c.n << " k " << c.k
                                    << (c.shared ? " shared" : "") << (c.gate ? " gate" : "")
                                    << (c.res == Res::kNone       ? ""
                                        : c.res == Res::kSeparate ? " residual"
                                                                  : " in-place")
                                    << " pad " << c.pad << " misalign " << c.misalign);
    const int64_t n = c.n, rs = n + c.pad, nk = static_cast<int64_t>(c.n_tok) * c.k;
    const std::vector<float> eo = test::random_vec(rng, std::max<int64_t>(nk, 1) * rs);
    const std::vector<float> sh = test::random_vec(rng, c.n_tok * rs);
    std::vector<float> res = test::random_vec(rng, c.n_tok * rs + c.misalign);
    std::vector<float> w(static_cast<size_t>(std::max<int64_t>(nk, 1)));
    for (auto& v : w) v = rng.uniform(0.0f, 1.0f);
    std::vector<float> gate(static_cast<size_t>(3 * c.n_tok));  // stride 3
    for (auto& v : gate) v = 3.0f * rng.normal();
    const float sentinel = 12345.0f;
    std::vector<float> y0(static_cast<size_t>(c.n_tok * rs + c.misalign), sentinel);
    if (c.res == Res::kInPlace) y0 = res;

    DeviceBuffer deo = to_device(eo), dsh = to_device(sh), dres = to_device(res), dw = to_device(w),
                 dg = to_device(gate), dy = to_device(y0);
    cuda::MoeCombineArgs a;
    a.n_tok = c.n_tok;
    a.n_embd = n;
    a.k = c.k;
    a.expert_out = deo.as<float>();
    a.expert_stride = c.pad ? rs : 0;
    a.weights = dw.as<float>();
    if (c.shared) {
        a.shared_out = dsh.as<float>();
        a.shared_stride = c.pad ? rs : 0;
        if (c.gate) {
            a.shared_gate_logit = dg.as<float>() + 2;
            a.shared_gate_stride = 3;
        }
    }
    float* y = dy.as<float>() + c.misalign;
    if (c.res != Res::kNone) {
        a.residual = c.res == Res::kInPlace ? y : dres.as<float>() + c.misalign;
        a.residual_stride = c.pad ? rs : 0;
    }
    a.y = y;
    a.y_stride = c.pad ? rs : 0;
    cuda::moe_combine(a, nullptr);
    const cudaError_t st = cudaDeviceSynchronize();
    ASSERT_EQ(st, cudaSuccess) << cudaGetErrorString(st);
    const std::vector<float> got = from_device<float>(dy.get(), y0.size());

    int bad = 0;
    for (int t = 0; t < c.n_tok; ++t)
        for (int64_t i = 0; i < rs; ++i) {
            const size_t yi = static_cast<size_t>(c.misalign + t * rs + i);
            if (i >= n) {
                if (std::memcmp(&got[yi], &y0[yi], 4) != 0 && bad++ < 10)
                    ADD_FAILURE() << "token " << t << ": gap element " << i << " written";
                continue;
            }
            double want = 0.0, mag = 0.0;
            if (c.res != Res::kNone) {
                want = res[yi];
                mag = std::fabs(want);
            }
            if (c.shared) {
                const double g = c.gate ? gate[static_cast<size_t>(3 * t + 2)] : 0.0;
                const double sg = c.gate ? 1.0 / (1.0 + std::exp(-g)) : 1.0;
                const double v = sg * sh[static_cast<size_t>(t * rs + i)];
                want += v;
                mag += std::fabs(v);
            }
            for (int j = 0; j < c.k; ++j) {
                const double v = static_cast<double>(w[static_cast<size_t>(t * c.k + j)]) *
                                 eo[static_cast<size_t>((t * c.k + j) * rs + i)];
                want += v;
                mag += std::fabs(v);
            }
            const double tol = (c.k + 8) * kU * mag + 1e-30;
            if (!(std::fabs(got[yi] - want) <= tol) && bad++ < 10)
                ADD_FAILURE() << "token " << t << " elem " << i << ": gpu " << got[yi] << " want " << want
                              << " tol " << tol;
        }
    EXPECT_EQ(bad, 0);
}

TEST(CudaMoe, Combine) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const int64_t wide = test::cuda_test_size<int64_t>(2048, 512);
    for (int n_tok : {1, 5})
        for (int k : {8, 1, 0})
            for (Res r : {Res::kNone, Res::kSeparate, Res::kInPlace}) {
                check_combine(rng, {n_tok, wide, k, true, true, r});          // float4 path
                check_combine(rng, {n_tok, 100, k, k != 1, false, r, 0, 0});  // n % 4 = 0, no gate
                check_combine(rng, {n_tok, 102, k, true, true, r, 3, 0});     // n % 4 != 0: scalar
                check_combine(rng, {n_tok, 256, k, true, k == 0, r, 4, 1});   // misaligned: scalar
            }
    check_combine(rng, {3, 64, 16, false, false, Res::kInPlace, 8, 0});  // no shared expert
}

}  // namespace
}  // namespace pelican
