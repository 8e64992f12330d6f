// A whole GPU MoE block as the forward pass chains it (router GEMV -> moe_route -> expert GEMVs in slot
// mode -> shared expert -> moe_combine, all PDL launches, the ids buffer holding stale ids before the
// route), on fresh random inputs (PELICAN_TEST_SEED replays a failure): the route against ref::moe_route
// on the GPU's logits, each slot's expert outputs bit for bit against a plain gemv() on that expert's
// rows, the combine against a double host loop, then the chain replayed from a CUDA graph (same bits).
// The pieces alone are in cuda_moe_test.cpp (routing, combine) and cuda_moe_experts_test.cpp (expert
// GEMVs, grouping); the one-kernel decode block in cuda_moe_fused_test.cpp. Small mode
// (PELICAN_CUDA_TEST_SMALL=1) runs every case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
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
using test::to_device;
using test::upload_rows;

void run_block(Rng& rng, DType t, int n_tok) {
    constexpr int64_t n_embd = 512, sh_ff = 256;
    constexpr int E = 16, k = 4;
    const int64_t n_ff = t == DType::Q4_K || t == DType::Q6_K ? 256 : 128;
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " n_tok " << n_tok);
    const int nk = n_tok * k;
    // Weights: router with the shared-expert gate as its last row (F32), experts and shared expert.
    const test::RandomMatrix router = test::random_matrix(rng, DType::F32, n_embd, E + 1, true),
                             gate_up = test::random_matrix(rng, t, n_embd, E * 2 * n_ff, true),
                             down = test::random_matrix(rng, t, n_ff, E * n_embd, true),
                             sh_gate_up = test::random_matrix(rng, t, n_embd, 2 * sh_ff, true),
                             sh_down = test::random_matrix(rng, t, sh_ff, n_embd, true);
    cuda::GpuMatrix g_router = upload_rows(router, 0, E + 1),
                    g_gate_up = upload_rows(gate_up, 0, gate_up.n_out),
                    g_down = upload_rows(down, 0, down.n_out),
                    g_sh_gate_up = upload_rows(sh_gate_up, 0, 2 * sh_ff),
                    g_sh_down = upload_rows(sh_down, 0, n_embd);
    std::vector<float> hidden0 = test::random_vec(rng, n_tok * n_embd), nw(static_cast<size_t>(n_embd));
    for (auto& v : nw) v = 1.0f + 0.2f * rng.normal();
    const std::vector<int32_t> stale(static_cast<size_t>(nk), E - 1);
    DeviceBuffer d_hidden = to_device(hidden0), d_hidden0 = to_device(hidden0), d_nw = to_device(nw),
                 d_logits(n_tok * (E + 1) * sizeof(float)), d_ids = to_device(stale), d_w(nk * sizeof(float)),
                 d_act(nk * n_ff * sizeof(float)), d_eout(nk * n_embd * sizeof(float)),
                 d_sh_act(n_tok * sh_ff * sizeof(float)), d_sh_out(n_tok * n_embd * sizeof(float));
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    auto chain = [&] {
        cuda::GemvArgs r;  // logits = [router; shared gate] rms_norm(hidden)
        r.x = d_hidden.as<float>();
        r.n_tok = n_tok;
        r.norm_w = d_nw.as<float>();
        r.y = d_logits.as<float>();
        cuda::gemv(g_router, r, s);
        cuda::moe_route(d_logits.as<float>(), E + 1, n_tok, E, k, true, d_ids.as<int32_t>(), d_w.as<float>(),
                        s);
        cuda::GemvArgs gu;  // act[t * k + j] = swiglu(W_gu[ids] rms_norm(hidden[t]))
        gu.x = d_hidden.as<float>();
        gu.norm_w = d_nw.as<float>();
        gu.glu = true;
        gu.y = d_act.as<float>();
        gu.expert_ids = d_ids.as<int32_t>();
        gu.n_expert_slots = nk;
        gu.expert_rows = 2 * n_ff;
        gu.x_slot_stride = n_embd;
        gu.x_slot_div = k;
        cuda::gemv(g_gate_up, gu, s);
        cuda::GemvArgs dn;  // eout[s] = W_down[ids[s]] act[s]
        dn.x = d_act.as<float>();
        dn.y = d_eout.as<float>();
        dn.expert_ids = d_ids.as<int32_t>();
        dn.n_expert_slots = nk;
        dn.expert_rows = n_embd;
        dn.x_slot_stride = n_ff;
        cuda::gemv(g_down, dn, s);
        cuda::GemvArgs sgu;
        sgu.x = d_hidden.as<float>();
        sgu.n_tok = n_tok;
        sgu.norm_w = d_nw.as<float>();
        sgu.glu = true;
        sgu.y = d_sh_act.as<float>();
        cuda::gemv(g_sh_gate_up, sgu, s);
        cuda::GemvArgs sdn;
        sdn.x = d_sh_act.as<float>();
        sdn.n_tok = n_tok;
        sdn.y = d_sh_out.as<float>();
        cuda::gemv(g_sh_down, sdn, s);
        cuda::MoeCombineArgs cb;  // hidden += sum_j w_j eout + sigmoid(gate) shared
        cb.n_tok = n_tok;
        cb.n_embd = n_embd;
        cb.k = k;
        cb.expert_out = d_eout.as<float>();
        cb.weights = d_w.as<float>();
        cb.shared_out = d_sh_out.as<float>();
        cb.shared_gate_logit = d_logits.as<float>() + E;
        cb.shared_gate_stride = E + 1;
        cb.residual = d_hidden.as<float>();
        cb.y = d_hidden.as<float>();
        cuda::moe_combine(cb, s);
    };
    chain();
    {
        const cudaError_t st = cudaStreamSynchronize(s);
        ASSERT_EQ(st, cudaSuccess) << cudaGetErrorString(st);
    }
    const std::vector<float> logits =
        from_device<float>(d_logits.get(), static_cast<size_t>(n_tok * (E + 1)));
    const std::vector<int32_t> ids = from_device<int32_t>(d_ids.get(), static_cast<size_t>(nk));
    const std::vector<float> w = from_device<float>(d_w.get(), static_cast<size_t>(nk)),
                             act = from_device<float>(d_act.get(), static_cast<size_t>(nk * n_ff)),
                             eout = from_device<float>(d_eout.get(), static_cast<size_t>(nk * n_embd)),
                             sh_out = from_device<float>(d_sh_out.get(), static_cast<size_t>(n_tok * n_embd)),
                             hidden = from_device<float>(d_hidden.get(), static_cast<size_t>(n_tok * n_embd));
    // Route: the reference on the GPU's logits (shared-gate column dropped).
    std::vector<float> dense(static_cast<size_t>(n_tok * E));
    for (int tk = 0; tk < n_tok; ++tk) std::copy_n(logits.begin() + tk * (E + 1), E, dense.begin() + tk * E);
    {
        SCOPED_TRACE("block router");
        check_route_result(dense, n_tok, E, k, true, false, ids, w);
    }
    // Experts: each slot equals the plain GEMV on its expert's rows (same bits).
    std::map<int, cuda::GpuMatrix> gu_e, dn_e;
    DeviceBuffer d_one(std::max(n_ff, n_embd) * sizeof(float));
    for (int sl = 0; sl < nk; ++sl) {
        const int e = ids[static_cast<size_t>(sl)];
        ASSERT_TRUE(e >= 0 && e < E);
        if (!gu_e.count(e)) {
            gu_e[e] = upload_rows(gate_up, e * 2 * n_ff, 2 * n_ff);
            dn_e[e] = upload_rows(down, e * n_embd, n_embd);
        }
        cuda::GemvArgs a;
        a.x = d_hidden0.as<float>() + (sl / k) * n_embd;
        a.norm_w = d_nw.as<float>();
        a.glu = true;
        a.y = d_one.as<float>();
        cuda::gemv(gu_e[e], a, nullptr);
        const std::vector<float> one = from_device<float>(d_one.get(), static_cast<size_t>(n_ff));
        EXPECT_EQ(std::memcmp(one.data(), act.data() + sl * n_ff, n_ff * sizeof(float)), 0)
            << "gate/up slot " << sl << " (expert " << e << ")";
        cuda::GemvArgs b;
        b.x = d_act.as<float>() + sl * n_ff;
        b.y = d_one.as<float>();
        cuda::gemv(dn_e[e], b, nullptr);
        const std::vector<float> two = from_device<float>(d_one.get(), static_cast<size_t>(n_embd));
        EXPECT_EQ(std::memcmp(two.data(), eout.data() + sl * n_embd, n_embd * sizeof(float)), 0)
            << "down slot " << sl << " (expert " << e << ")";
    }
    // Combine: a double host loop on the GPU's intermediates.
    int bad = 0;
    for (int tk = 0; tk < n_tok; ++tk) {
        const double sg =
            1.0 / (1.0 + std::exp(-static_cast<double>(logits[static_cast<size_t>(tk * (E + 1) + E)])));
        for (int64_t i = 0; i < n_embd; ++i) {
            const size_t yi = static_cast<size_t>(tk * n_embd + i);
            double want = hidden0[yi] + sg * sh_out[yi],
                   mag = std::fabs(hidden0[yi]) + std::fabs(sg * sh_out[yi]);
            for (int j = 0; j < k; ++j) {
                const double v = static_cast<double>(w[static_cast<size_t>(tk * k + j)]) *
                                 eout[static_cast<size_t>((tk * k + j) * n_embd + i)];
                want += v;
                mag += std::fabs(v);
            }
            const double tol = (k + 8) * kU * mag + 1e-30;
            if (!(std::fabs(hidden[yi] - want) <= tol) && bad++ < 10)
                ADD_FAILURE() << "token " << tk << " elem " << i << ": gpu " << hidden[yi] << " want "
                              << want;
        }
    }
    EXPECT_EQ(bad, 0);
    // The same chain from a CUDA graph: the same bits.
    copy_to(d_hidden, hidden0);
    copy_to(d_ids, stale);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    chain();
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(from_device<int32_t>(d_ids.get(), static_cast<size_t>(nk)), ids);
    EXPECT_EQ(from_device<float>(d_hidden.get(), static_cast<size_t>(n_tok * n_embd)), hidden);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    for (cuda::GpuMatrix* gm : {&g_router, &g_gate_up, &g_down, &g_sh_gate_up, &g_sh_down})
        cuda::free_matrix(*gm);
    for (auto& [e, gm] : gu_e) cuda::free_matrix(gm);
    for (auto& [e, gm] : dn_e) cuda::free_matrix(gm);
}

TEST(CudaMoe, BlockChainPdlAndGraph) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K})
        for (int n_tok : {1, 3}) run_block(rng, t, n_tok);
}

}  // namespace
}  // namespace pelican
