// deltanet_step for heads of width 128 over four CTAs per value head (deltanet.h): the one-CTA
// kernel (deltanet.cu) keeps a head's 64 KiB state on one SM, so a decode step used only n_v_heads
// SMs (32 of 132 for Qwen3.5-35B-A3B) to stream the whole state in and out. Here a cluster of four
// CTAs shares a head: CTA rank cb owns state columns [32 cb, 32 cb + 32) (value dims); thread
// (grp, jl) holds rows [32 grp, 32 grp + 32) of column 32 cb + jl in registers (128 threads). q and
// k (128 each: one element per thread) are L2-normed in every CTA; the gated RMSNorm over the head's
// 128 outputs adds the four CTAs' sums of squares through distributed shared memory (one cluster
// barrier per token). Every sum is formed in the one-CTA kernel's order (same row groups, same
// 4-accumulator loops, same warp trees, the CTAs' partials added in rank order = its warp order), so
// the results are bit-identical to it (CudaDeltaNet.SplitMatchesOneCtaBits).
//
// PDL (pdl.cuh): weights and the state (written two or more launches back) are read before
// pdl_wait(); the trigger follows the wait. sm_90 (clusters); off by default (PELICAN_DN_SPLIT=1
// selects it: no decode gain measured).
#include <atomic>

#include <cooperative_groups.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/deltanet_impl.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/env.h"

namespace pelican::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kD = 128;             // head width (d_k = d_v)
constexpr int kCB = 32;             // state columns per CTA
constexpr int kNB = kD / kCB;       // CTAs per head (the cluster)
constexpr int kG = kD / 32;         // row groups per column
constexpr int kRPT = kD / kG;       // state rows per thread
constexpr int kThreads = kCB * kG;  // 128 = kD: one q and one k element per thread
constexpr int kWarps = kThreads / 32;
static_assert(kThreads == kD && kRPT % 4 == 0, "the layout assumes 128 threads for a 128-wide head");

__global__ void __cluster_dims__(kNB, 1, 1) __launch_bounds__(kThreads)
    deltanet_split_kernel(const DeltaNetStepArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(16) float q_s[kD];  // this token's q (L2-normed, times 1/sqrt(D))
    __shared__ __align__(16) float k_s[kD];  // this token's k (L2-normed)
    __shared__ float red_u[kG][kCB];         // partial S^T k per row group
    __shared__ float red_o[kG][kCB];         // partial S^T q per row group
    __shared__ float red_qk[2][kWarps];      // per-warp sums of squares of q, k
    __shared__ float red_n[2];               // this CTA's sum of o^2, by token parity (read by the cluster)
    cg::cluster_group cluster = cg::this_cluster();
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int cb = static_cast<int>(cluster.block_rank());
    const int h = static_cast<int>(blockIdx.x) / kNB;
    const int jl = tid % kCB, grp = tid / kCB;
    const int j = cb * kCB + jl;  // state column = value dim = output element
    const int kh = p.v_tiled ? h % p.n_k_heads : h / (p.n_v_heads / p.n_k_heads);
    const int64_t key_dim = int64_t{p.n_k_heads} * kD, value_dim = int64_t{p.n_v_heads} * kD;
    const int64_t conv_stride = p.conv_stride ? p.conv_stride : 2 * key_dim + value_dim;
    const int64_t a_stride = p.a_stride ? p.a_stride : p.n_v_heads;
    const int64_t b_stride = p.b_stride ? p.b_stride : p.n_v_heads;
    const int64_t z_stride = p.z_stride ? p.z_stride : value_dim;
    const int64_t out_stride = p.out_stride ? p.out_stride : value_dim;
    const int64_t q_col = int64_t{kh} * kD + tid, k_col = key_dim + int64_t{kh} * kD + tid;
    const int64_t v_col = 2 * key_dim + int64_t{h} * kD + j;
    const int64_t hj = int64_t{h} * kD + j;

    // Weights, and the state (pdl.cuh: written two or more launches back), before the wait.
    const float neg_a = -expf(p.a_log[h]);
    const float dt_bias = p.dt_bias[h];
    const float norm_w = p.norm_w[j];
    const float q_scale = 1.0f / sqrtf(static_cast<float>(kD));
    float* s_col = p.state + int64_t{h} * kD * kD + int64_t{grp} * kRPT * kD + j;  // S[h][kRPT grp][j]
    float S[kRPT];
#pragma unroll
    for (int i = 0; i < kRPT; ++i) S[i] = __ldcg(s_col + int64_t{i} * kD);
    pdl_wait();  // conv_out, a, b, z come from the kernels just before; out is read by later ones
    pdl_trigger();

    float n_q = 0.0f, n_k = 0.0f, n_v = 0.0f, n_z = 0.0f, n_a = 0.0f, n_b = 0.0f;
    const auto load = [&](int t) {
        const float* row = p.conv_out + t * conv_stride;
        n_q = row[q_col];
        n_k = row[k_col];
        n_v = row[v_col];
        n_z = grp == 0 ? p.z[t * z_stride + hj] : 0.0f;
        n_a = p.a[t * a_stride + h];
        n_b = p.b[t * b_stride + h];
    };
    load(0);

    for (int t = 0; t < p.n_tok; ++t) {
        const float x_q = n_q, x_k = n_k, x_v = n_v, x_z = n_z, x_a = n_a, x_b = n_b;
        if (t + 1 < p.n_tok) load(t + 1);
        const float beta = dn::gate_beta(x_b);
        const float g = dn::gate_g(x_a, neg_a, dt_bias);
        const float decay = expf(g);

        // L2 norms of q and k (per-warp trees, then the warps in order: the one-CTA kernel's sums).
        const float sq = dn::warp_sum(x_q * x_q), sk = dn::warp_sum(x_k * x_k);
        if (lane == 0) {
            red_qk[0][warp] = sq;
            red_qk[1][warp] = sk;
        }
        __syncthreads();  // B1
        float tq = 0.0f, tk = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            tq += red_qk[0][w];
            tk += red_qk[1][w];
        }
        q_s[tid] = x_q * dn::l2_inv(tq) * q_scale;
        k_s[tid] = x_k * dn::l2_inv(tk);
        __syncthreads();  // B2

        // Pass 1: partial (S_old^T k)_j over this thread's rows.
        const float* kr = k_s + grp * kRPT;
        const float* qr = q_s + grp * kRPT;
        red_u[grp][jl] = dn::partial_stk<kRPT>(S, kr);
        __syncthreads();  // B3
        float su = 0.0f;
#pragma unroll
        for (int r = 0; r < kG; ++r) su += red_u[r][jl];
        const float delta = beta * (x_v - decay * su);

        // Pass 2: S <- S decay + k d^T; partial o_j = (S_new^T q)_j.
        red_o[grp][jl] = dn::update_partial_o<kRPT>(S, kr, qr, delta, decay);
        __syncthreads();  // B4

        // Gated RMSNorm over the head's 128 outputs: warp 0 (row group 0) holds this CTA's 32.
        float o = 0.0f;
        if (grp == 0) {
#pragma unroll
            for (int r = 0; r < kG; ++r) o += red_o[r][jl];
            const float oo = dn::warp_sum(o * o);
            if (lane == 0) red_n[t & 1] = oo;
        }
        // Every CTA's red_n[t & 1] is written (a CTA barrier too). The other parity is rewritten only at
        // token t + 1, after this barrier, and read again only after the next one: no second barrier.
        cluster.sync();
        if (grp == 0) {
            float tot = 0.0f;
#pragma unroll
            for (int r = 0; r < kNB; ++r) tot += *cluster.map_shared_rank(&red_n[t & 1], r);
            p.out[t * out_stride + hj] = dn::gated_out(norm_w, o, tot, kD, p.eps, x_z);
        }
    }
#pragma unroll
    for (int i = 0; i < kRPT; ++i) s_col[int64_t{i} * kD] = S[i];
    cluster.sync();  // no CTA leaves while another may still read its red_n
#else
    __trap();
#endif
}

std::atomic<int> g_split_mode{-1};  // deltanet_set_split: -1 the environment, 0 off, 1 on

bool split_enabled() {
    const int m = g_split_mode.load(std::memory_order_relaxed);
    if (m >= 0) return m == 1;
    // Off by default: on the H200 it gave no gain in the 35B decode step (519.2 tok/s without it,
    // 514.9 with it; docs/performance.md, session 7): the step is bound by its latency, not by the
    // state's bandwidth.
    static const bool on = env_switch_set("PELICAN_DN_SPLIT");
    return on;
}

}  // namespace

void deltanet_set_split(int mode) { g_split_mode.store(mode < 0 ? -1 : mode > 0 ? 1 : 0); }

bool deltanet_step_split(const DeltaNetStepArgs& a, cudaStream_t stream) {
    if (!split_enabled() || a.d_k != kD || a.d_v != kD || a.n_tok <= 0 || a.conv_in != nullptr) return false;
    if (int64_t{a.n_v_heads} * kNB > 0x7fffffff || current_device_cc_major() < 9 /* clusters */) return false;
    launch_pdl(deltanet_split_kernel, dim3(static_cast<unsigned>(a.n_v_heads * kNB)), dim3(kThreads), 0,
               stream, a);
    return true;
}

}  // namespace pelican::cuda
