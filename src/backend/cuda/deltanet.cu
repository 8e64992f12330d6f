// Gated DeltaNet kernels (see deltanet.h): the causal depthwise conv + SiLU, and the fused
// recurrent step (L2 norms, gates, gated delta rule, gated RMSNorm). fp32 arithmetic throughout
// (the references sum in double; the tests' tolerances cover the difference). This file must not
// be built with --use_fast_math (expf / log1pf / sqrtf are the accurate versions).
//
// PDL (pdl.cuh): the conv reads only weights before pdl_wait() and triggers its dependents right after
// the wait; the step reads its weights and the state (written two or more launches back) before it.
#include <cstdio>
#include <cstdlib>

#include <cooperative_groups.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/deltanet_impl.cuh"
#include "backend/cuda/device_info.h"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

namespace cg = cooperative_groups;

// ---- conv1d_silu -------------------------------------------------------------------------------
//
// Thread = one channel c over a run of kConvTokens tokens; block = kConvThreads consecutive
// channels (coalesced row reads); grid = (channel blocks, token runs). A run starting at t0 reads
// its kernel - 1 inputs of history from xx = concat(state, x) directly, so runs are independent.
// Only run 0 reads the old state (t0 >= kernel - 1 for every other run, since kConvTokens >= 7),
// and the thread of run 0 writes the new state of its channel after reading all of the old one:
// no other thread touches that column of the state.

constexpr int kConvThreads = 128;   // channels per CTA
constexpr int kConvFoldK = 4;       // the conv width deltanet_step can fold in (Qwen3.5, Qwen3-Next)
constexpr int kMaxClusterCtas = 8;  // portable cluster size: value heads per key head for the fold
constexpr int kConvTokens = 16;     // tokens per thread

template <int K>  // conv kernel width, 2..8
__global__ void __launch_bounds__(kConvThreads)
    conv1d_silu_kernel(const float* __restrict__ x, int64_t x_stride, int n_tok, int64_t n_ch,
                       const float* __restrict__ w, float* state, float* __restrict__ y) {
    static_assert(K >= 2 && K - 1 <= kConvTokens, "run 0 must be the only reader of the state");
    constexpr int H = K - 1;  // history rows (state rows)
    const int64_t c = blockIdx.x * int64_t{kConvThreads} + threadIdx.x;
    const int t0 = static_cast<int>(blockIdx.y) * kConvTokens;
    float wr[K];  // w[c, :]: a weight, read before pdl_wait
#pragma unroll
    for (int j = 0; j < K; ++j) wr[j] = c < n_ch ? w[c * K + j] : 0.0f;
    pdl_wait();  // x and state come from earlier kernels
    pdl_trigger();
    if (c >= n_ch) return;  // no block barrier below

    // xx(r) = row r of concat(state, x) in channel c, r in [0, H + n_tok).
    const auto xx = [&](int r) { return r < H ? state[r * n_ch + c] : x[(r - H) * x_stride + c]; };
    float win[K];  // win[j] = xx(t + j): the window of output token t (win[H] = x[t])
#pragma unroll
    for (int j = 0; j < H; ++j) win[j] = xx(t0 + j);
    const int t1 = min(t0 + kConvTokens, n_tok);
    for (int t = t0; t < t1; ++t) {
        win[H] = x[t * x_stride + c];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < K; ++j) acc = fmaf(wr[j], win[j], acc);
        y[t * n_ch + c] = acc / (1.0f + expf(-acc));  // silu
#pragma unroll
        for (int j = 0; j < H; ++j) win[j] = win[j + 1];
    }
    if (blockIdx.y == 0) {  // new state: rows n_tok .. n_tok + H - 1 of xx (old rows read first)
        float ns[H];
#pragma unroll
        for (int r = 0; r < H; ++r) ns[r] = xx(n_tok + r);
#pragma unroll
        for (int r = 0; r < H; ++r) state[r * n_ch + c] = ns[r];
    }
}

// ---- deltanet_step -----------------------------------------------------------------------------
//
// One CTA per value head h; the head's state S [D, D] (row i = key dim, column j = value dim)
// lives in registers for the whole launch: thread (grp, j) owns rows [32 grp, 32 grp + 32) of
// column j, so a column is split over G = D / 32 threads (tid = grp * D + j: a warp shares grp
// and covers 32 consecutive columns, so global loads/stores of S rows are coalesced and the
// shared q / k reads are broadcasts). D 128: 512 threads, 32 state floats each.
//
// Per token (B1..B5 are the block barriers):
//   threads [0, D) hold q[tid], threads [D, 2D) hold k[tid - D] of key head kh;
//   sum of squares per warp -> red_qk; B1; normalised q (times 1/sqrt(D)) -> q_s, k -> k_s; B2;
//   pass 1: partial (S^T k)_j over the thread's 32 rows -> red_u[grp][j]; B3;
//           u_j = exp(g) * sum_grp red_u  (= (S exp(g))^T k);  d_j = beta (v_j - u_j);
//   pass 2: S_ij <- S_ij exp(g) + k_i d_j;  partial o_j = sum_i S_ij q_i -> red_o[grp][j]; B4;
//   group 0: o_j = sum_grp red_o; sum of o^2 per warp -> red_n; B5;
//           out_j = w_j * (o_j / sqrt(mean(o^2) + eps)) * silu(z_j).
// Reuse across tokens is safe: each shared array is rewritten at the next token only after at
// least two barriers following its last read.

// Small heads (D 16, 32: the test fixtures' shapes) use one thread per column (all D rows) and
// extra threads so that q and k still get one thread per element; the extra threads own no state.
template <int D>
struct StepCfg {
    static constexpr int kGroups = D >= 64 ? D / 32 : 1;  // threads per state column
    static constexpr int kRows = D / kGroups;             // state rows per thread (32, or D)
    static constexpr int kOwners = D * kGroups;           // threads owning state: 128 (D 64), 512 (D 128)
    static constexpr int kThreads = kOwners > 2 * D ? kOwners : 2 * D;  // q and k: one thread per element
    static constexpr int kSeg = D < 32 ? D : 32;  // lanes per q/k sum-of-squares segment
    static_assert(D % 16 == 0 && kRows % 4 == 0 && kThreads % 32 == 0 && kThreads <= 1024,
                  "unsupported head width");
};

// Sum over aligned segments of `seg` lanes (seg a power of two <= 32).
template <int seg>
__device__ __forceinline__ float seg_sum(float v) {
#pragma unroll
    for (int o = seg / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

using dn::warp_sum;

// The folded conv (K > 0) of one channel: hist = its last K - 1 inputs (oldest first), w its K
// weights; returns silu(sum_j w_j xx_j) over xx = [hist, x] in conv1d_silu_kernel's order and rounding,
// and moves the window on (hist <- [hist[1..], x]).
template <int K>
__device__ __forceinline__ float conv_fold_apply(const float (&w)[K], float (&hist)[K - 1], float x) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) acc = fmaf(w[j], hist[j], acc);
    acc = fmaf(w[K - 1], x, acc);
#pragma unroll
    for (int j = 0; j < K - 2; ++j) hist[j] = hist[j + 1];
    hist[K - 2] = x;
    return acc / (1.0f + expf(-acc));
}

// K: the folded conv's width (0: conv_out already holds the conv's output). With K > 0 the CTAs of
// one key head's value heads are consecutive (a cluster of n_v_heads / n_k_heads when that exceeds 1):
// CTA b serves key head b / ratio, value head rank b % ratio of it.
template <int D, int K>
__global__ void __launch_bounds__(StepCfg<D>::kThreads, 1) deltanet_step_kernel(const DeltaNetStepArgs p) {
    constexpr int G = StepCfg<D>::kGroups, RPT = StepCfg<D>::kRows, SEG = StepCfg<D>::kSeg;
    constexpr int QKS = D / SEG;  // sum-of-squares segments per vector (q: [0, QKS), k: [QKS, 2 QKS))
    __shared__ __align__(16) float q_s[D];  // this token's q (L2-normed, times 1/sqrt(D))
    __shared__ __align__(16) float k_s[D];  // this token's k (L2-normed)
    __shared__ float red_u[G][D];           // partial S^T k per row group
    __shared__ float red_o[G][D];           // partial S^T q per row group
    __shared__ float red_qk[2 * QKS];       // per-segment sums of squares: [0, QKS) q, [QKS, 2 QKS) k
    __shared__ float red_n[G];              // per-warp sums of o^2 (row group 0's warps)

    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int j = tid % D;    // state column = value dim = output element
    const int grp = tid / D;  // row group (>= G: an extra thread of a small head, no state)
    const bool owns = tid < StepCfg<D>::kOwners;
    const int ratio = p.n_v_heads / p.n_k_heads;
    const int rank = K > 0 ? static_cast<int>(blockIdx.x) % ratio : 0;  // in the key head's cluster
    const int h = K > 0 ? (p.v_tiled ? static_cast<int>(blockIdx.x) / ratio + rank * p.n_k_heads
                                     : static_cast<int>(blockIdx.x))
                        : static_cast<int>(blockIdx.x);
    const int kh = p.v_tiled ? h % p.n_k_heads : h / ratio;
    const int64_t key_dim = int64_t{p.n_k_heads} * D, value_dim = int64_t{p.n_v_heads} * D;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    // Runs mode (DeltaNetStepArgs::run_row0): this CTA's run is blockIdx.y; its rows start at row0.
    int row0 = 0, n_tok = p.n_tok;
    const float* s_src = p.state;  // the state read (runs mode: the run's input entry)
    if (K == 0 && p.run_row0 != nullptr) {
        const int run = static_cast<int>(blockIdx.y);
        const int e_in = p.run_state_in[run];
        if (e_in < 0) return;  // served elsewhere (the whole CTA leaves before any barrier)
        row0 = p.run_row0[run];
        n_tok = p.run_row0[run + 1] - row0;
        s_src = p.state + int64_t{e_in} * p.state_stride;
    }
    const float* in_rows = K > 0 ? p.conv_in : p.conv_out;  // [n_tok rows] of Q|K|V (before / after the conv)
    const int64_t conv_stride =
        K > 0 ? (p.conv_in_stride ? p.conv_in_stride : conv_dim) : (p.conv_stride ? p.conv_stride : conv_dim);
    const int64_t a_stride = p.a_stride ? p.a_stride : p.n_v_heads;
    const int64_t b_stride = p.b_stride ? p.b_stride : p.n_v_heads;
    const int64_t z_stride = p.z_stride ? p.z_stride : value_dim;
    const int64_t out_stride = p.out_stride ? p.out_stride : value_dim;
    // Columns of a conv_out row: this thread's q or k element (threads < 2D) and its v element.
    const bool has_qk = tid < 2 * D;
    const int64_t qk_col = tid < D ? int64_t{kh} * D + tid : key_dim + int64_t{kh} * D + (tid - D);
    const int64_t v_col = 2 * key_dim + int64_t{h} * D + j;
    const int64_t hj = int64_t{h} * D + j;  // column in z and out rows

    // Weights (no kernel of the step writes them): read before pdl_wait.
    const float neg_a = -expf(p.a_log[h]);  // -exp(a_log) = A < 0
    const float dt_bias = p.dt_bias[h];
    const float norm_w = p.norm_w[j];
    const float q_scale = 1.0f / sqrtf(static_cast<float>(D));

    // The state was last written by this layer's previous step (or the chunked prompt pass, or a
    // reset), at least two launches back (the conv kernel runs in between): pdl.cuh allows reading it
    // before the wait, so its 64 KiB per head stream in while the conv kernel finishes.
    const int64_t s_off = int64_t{h} * D * D + int64_t{grp} * RPT * D + j;  // S[h][RPT grp][j] (owners)
    float S[RPT];                                                           // S[i] = S[h][RPT grp + i][j]
#pragma unroll
    for (int i = 0; i < RPT; ++i) S[i] = owns ? __ldcg(s_src + s_off + int64_t{i} * D) : 0.0f;
    // The folded conv: this thread's channels' weights and last K - 1 inputs (the conv state, written
    // by this layer's previous step at least two launches back: read before the wait, like S).
    constexpr int KW = K > 0 ? K : 2;
    float cw_qk[KW], cw_v[KW], hist_qk[KW - 1], hist_v[KW - 1];
    if constexpr (K > 0) {
#pragma unroll
        for (int i = 0; i < K; ++i) {
            cw_qk[i] = has_qk ? __ldg(p.conv_w + qk_col * K + i) : 0.0f;
            cw_v[i] = owns ? __ldg(p.conv_w + v_col * K + i) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < K - 1; ++r) {
            hist_qk[r] = has_qk ? __ldcg(p.conv_state + r * conv_dim + qk_col) : 0.0f;
            hist_v[r] = owns ? __ldcg(p.conv_state + r * conv_dim + v_col) : 0.0f;
        }
        if (ratio > 1) cg::this_cluster().barrier_arrive();  // this CTA has read the key head's old Q/K state
    }
    pdl_wait();  // conv_out / conv_in, a, b, z come from the kernels just before; out is read by later ones
    pdl_trigger();

    // This thread's inputs of token t, loaded one token ahead of their use.
    float n_qk = 0.0f, n_v = 0.0f, n_z = 0.0f, n_a = 0.0f, n_b = 0.0f;
    const auto load = [&](int t) {
        const int64_t r = row0 + t;
        const float* row = in_rows + r * conv_stride;
        n_qk = has_qk ? row[qk_col] : 0.0f;
        n_v = owns ? row[v_col] : 0.0f;
        n_z = grp == 0 ? p.z[r * z_stride + hj] : 0.0f;
        n_a = p.a[r * a_stride + h];
        n_b = p.b[r * b_stride + h];
    };
    load(0);

    for (int t = 0; t < n_tok; ++t) {
        float x_qk = n_qk, x_v = n_v;
        const float x_z = n_z, x_a = n_a, x_b = n_b;
        if (t + 1 < n_tok) load(t + 1);
        if constexpr (K > 0) {
            x_qk = conv_fold_apply<K>(cw_qk, hist_qk, x_qk);
            x_v = conv_fold_apply<K>(cw_v, hist_v, x_v);
        }

        // Gates (every thread computes the same two scalars): softplus as the reference
        // (x itself above 20), decay = exp(g) in (0, 1].
        const float beta = dn::gate_beta(x_b);
        const float g = dn::gate_g(x_a, neg_a, dt_bias);
        const float decay = expf(g);

        // L2 norms of q and k.
        const float ss = seg_sum<SEG>(x_qk * x_qk);
        if (lane % SEG == 0 && tid < 2 * D) red_qk[tid / SEG] = ss;
        __syncthreads();  // B1
        if (has_qk) {
            const int base = tid < D ? 0 : QKS;
            float tot = 0.0f;
#pragma unroll
            for (int w = 0; w < QKS; ++w) tot += red_qk[base + w];
            const float inv = dn::l2_inv(tot);
            if (tid < D)
                q_s[tid] = x_qk * inv * q_scale;
            else
                k_s[tid - D] = x_qk * inv;
        }
        __syncthreads();  // B2

        // Pass 1: partial (S_old^T k)_j over this thread's rows (4 accumulators). The extra
        // threads of a small head (grp >= G, no state) read row group 0 so that their unused
        // loads stay inside q_s / k_s.
        const int rg = owns ? grp : 0;
        const float* kr = k_s + rg * RPT;
        const float* qr = q_s + rg * RPT;
        const float pu = dn::partial_stk<RPT>(S, kr);
        if (owns) red_u[grp][j] = pu;
        __syncthreads();  // B3
        float sk = 0.0f;
#pragma unroll
        for (int r = 0; r < G; ++r) sk += red_u[r][j];  // (extra threads: unused)
        const float delta = beta * (x_v - decay * sk);  // d_j = beta (v_j - u_j)

        // Pass 2: S <- S decay + k d^T; partial o_j = (S_new^T q)_j.
        const float po = dn::update_partial_o<RPT>(S, kr, qr, delta, decay);
        if (owns) red_o[grp][j] = po;
        if (K == 0 && p.row_state_out != nullptr && owns) {  // runs mode: the state after this token
            const int e_out = p.row_state_out[row0 + t];
            if (e_out >= 0) {
                float* dst = p.state + int64_t{e_out} * p.state_stride + s_off;
#pragma unroll
                for (int i = 0; i < RPT; ++i) dst[int64_t{i} * D] = S[i];
            }
        }
        __syncthreads();  // B4

        // Gated RMSNorm over the head's D outputs (row group 0 = warps [0, G)).
        float o = 0.0f;
        if (grp == 0) {
#pragma unroll
            for (int r = 0; r < G; ++r) o += red_o[r][j];
        }
        const float oo = warp_sum(o * o);
        if (lane == 0 && warp < G) red_n[warp] = oo;
        __syncthreads();  // B5
        if (grp == 0) {
            float tot = 0.0f;
#pragma unroll
            for (int w = 0; w < G; ++w) tot += red_n[w];
            p.out[(row0 + t) * out_stride + hj] = dn::gated_out(norm_w, o, tot, D, p.eps, x_z);
        }
    }

    if (owns && !(K == 0 && p.run_row0 != nullptr)) {
        float* dst = p.state + s_off;
#pragma unroll
        for (int i = 0; i < RPT; ++i) dst[int64_t{i} * D] = S[i];
    }
    if constexpr (K > 0) {  // the new conv state: Q/K channels by rank 0 once all ranks have read them
        if (ratio > 1) cg::this_cluster().barrier_wait();  // every CTA of the cluster has read the old state
        if (has_qk && rank == 0) {
#pragma unroll
            for (int r = 0; r < K - 1; ++r) p.conv_state[r * conv_dim + qk_col] = hist_qk[r];
        }
        if (owns && grp == 0) {
#pragma unroll
            for (int r = 0; r < K - 1; ++r) p.conv_state[r * conv_dim + v_col] = hist_v[r];
        }
    }
}

[[noreturn]] void bad_args(const char* op, const char* what) {
    std::fprintf(stderr, "pelican: cuda::%s: %s\n", op, what);
    std::abort();
}

template <int K>
void launch_conv(dim3 grid, const float* x, int64_t x_stride, int n_tok, int64_t n_ch, const float* w,
                 float* state, float* y, cudaStream_t stream) {
    launch_pdl(conv1d_silu_kernel<K>, grid, dim3(kConvThreads), 0, stream, x, x_stride, n_tok, n_ch, w, state,
               y);
}

}  // namespace

void conv1d_silu(const float* x, int64_t x_stride, int n_tok, int64_t n_ch, int kernel, const float* w,
                 float* state, float* y, cudaStream_t stream) {
    if (n_tok <= 0 || n_ch <= 0) return;
    if (!x || !w || !state || !y) bad_args("conv1d_silu", "null pointer");
    if (x_stride < n_ch) bad_args("conv1d_silu", "x_stride < n_ch");
    const int64_t runs = (int64_t{n_tok} + kConvTokens - 1) / kConvTokens;
    const int64_t blocks = (n_ch + kConvThreads - 1) / kConvThreads;
    if (runs > 65535 || blocks > 0x7fffffff) bad_args("conv1d_silu", "too many tokens or channels");
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(runs));
    switch (kernel) {
        case 2:
            return launch_conv<2>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        case 3:
            return launch_conv<3>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        case 4:
            return launch_conv<4>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        case 5:
            return launch_conv<5>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        case 6:
            return launch_conv<6>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        case 7:
            return launch_conv<7>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        case 8:
            return launch_conv<8>(grid, x, x_stride, n_tok, n_ch, w, state, y, stream);
        default:
            std::fprintf(stderr, "pelican: cuda::conv1d_silu: kernel width %d not supported (2..8)\n",
                         kernel);
            std::abort();
    }
}

void dn::check_step_args(const DeltaNetStepArgs& a, const char* op) {
    if (a.n_k_heads <= 0 || a.n_v_heads <= 0 || a.n_v_heads % a.n_k_heads != 0)
        bad_args(op, "n_v_heads must be a positive multiple of n_k_heads");
    if (a.d_k != a.d_v || (a.d_k != 16 && a.d_k != 32 && a.d_k != 64 && a.d_k != 128)) {
        std::fprintf(stderr,
                     "pelican: cuda::%s: head widths d_k %d, d_v %d not supported "
                     "(d_k == d_v, 16, 32, 64 or 128)\n",
                     op, a.d_k, a.d_v);
        std::abort();
    }
    if ((!a.conv_out && !a.conv_in) || !a.a || !a.b || !a.z || !a.a_log || !a.dt_bias || !a.norm_w ||
        !a.state || !a.out)
        bad_args(op, "null pointer");
    const int64_t key_dim = int64_t{a.n_k_heads} * a.d_k, value_dim = int64_t{a.n_v_heads} * a.d_v;
    if ((a.conv_stride && a.conv_stride < 2 * key_dim + value_dim) ||
        (a.a_stride && a.a_stride < a.n_v_heads) || (a.b_stride && a.b_stride < a.n_v_heads) ||
        (a.z_stride && a.z_stride < value_dim) || (a.out_stride && a.out_stride < value_dim))
        bad_args(op, "a row stride is shorter than its row");
}

bool deltanet_conv_fold_supported(int conv_kernel, int n_k_heads, int n_v_heads, int d) {
    if (conv_kernel != kConvFoldK || n_k_heads <= 0 || n_v_heads % n_k_heads != 0) return false;
    if (d != 16 && d != 32 && d != 64 && d != 128) return false;
    const int ratio = n_v_heads / n_k_heads;
    return ratio == 1 || (ratio <= kMaxClusterCtas && current_device_cc_major() >= 9);
}

// The folded-conv kernel: one cluster of `ratio` CTAs per key head (when ratio > 1), with PDL.
template <int D>
void launch_step_conv(const DeltaNetStepArgs& a, cudaStream_t stream) {
    launch_pdl_cluster(deltanet_step_kernel<D, kConvFoldK>, dim3(static_cast<unsigned>(a.n_v_heads)),
                       dim3(StepCfg<D>::kThreads), 0, stream,
                       static_cast<unsigned>(a.n_v_heads / a.n_k_heads), a);
}

void deltanet_step(const DeltaNetStepArgs& a, cudaStream_t stream) {
    if (a.n_tok <= 0 && a.run_row0 == nullptr) return;
    dn::check_step_args(a, "deltanet_step");
    if (a.conv_in != nullptr) {
        if (a.run_row0) bad_args("deltanet_step", "the folded conv does not take runs");
        if (!a.conv_w || !a.conv_state) bad_args("deltanet_step", "conv_in without conv_w / conv_state");
        if (!deltanet_conv_fold_supported(a.conv_kernel, a.n_k_heads, a.n_v_heads, a.d_k))
            bad_args("deltanet_step", "the folded conv is not supported for these shapes (deltanet.h)");
        const int64_t conv_dim = 2 * int64_t{a.n_k_heads} * a.d_k + int64_t{a.n_v_heads} * a.d_v;
        if (a.conv_in_stride && a.conv_in_stride < conv_dim)
            bad_args("deltanet_step", "conv_in_stride < conv_dim");
        switch (a.d_k) {
            case 16:
                return launch_step_conv<16>(a, stream);
            case 32:
                return launch_step_conv<32>(a, stream);
            case 64:
                return launch_step_conv<64>(a, stream);
            default:
                return launch_step_conv<128>(a, stream);
        }
    }
    if (a.run_row0 != nullptr &&
        (a.n_runs <= 0 || a.n_runs > 65535 || !a.run_state_in || !a.row_state_out || a.state_stride <= 0))
        bad_args("deltanet_step", "runs mode needs 1..65535 runs, run_state_in, row_state_out, a stride");
    const dim3 grid(static_cast<unsigned>(a.n_v_heads), a.run_row0 ? static_cast<unsigned>(a.n_runs) : 1u);
    switch (a.d_k) {
        case 16:
            return launch_pdl(deltanet_step_kernel<16, 0>, grid, dim3(StepCfg<16>::kThreads), 0, stream, a);
        case 32:
            return launch_pdl(deltanet_step_kernel<32, 0>, grid, dim3(StepCfg<32>::kThreads), 0, stream, a);
        case 64:
            return launch_pdl(deltanet_step_kernel<64, 0>, grid, dim3(StepCfg<64>::kThreads), 0, stream, a);
        default:
            return launch_pdl(deltanet_step_kernel<128, 0>, grid, dim3(StepCfg<128>::kThreads), 0, stream, a);
    }
}

}  // namespace pelican::cuda
