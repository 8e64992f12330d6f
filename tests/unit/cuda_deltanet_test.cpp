// CUDA Gated DeltaNet ops (backend/cuda/deltanet.h) against the scalar references of
// ops/ops_qwen35.h, on fresh random inputs (PELICAN_TEST_SEED replays a failure):
//   conv1d_silu   vs ref::causal_conv1d_silu, state carried over a run of calls (n_tok 1, 3, 70, 2:
//                 several 16-token runs, and a call shorter than the history), kernel 4, 2 and 8,
//                 channels not a multiple of 32, strided input rows;
//   deltanet_step vs ref::l2norm + scale + ref::deltanet_gates + ref::gated_delta_rule_recurrent +
//                 ref::rms_norm_gated (split of conv_out as backend/cpu/hybrid_blocks.cpp does), state
//                 carried over launches of n_tok 1, 5, 130; value heads grouped and tiled, d 128 and
//                 64; a, b, z as columns of one wider row buffer, strided conv_out and out rows;
//   both in one captured CUDA graph (decode steps under PDL), bit-identical to direct launches.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every
// case and kernel instantiation still runs, with the 70-token conv call cut to 20 (still two token
// runs), the 130-token step launch cut to 24 and the extra 1000-channel conv case dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/device_buffer.h"
#include "cuda_test_util.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::Rng;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

DeviceBuffer upload(const std::vector<float>& v) {
    DeviceBuffer b(v.size() * sizeof(float) + 16);
    EXPECT_TRUE(b.ok());
    EXPECT_EQ(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    return b;
}
std::vector<float> download(const void* p, size_t n) {
    std::vector<float> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
}
bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
double silu_d(double x) { return x / (1.0 + std::exp(-x)); }

// ---- conv1d_silu --------------------------------------------------------------------------------

// GPU: acc = K fp32 FMAs (each rounding <= u * sum_j |w_j xx_j|), then silu(acc) = acc / (1 +
// expf(-acc)): expf within 2 ulp, an add and a divide, <= 4u relative; |silu'| <= 1.1. The
// reference sums in double and rounds once (u/2). So
//   |gpu - ref| <= 1.1 K u sum_j |w_j xx_j| + 4.5 u |y|;  checked against twice that.
// The state is a copy of inputs: bit-exact.
void check_conv(int kernel, int64_t n_ch, const std::vector<int>& calls) {
    SCOPED_TRACE("kernel " + std::to_string(kernel) + " n_ch " + std::to_string(n_ch));
    Rng rng;
    const int hist = kernel - 1;
    const int64_t x_stride = n_ch + 5;  // strided rows: columns >= n_ch are never read
    const std::vector<float> w = test::random_vec(rng, n_ch * kernel, 0.5f);
    std::vector<float> ref_state = test::random_vec(rng, hist * n_ch);  // a sequence in progress
    DeviceBuffer d_w = upload(w), d_state = upload(ref_state);
    double worst = 0.0;
    for (const int n : calls) {
        SCOPED_TRACE("n_tok " + std::to_string(n));
        const std::vector<float> xs = test::random_vec(rng, n * x_stride, 1.5f);
        std::vector<float> x(static_cast<size_t>(n * n_ch));
        for (int t = 0; t < n; ++t)
            std::copy(xs.begin() + t * x_stride, xs.begin() + t * x_stride + n_ch, x.begin() + t * n_ch);
        std::vector<double> mag(x.size(), 0.0);  // sum_j |w_j xx_j| per output
        for (int t = 0; t < n; ++t)
            for (int64_t c = 0; c < n_ch; ++c)
                for (int j = 0; j < kernel; ++j) {
                    const int r = t + j;
                    const float v = r < hist ? ref_state[r * n_ch + c] : x[(r - hist) * n_ch + c];
                    mag[t * n_ch + c] += std::fabs(double{w[c * kernel + j]} * v);
                }
        std::vector<float> want(x.size());
        ref::causal_conv1d_silu(x.data(), n, n_ch, kernel, w.data(), ref_state.data(), want.data());

        DeviceBuffer d_x = upload(xs), d_y(x.size() * sizeof(float));
        ASSERT_TRUE(d_y.ok());
        cuda::conv1d_silu(d_x.as<float>(), x_stride, n, n_ch, kernel, d_w.as<float>(), d_state.as<float>(),
                          d_y.as<float>(), nullptr);
        const std::vector<float> got = download(d_y.get(), x.size());
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double tol = 2.0 * (1.1 * kernel * kU * mag[i] + 4.5 * kU * std::fabs(want[i]));
            const double err = std::fabs(double{got[i]} - want[i]);
            worst = std::max(worst, err / tol);
            if (!(err <= tol) && bad++ < 10)
                ADD_FAILURE() << "token " << i / n_ch << " ch " << i % n_ch << ": gpu " << got[i] << " ref "
                              << want[i] << " tol " << tol;
        }
        EXPECT_EQ(bad, 0) << "mismatching outputs";
        const std::vector<float> st = download(d_state.get(), ref_state.size());
        bad = 0;
        for (size_t i = 0; i < st.size(); ++i)
            if (!same_bits(st[i], ref_state[i]) && bad++ < 10)
                ADD_FAILURE() << "state row " << i / n_ch << " ch " << i % n_ch << ": gpu " << st[i]
                              << " ref " << ref_state[i];
        EXPECT_EQ(bad, 0) << "mismatching state";
    }
    std::printf("conv1d_silu kernel %d n_ch %lld: max |err| / tol = %.3f (state bit-exact)\n", kernel,
                static_cast<long long>(n_ch), worst);
}

TEST(CudaDeltaNet, Conv1dSiluMatchesReference) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const std::vector<int> calls = {1, 3, test::cuda_test_size(70, 20), 2};
    for (const int kernel : {4, 2, 8}) check_conv(kernel, 200, calls);  // 2 channel blocks, 72 idle threads
    if (!test::cuda_test_small()) check_conv(4, 1000, {1, 33});
}

// ---- deltanet_step ------------------------------------------------------------------------------
//
// Tolerance. Per token, every state element S_ij takes two fp32 roundings of its own size
// (S exp(g), + k_i d_j) and the error of d_j, whose S^T k is a D-term fp32 dot product; o = S^T q is
// another. With the probabilistic rounding bound (Higham & Mary 2019: a D-term sum is within
// lambda sqrt(D) u of its magnitude, lambda a small constant, with overwhelming probability), each
// token adds independent errors of about lambda sqrt(D) u times the state's scale, and the update
// never amplifies earlier ones (decay <= 1; I - beta k k^T has norm <= 1 for |k| = 1, beta < 1), so
// after T tokens they add up like a random walk:
//   eps(T) = lambda sqrt(D) u (1 + sqrt(T)),  lambda = 8   (D 128: 1.1e-5 at T 1, 6.9e-5 at T 136)
//   state:  |S_gpu - S_ref| <= eps(T) (|S_ref| + rms(S_ref of the head))
// The output is o's gated RMSNorm: o_j = sum_i S_ij q_i carries at most eps(T) m_j from the state
// and as much again from its own dot product, m_j = sum_i (|S_ij| + rms(S)) |q_i|, so with
// r = rms(o), y_j = w_j silu(z_j) o_j / r and |delta r| <= rms(delta o):
//   out:    |y_gpu - y_ref| <= 2 eps(T) (|w_j silu(z_j)| m_j + |y_j| rms(m)) / r
// (An fp32 emulation of the kernel's summation order on the CPU stays below 0.12 of the state
// bound and 0.01 of the output bound over 30+ seeds; any indexing or formula slip is O(1).)

struct StepCase {
    int n_k_heads, n_v_heads, d;
    bool v_tiled;
    bool chunked = false;  // deltanet_chunked (the prompt form) instead of deltanet_step
};

double eps_tokens(int d, int tokens) {
    return 8.0 * std::sqrt(double(d)) * kU * (1.0 + std::sqrt(double(tokens)));
}

void check_step(const StepCase& c, const std::vector<int>& calls) {
    SCOPED_TRACE("n_k_heads " + std::to_string(c.n_k_heads) + " n_v_heads " + std::to_string(c.n_v_heads) +
                 " d " + std::to_string(c.d) + (c.v_tiled ? " tiled" : " grouped") +
                 (c.chunked ? " chunked" : " step"));
    Rng rng;
    const DeltaNetShape s{c.n_k_heads, c.n_v_heads, c.d, c.d, c.v_tiled};
    const int D = c.d, nv = s.n_v_heads, nk = s.n_k_heads;
    const int64_t kd = s.key_dim(), vd = s.value_dim(), cd = s.conv_dim();
    const float eps = 1e-6f;

    // Weights. A = exp(a_log) in [0.01, 2]; head 0 decays slowly (g ~ -0.01: a long memory, the
    // worst case for error accumulation).
    std::vector<float> a_log(static_cast<size_t>(nv)), dt_bias(static_cast<size_t>(nv));
    for (int h = 0; h < nv; ++h) {
        a_log[h] = std::log(rng.uniform(0.01f, 2.0f));
        dt_bias[h] = rng.uniform(-1.0f, 1.0f);
    }
    a_log[0] = -5.0f;
    const std::vector<float> norm_w = test::random_vec(rng, D);
    std::vector<float> ref_state = test::random_vec(rng, s.state_floats(), 0.5f);  // a sequence in progress

    // Row layouts: conv_out rows padded; a, b, z columns of one wider row (z at column 2, b after
    // it, a one column later: none 16-byte aligned); out rows padded (the padding must survive).
    const int64_t conv_stride = cd + 3;
    const int64_t z_col = 2, b_col = z_col + vd, a_col = b_col + nv + 1, abz_stride = a_col + nv + 3;
    const int64_t out_stride = vd + 7;

    DeviceBuffer d_alog = upload(a_log), d_dtb = upload(dt_bias), d_nw = upload(norm_w),
                 d_state = upload(ref_state);
    double worst_y = 0.0, worst_s = 0.0;
    int tokens = 0;
    for (const int n : calls) {
        SCOPED_TRACE("n_tok " + std::to_string(n) + " after " + std::to_string(tokens));
        tokens += n;
        const std::vector<float> conv = test::random_vec(rng, n * conv_stride);
        std::vector<float> abz = test::random_vec(rng, n * abz_stride);
        for (int t = 0; t < n; ++t)
            for (int h = 0; h < nv; ++h) abz[t * abz_stride + b_col + h] *= 2.0f;  // beta spread over (0, 1)

        // Reference, as backend/cpu/hybrid_blocks.cpp chains it (token by token to read off the
        // magnitudes of the bound; the recurrence stores its state in fp32 per token either way).
        std::vector<float> q(n * kd), k(n * kd), v(n * vd), a(n * nv), b(n * nv), z(n * vd);
        for (int t = 0; t < n; ++t) {
            const float* row = conv.data() + t * conv_stride;
            std::copy(row, row + kd, q.begin() + t * kd);
            std::copy(row + kd, row + 2 * kd, k.begin() + t * kd);
            std::copy(row + 2 * kd, row + cd, v.begin() + t * vd);
            const float* r2 = abz.data() + t * abz_stride;
            std::copy(r2 + a_col, r2 + a_col + nv, a.begin() + t * nv);
            std::copy(r2 + b_col, r2 + b_col + nv, b.begin() + t * nv);
            std::copy(r2 + z_col, r2 + z_col + vd, z.begin() + t * vd);
        }
        ref::l2norm(q.data(), n * nk, D);
        ref::l2norm(k.data(), n * nk, D);
        const float q_scale = 1.0f / std::sqrt(static_cast<float>(D));
        for (float& x : q) x *= q_scale;
        std::vector<float> g(n * nv), beta(n * nv), core(n * vd), want(n * vd);
        ref::deltanet_gates(a.data(), b.data(), a_log.data(), dt_bias.data(), n, nv, g.data(), beta.data());
        std::vector<double> m(n * vd), rms_m(n * nv), rms_o(n * nv);
        for (int t = 0; t < n; ++t) {
            ref::gated_delta_rule_recurrent(q.data() + t * kd, k.data() + t * kd, v.data() + t * vd,
                                            g.data() + t * nv, beta.data() + t * nv, 1, s, ref_state.data(),
                                            core.data() + t * vd);
            for (int h = 0; h < nv; ++h) {
                const float* S = ref_state.data() + int64_t{h} * D * D;
                const float* qh = q.data() + t * kd + int64_t{s.key_head(h)} * D;
                double ss = 0.0;
                for (int i = 0; i < D * D; ++i) ss += double{S[i]} * S[i];
                const double rms_s = std::sqrt(ss / (D * D));
                double sm = 0.0, so = 0.0;
                for (int j = 0; j < D; ++j) {
                    double mj = 0.0;
                    for (int i = 0; i < D; ++i) mj += (std::fabs(S[i * D + j]) + rms_s) * std::fabs(qh[i]);
                    m[t * vd + h * D + j] = mj;
                    sm += mj * mj;
                    const double o = core[t * vd + h * D + j];
                    so += o * o;
                }
                rms_m[t * nv + h] = std::sqrt(sm / D);
                rms_o[t * nv + h] = std::sqrt(so / D);
            }
        }
        ref::rms_norm_gated(core.data(), z.data(), norm_w.data(), want.data(), n * nv, D, eps);

        // GPU.
        DeviceBuffer d_conv = upload(conv), d_abz = upload(abz), d_out(n * out_stride * sizeof(float));
        ASSERT_TRUE(d_out.ok());
        PELICAN_CUDA_CHECK(cudaMemset(d_out.get(), 0x7f, d_out.size()));  // every float 0x7f7f7f7f
        cuda::DeltaNetStepArgs args;
        args.n_tok = n;
        args.n_k_heads = nk;
        args.n_v_heads = nv;
        args.d_k = args.d_v = D;
        args.v_tiled = c.v_tiled;
        args.conv_out = d_conv.as<float>();
        args.conv_stride = conv_stride;
        args.a = d_abz.as<float>() + a_col;
        args.a_stride = abz_stride;
        args.b = d_abz.as<float>() + b_col;
        args.b_stride = abz_stride;
        args.z = d_abz.as<float>() + z_col;
        args.z_stride = abz_stride;
        args.a_log = d_alog.as<float>();
        args.dt_bias = d_dtb.as<float>();
        args.norm_w = d_nw.as<float>();
        args.eps = eps;
        args.state = d_state.as<float>();
        args.out = d_out.as<float>();
        args.out_stride = out_stride;
        if (c.chunked) {
            DeviceBuffer scratch(cuda::deltanet_chunk_scratch_bytes(n, nv, D));
            ASSERT_TRUE(scratch.ok());
            PELICAN_CUDA_CHECK(cudaMemset(scratch.get(), 0x7f, scratch.size()));  // no zeroed scratch
            cuda::deltanet_chunked(args, scratch.get(), nullptr);
        } else {
            cuda::deltanet_step(args, nullptr);
        }
        const std::vector<float> out = download(d_out.get(), static_cast<size_t>(n * out_stride));
        const std::vector<float> st = download(d_state.get(), ref_state.size());

        const double e = eps_tokens(D, tokens);
        int bad = 0;
        for (int t = 0; t < n; ++t) {
            for (int h = 0; h < nv; ++h)
                for (int j = 0; j < D; ++j) {
                    const int64_t i = t * vd + h * D + j;
                    const double gate = std::fabs(norm_w[j] * silu_d(z[i]));
                    const double tol =
                        2.0 * e * (gate * m[i] + std::fabs(want[i]) * rms_m[t * nv + h]) / rms_o[t * nv + h];
                    const double err = std::fabs(double{out[t * out_stride + h * D + j]} - want[i]);
                    worst_y = std::max(worst_y, err / tol);
                    if (!(err <= tol) && bad++ < 10)
                        ADD_FAILURE()
                            << "out token " << t << " head " << h << " j " << j << ": gpu "
                            << out[t * out_stride + h * D + j] << " ref " << want[i] << " tol " << tol;
                }
            for (int64_t p = vd; p < out_stride; ++p)
                if (!same_bits(out[t * out_stride + p], from_bits(0x7f7f7f7fu)) && bad++ < 10)
                    ADD_FAILURE() << "out row " << t << " padding column " << p << " written";
        }
        EXPECT_EQ(bad, 0) << "mismatching outputs";
        bad = 0;
        for (int h = 0; h < nv; ++h) {
            const float* S = ref_state.data() + int64_t{h} * D * D;
            double ss = 0.0;
            for (int i = 0; i < D * D; ++i) ss += double{S[i]} * S[i];
            const double rms_s = std::sqrt(ss / (D * D));
            for (int i = 0; i < D * D; ++i) {
                const double tol = e * (std::fabs(S[i]) + rms_s);
                const double err = std::fabs(double{st[int64_t{h} * D * D + i]} - S[i]);
                worst_s = std::max(worst_s, err / tol);
                if (!(err <= tol) && bad++ < 10)
                    ADD_FAILURE() << "state head " << h << " (" << i / D << ", " << i % D << "): gpu "
                                  << st[int64_t{h} * D * D + i] << " ref " << S[i] << " tol " << tol;
            }
        }
        EXPECT_EQ(bad, 0) << "mismatching state";
    }
    std::printf(
        "%s n_k %d n_v %d d %d %s, %d tokens: max |err| / tol: out %.4f, state %.4f "
        "(eps(T) %.2e)\n",
        c.chunked ? "deltanet_chunked" : "deltanet_step", nk, nv, D, c.v_tiled ? "tiled" : "grouped", tokens,
        worst_y, worst_s, eps_tokens(D, tokens));
}

std::vector<int> step_calls() { return {1, 5, test::cuda_test_size(130, 24)}; }

TEST(CudaDeltaNet, StepGroupedHeads128) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({2, 4, 128, false}, step_calls());
}

TEST(CudaDeltaNet, StepTiledHeads128) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({2, 4, 128, true}, step_calls());
}

TEST(CudaDeltaNet, StepHeads64) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({1, 2, 64, false}, step_calls());
}

// Small heads (the golden fixtures' d = 16; d = 32): extra threads hold q / k, own no state.
TEST(CudaDeltaNet, StepSmallHeads) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({2, 4, 16, false}, step_calls());
    check_step({2, 4, 16, true}, step_calls());
    check_step({1, 3, 32, false}, step_calls());
}

// The chunked form (chunks of 64): the calls cross chunk boundaries (130 = 64 + 64 + 2, 200) and
// start from a state left by the earlier calls; same bounds as the step.
std::vector<int> chunk_calls() {
    return {1, 63, test::cuda_test_size(130, 70), test::cuda_test_size(200, 24)};
}

TEST(CudaDeltaNet, ChunkedGroupedHeads128) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({2, 4, 128, false, true}, chunk_calls());
}

TEST(CudaDeltaNet, ChunkedTiledHeads128) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({2, 4, 128, true, true}, chunk_calls());
}

TEST(CudaDeltaNet, ChunkedHeads64And32And16) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_step({1, 2, 64, false, true}, chunk_calls());
    check_step({1, 3, 32, false, true}, chunk_calls());
    check_step({2, 4, 16, true, true}, chunk_calls());
}

// ---- graph capture ------------------------------------------------------------------------------

// Three decode steps (conv1d_silu then deltanet_step, n_tok 1, PDL between them) captured once on
// a non-blocking stream and replayed with fresh inputs must equal direct launches bit for bit.
TEST(CudaDeltaNet, DecodeStepsInCapturedGraph) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const DeltaNetShape s{2, 4, 128, 128, false};
    const int kernel = 4, nv = s.n_v_heads;
    const int64_t cd = s.conv_dim(), vd = s.value_dim();
    const int64_t abz_stride = vd + 2 * nv;  // [z | b | a]
    std::vector<float> a_log(static_cast<size_t>(nv)), dt_bias(static_cast<size_t>(nv));
    for (int h = 0; h < nv; ++h) {
        a_log[h] = std::log(rng.uniform(0.01f, 2.0f));
        dt_bias[h] = rng.uniform(-1.0f, 1.0f);
    }
    const std::vector<float> conv_w = test::random_vec(rng, cd * kernel, 0.5f),
                             norm_w = test::random_vec(rng, 128);
    const std::vector<float> conv_state = test::random_vec(rng, (kernel - 1) * cd),
                             ssm_state = test::random_vec(rng, s.state_floats(), 0.5f);
    DeviceBuffer d_alog = upload(a_log), d_dtb = upload(dt_bias), d_cw = upload(conv_w),
                 d_nw = upload(norm_w);

    // Two independent copies of the per-sequence buffers: [0] graph, [1] direct launches.
    struct Seq {
        DeviceBuffer x, abz, conv_state, conv_out, ssm_state, out;
    } seq[2];
    for (Seq& q : seq) {
        q.x = DeviceBuffer(cd * sizeof(float));
        q.abz = DeviceBuffer(abz_stride * sizeof(float));
        q.conv_state = upload(conv_state);
        q.conv_out = DeviceBuffer(cd * sizeof(float));
        q.ssm_state = upload(ssm_state);
        q.out = DeviceBuffer(vd * sizeof(float));
        ASSERT_TRUE(q.x.ok() && q.abz.ok() && q.conv_out.ok() && q.out.ok());
    }
    const auto step = [&](Seq& q, cudaStream_t stream) {
        cuda::conv1d_silu(q.x.as<float>(), cd, 1, cd, kernel, d_cw.as<float>(), q.conv_state.as<float>(),
                          q.conv_out.as<float>(), stream);
        cuda::DeltaNetStepArgs args;
        args.n_tok = 1;
        args.n_k_heads = s.n_k_heads;
        args.n_v_heads = nv;
        args.d_k = args.d_v = 128;
        args.conv_out = q.conv_out.as<float>();
        args.z = q.abz.as<float>();
        args.b = q.abz.as<float>() + vd;
        args.a = q.abz.as<float>() + vd + nv;
        args.a_stride = args.b_stride = args.z_stride = abz_stride;
        args.a_log = d_alog.as<float>();
        args.dt_bias = d_dtb.as<float>();
        args.norm_w = d_nw.as<float>();
        args.state = q.ssm_state.as<float>();
        args.out = q.out.as<float>();
        cuda::deltanet_step(args, stream);
    };

    cudaStream_t stream;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    step(seq[0], stream);
    PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    for (int it = 0; it < 3; ++it) {
        SCOPED_TRACE("step " + std::to_string(it));
        const std::vector<float> x = test::random_vec(rng, cd), abz = test::random_vec(rng, abz_stride);
        for (Seq& q : seq) {
            PELICAN_CUDA_CHECK(
                cudaMemcpyAsync(q.x.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream));
            PELICAN_CUDA_CHECK(
                cudaMemcpyAsync(q.abz.get(), abz.data(), abz.size() * 4, cudaMemcpyHostToDevice, stream));
            PELICAN_CUDA_CHECK(cudaMemsetAsync(q.out.get(), 0xff, q.out.size(), stream));
        }
        PELICAN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        step(seq[1], stream);
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto same = [&](const DeviceBuffer& g, const DeviceBuffer& d, size_t n, const char* what) {
            const std::vector<float> vg = download(g.get(), n), vd2 = download(d.get(), n);
            EXPECT_EQ(std::memcmp(vg.data(), vd2.data(), n * 4), 0)
                << what << " differs between graph and direct";
        };
        same(seq[0].out, seq[1].out, static_cast<size_t>(vd), "out");
        same(seq[0].ssm_state, seq[1].ssm_state, static_cast<size_t>(s.state_floats()), "ssm state");
        same(seq[0].conv_state, seq[1].conv_state, static_cast<size_t>((kernel - 1) * cd), "conv state");
        const std::vector<float> out = download(seq[0].out.get(), static_cast<size_t>(vd));
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float y) { return std::isfinite(y); }));
    }
    PELICAN_CUDA_CHECK(cudaGraphExecDestroy(exec));
    PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
    PELICAN_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace pelican
