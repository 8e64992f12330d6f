// deltanet_step with the causal conv folded in (DeltaNetStepArgs::conv_in, backend/cuda/deltanet.h)
// against the two kernels it replaces, conv1d_silu then deltanet_step, on fresh random inputs
// (PELICAN_TEST_SEED replays a failure): out, the recurrent state S and the conv state bit for bit,
// carried over launches of 1, 3 and 1 tokens, for 1, 2 and 4 value heads per key head (the latter two
// as clusters), value heads grouped and tiled, head widths 128, 64, 32 and 16, strided input rows; and
// deltanet_conv_fold_supported's rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/deltanet.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_info.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::from_device;
using test::Rng;
using test::to_device;

constexpr int kKernel = 4;

struct FoldCase {
    int n_k_heads, n_v_heads, d;
    bool tiled;
};

void check_fold(Rng& rng, const FoldCase& c) {
    const DeltaNetShape s{c.n_k_heads, c.n_v_heads, c.d, c.d, c.tiled};
    SCOPED_TRACE("k heads " + std::to_string(c.n_k_heads) + " v heads " + std::to_string(c.n_v_heads) +
                 " d " + std::to_string(c.d) + (c.tiled ? " tiled" : " grouped"));
    ASSERT_TRUE(cuda::deltanet_conv_fold_supported(kKernel, s.n_k_heads, s.n_v_heads, c.d));
    const int nv = s.n_v_heads;
    const int64_t cd = s.conv_dim(), vd = s.value_dim();
    const int64_t in_stride = cd + 7;            // the conv input as columns of a wider row
    const int64_t abz_stride = vd + 2 * nv + 3;  // [z | b | a | pad]
    std::vector<float> a_log(static_cast<size_t>(nv)), dt_bias(static_cast<size_t>(nv));
    for (int h = 0; h < nv; ++h) {
        a_log[static_cast<size_t>(h)] = std::log(rng.uniform(0.01f, 2.0f));
        dt_bias[static_cast<size_t>(h)] = rng.uniform(-1.0f, 1.0f);
    }
    const std::vector<float> conv_w = test::random_vec(rng, cd * kKernel, 0.5f),
                             norm_w = test::random_vec(rng, c.d),
                             conv_state0 = test::random_vec(rng, (kKernel - 1) * cd),
                             state0 = test::random_vec(rng, s.state_floats(), 0.5f);
    DeviceBuffer d_alog = to_device(a_log), d_dtb = to_device(dt_bias), d_cw = to_device(conv_w),
                 d_nw = to_device(norm_w);
    // [0] conv1d_silu + deltanet_step, [1] the folded kernel.
    DeviceBuffer cst[2] = {to_device(conv_state0), to_device(conv_state0)};
    DeviceBuffer st[2] = {to_device(state0), to_device(state0)};
    for (const int n : {1, 3, 1}) {
        SCOPED_TRACE("n_tok " + std::to_string(n));
        const std::vector<float> x = test::random_vec(rng, n * in_stride),
                                 abz = test::random_vec(rng, n * abz_stride);
        DeviceBuffer d_x = to_device(x), d_abz = to_device(abz), d_conv(static_cast<size_t>(n * cd) * 4);
        DeviceBuffer out[2] = {to_device(std::vector<float>(static_cast<size_t>(n * vd), NAN)),
                               to_device(std::vector<float>(static_cast<size_t>(n * vd), NAN))};
        for (int mode = 0; mode < 2; ++mode) {
            cuda::DeltaNetStepArgs args;
            args.n_tok = n;
            args.n_k_heads = s.n_k_heads;
            args.n_v_heads = nv;
            args.d_k = args.d_v = c.d;
            args.v_tiled = c.tiled;
            args.z = d_abz.as<float>();
            args.b = d_abz.as<float>() + vd;
            args.a = d_abz.as<float>() + vd + nv;
            args.a_stride = args.b_stride = args.z_stride = abz_stride;
            args.a_log = d_alog.as<float>();
            args.dt_bias = d_dtb.as<float>();
            args.norm_w = d_nw.as<float>();
            args.state = st[mode].as<float>();
            args.out = out[mode].as<float>();
            if (mode == 0) {
                cuda::conv1d_silu(d_x.as<float>(), in_stride, n, cd, kKernel, d_cw.as<float>(),
                                  cst[0].as<float>(), d_conv.as<float>(), nullptr);
                args.conv_out = d_conv.as<float>();
                args.conv_stride = cd;
            } else {
                args.conv_in = d_x.as<float>();
                args.conv_in_stride = in_stride;
                args.conv_w = d_cw.as<float>();
                args.conv_state = cst[1].as<float>();
                args.conv_kernel = kKernel;
            }
            cuda::deltanet_step(args, nullptr);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        }
        const auto same = [&](const DeviceBuffer& p, const DeviceBuffer& q, int64_t count, const char* what) {
            const std::vector<float> a = from_device<float>(p.get(), static_cast<size_t>(count)),
                                     b = from_device<float>(q.get(), static_cast<size_t>(count));
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < a.size(); ++i)
                if (std::memcmp(&a[i], &b[i], 4) != 0 && bad++ == 0) first = i;
            EXPECT_EQ(bad, 0u) << what << ": " << bad << " values differ, first at " << first
                               << " (two kernels " << a[first] << ", folded " << b[first] << ")";
            return b;
        };
        const std::vector<float> o = same(out[0], out[1], n * vd, "out");
        same(st[0], st[1], s.state_floats(), "recurrent state");
        same(cst[0], cst[1], (kKernel - 1) * cd, "conv state");
        for (float y : o) ASSERT_TRUE(std::isfinite(y));
    }
}

TEST(CudaDeltaNetFold, MatchesConvThenStepBits) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    std::vector<FoldCase> cases = {{2, 2, 128, false}, {3, 3, 16, true}};
    if (cuda::current_device_cc_major() >= 9) {  // clusters: several value heads per key head
        cases.push_back({2, 4, 128, false});
        cases.push_back({2, 4, 128, true});
        cases.push_back({2, 8, 128, true});
        cases.push_back({1, 4, 64, false});
        cases.push_back({2, 4, 32, true});
        cases.push_back({1, 2, 16, false});
    }
    for (const FoldCase& c : cases) check_fold(rng, c);
}

TEST(CudaDeltaNetFold, SupportedShapes) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const bool clusters = cuda::current_device_cc_major() >= 9;
    EXPECT_TRUE(cuda::deltanet_conv_fold_supported(4, 16, 16, 128));
    EXPECT_EQ(cuda::deltanet_conv_fold_supported(4, 16, 32, 128), clusters);  // Qwen3.5-35B-A3B
    EXPECT_EQ(cuda::deltanet_conv_fold_supported(4, 16, 64, 128), clusters);  // Qwen3.5-122B-A10B
    EXPECT_FALSE(cuda::deltanet_conv_fold_supported(4, 1, 16, 128)) << "16 value heads per key head";
    EXPECT_FALSE(cuda::deltanet_conv_fold_supported(3, 16, 16, 128)) << "conv width 3";
    EXPECT_FALSE(cuda::deltanet_conv_fold_supported(4, 16, 16, 96)) << "head width 96";
    EXPECT_FALSE(cuda::deltanet_conv_fold_supported(4, 16, 24, 128)) << "not a multiple";
}

}  // namespace
}  // namespace pelican
