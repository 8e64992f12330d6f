// The DeltaNet kernels over the rows of many sequences (backend/cuda/deltanet.h: conv1d_silu_runs and
// deltanet_step's runs mode, as the CUDA executor launches them) against the one-sequence kernels run
// token by token on each sequence alone: conv outputs, DeltaNet outputs and every state entry written
// (the state after each kept token) bit-identical, input entries untouched, skipped runs untouched.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/deltanet.h"
#include "backend/cuda/device_buffer.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::from_device;
using test::to_device;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
    int nk, nv, d, kernel;
    bool tiled;
};

void check_runs(const Shape& sh) {
    SCOPED_TRACE("d " + std::to_string(sh.d) + " nv " + std::to_string(sh.nv));
    test::Rng rng;
    const int64_t kd = int64_t{sh.nk} * sh.d, vd = int64_t{sh.nv} * sh.d, cd = 2 * kd + vd;
    const int64_t w_in = cd + vd + 2 * sh.nv;  // [Q|K|V | z | b | a] rows, as the executor's projection
    const int64_t conv_f = int64_t{sh.kernel - 1} * cd, ssm_f = int64_t{sh.nv} * sh.d * sh.d;
    const int64_t entry_f = conv_f + ssm_f + 7;  // entries padded apart
    // Runs of 1, 3, 5 and 2 rows; run 3 is skipped (run_state_in -1). Run 2 keeps its last two states.
    const std::vector<int32_t> row0 = {0, 1, 4, 9, 11};
    const int n_runs = 4, rows = 11;
    const std::vector<int32_t> state_in = {0, 1, 2, -1}, conv_in = {0, 1, 2, 3};
    const std::vector<int32_t> state_out = {4, 5, 6, 7, -1, -1, -1, 8, 9, -1, 10};
    std::vector<int32_t> row_run(rows);
    for (int r = 0; r < n_runs; ++r)
        for (int i = row0[r]; i < row0[r + 1]; ++i) row_run[static_cast<size_t>(i)] = r;
    const int n_entries = 11;
    std::vector<float> entries = test::random_vec(rng, n_entries * entry_f, 0.3f);
    const std::vector<float> x = test::random_vec(rng, rows * w_in, 1.0f);
    const std::vector<float> conv_w = test::random_vec(rng, cd * sh.kernel, 0.5f);
    const std::vector<float> a_log = test::random_vec(rng, sh.nv, 0.5f),
                             dt = test::random_vec(rng, sh.nv, 0.5f);
    const std::vector<float> norm_w = test::random_vec(rng, sh.d, 1.0f);

    DeviceBuffer d_x = to_device(x), d_cw = to_device(conv_w), d_alog = to_device(a_log),
                 d_dt = to_device(dt), d_nw = to_device(norm_w), d_ent = to_device(entries),
                 d_row_run = to_device(row_run), d_row0 = to_device(row0), d_sin = to_device(state_in),
                 d_cin = to_device(conv_in), d_sout = to_device(state_out);
    DeviceBuffer d_y(rows * cd * 4), d_out(rows * vd * 4);
    ASSERT_EQ(cudaMemset(d_out.get(), 0, rows * vd * 4), cudaSuccess);
    const auto args = [&](const float* xin, const float* conv_out, float* out, int n_tok) {
        cuda::DeltaNetStepArgs d;
        d.n_tok = n_tok;
        d.n_k_heads = sh.nk;
        d.n_v_heads = sh.nv;
        d.d_k = d.d_v = sh.d;
        d.v_tiled = sh.tiled;
        d.conv_out = conv_out;
        d.conv_stride = cd;
        d.z = xin + cd;
        d.z_stride = w_in;
        d.b = xin + cd + vd;
        d.b_stride = w_in;
        d.a = xin + cd + vd + sh.nv;
        d.a_stride = w_in;
        d.a_log = d_alog.as<float>();
        d.dt_bias = d_dt.as<float>();
        d.norm_w = d_nw.as<float>();
        d.out = out;
        d.out_stride = vd;
        return d;
    };
    float* ent = d_ent.as<float>();
    cuda::ConvRunsArgs c;
    c.x = d_x.as<float>();
    c.x_stride = w_in;
    c.n_rows = rows;
    c.n_ch = cd;
    c.kernel = sh.kernel;
    c.w = d_cw.as<float>();
    c.row_run = d_row_run.as<int32_t>();
    c.run_row0 = d_row0.as<int32_t>();
    c.run_state_in = d_cin.as<int32_t>();
    c.row_state_out = d_sout.as<int32_t>();
    c.state = ent;
    c.state_stride = entry_f;
    c.y = d_y.as<float>();
    cuda::conv1d_silu_runs(c, nullptr);
    cuda::DeltaNetStepArgs r = args(d_x.as<float>(), d_y.as<float>(), d_out.as<float>(), rows);
    r.state = ent + conv_f;
    r.state_stride = entry_f;
    r.run_row0 = d_row0.as<int32_t>();
    r.run_state_in = d_sin.as<int32_t>();
    r.row_state_out = d_sout.as<int32_t>();
    r.n_runs = n_runs;
    cuda::deltanet_step(r, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got_y = from_device<float>(d_y, static_cast<size_t>(rows * cd));
    const auto got_out = from_device<float>(d_out, static_cast<size_t>(rows * vd));
    const auto got_ent = from_device<float>(d_ent, entries.size());

    // Each run alone, token by token, with its own copies of the states.
    DeviceBuffer d_conv(conv_f * 4), d_ssm(ssm_f * 4), d_y1(cd * 4), d_o1(vd * 4);
    const auto entry = [&](const std::vector<float>& e, int i, int64_t off, int64_t n) {
        return std::vector<float>(e.begin() + i * entry_f + off, e.begin() + i * entry_f + off + n);
    };
    for (int run = 0; run < n_runs; ++run) {
        SCOPED_TRACE("run " + std::to_string(run));
        const int in = conv_in[static_cast<size_t>(run)];
        ASSERT_EQ(cudaMemcpy(d_conv.get(), entries.data() + in * entry_f, conv_f * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(d_ssm.get(), entries.data() + in * entry_f + conv_f, ssm_f * 4,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        for (int row = row0[static_cast<size_t>(run)]; row < row0[static_cast<size_t>(run) + 1]; ++row) {
            const float* xr = d_x.as<float>() + row * w_in;
            cuda::conv1d_silu(xr, w_in, 1, cd, sh.kernel, d_cw.as<float>(), d_conv.as<float>(),
                              d_y1.as<float>(), nullptr);
            EXPECT_TRUE(
                same_bits(from_device<float>(d_y1, static_cast<size_t>(cd)),
                          std::vector<float>(got_y.begin() + row * cd, got_y.begin() + (row + 1) * cd)))
                << "conv output of row " << row;
            const int e = state_out[static_cast<size_t>(row)];
            if (e >= 0) {
                EXPECT_TRUE(same_bits(from_device<float>(d_conv, static_cast<size_t>(conv_f)),
                                      entry(got_ent, e, 0, conv_f)))
                    << "conv state after row " << row;
            }
            if (state_in[static_cast<size_t>(run)] < 0) continue;  // skipped by the DeltaNet launch
            cuda::DeltaNetStepArgs one = args(xr, d_y1.as<float>(), d_o1.as<float>(), 1);
            one.state = d_ssm.as<float>();
            cuda::deltanet_step(one, nullptr);
            EXPECT_TRUE(
                same_bits(from_device<float>(d_o1, static_cast<size_t>(vd)),
                          std::vector<float>(got_out.begin() + row * vd, got_out.begin() + (row + 1) * vd)))
                << "DeltaNet output of row " << row;
            if (e >= 0) {
                EXPECT_TRUE(same_bits(from_device<float>(d_ssm, static_cast<size_t>(ssm_f)),
                                      entry(got_ent, e, conv_f, ssm_f)))
                    << "state after row " << row;
            }
        }
    }
    // The input entries and the skipped run's rows are as they were.
    for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(same_bits(entry(got_ent, i, 0, entry_f), entry(entries, i, 0, entry_f))) << "entry " << i;
    for (int64_t i = row0[3] * vd; i < rows * vd; ++i) ASSERT_EQ(got_out[static_cast<size_t>(i)], 0.0f);
    // The ssm part of the skipped run's output entry (10) was not written by the DeltaNet launch.
    EXPECT_TRUE(same_bits(entry(got_ent, 10, conv_f, ssm_f), entry(entries, 10, conv_f, ssm_f)));
}

TEST(CudaDeltaNetRuns, ManySequencesMatchEachAloneBitForBit) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    check_runs({2, 4, 32, 4, false});
    check_runs({2, 4, 32, 4, true});
    check_runs({4, 8, 128, 4, true});
    check_runs({2, 2, 16, 3, false});
}

}  // namespace
}  // namespace pelican
