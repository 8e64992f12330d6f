// conv1d_silu_runs (deltanet.h): the causal conv + SiLU over the rows of many sequences, each run
// reading its conv state from one entry and leaving the state after chosen rows in others.
//
// Thread = one (row, channel); grid = (channel blocks, rows). Each output only reads: the run's
// earlier rows of x and its input entry (never written by this launch), so threads are independent.
// The sum is conv1d_silu_kernel's (fmaf over the window, oldest first), so results are bit-identical.
// This file must not be built with --use_fast_math (expf).
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

constexpr int kThreads = 128;  // channels per CTA

template <int K>
__global__ void __launch_bounds__(kThreads) conv_runs_kernel(const ConvRunsArgs a) {
    constexpr int H = K - 1;  // history rows
    const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
    const int row = static_cast<int>(blockIdx.y);
    float w[K];
#pragma unroll
    for (int j = 0; j < K; ++j) w[j] = c < a.n_ch ? a.w[c * K + j] : 0.0f;
    const int run = a.row_run[row];
    const int r0 = a.run_row0[run];
    const int t = row - r0;  // the row's token index in its run
    const float* st = a.state + int64_t{a.run_state_in[run]} * a.state_stride;
    const int e_out = a.row_state_out[row];
    pdl_wait();  // x comes from the kernel before
    pdl_trigger();
    if (c >= a.n_ch) return;
    // xx(i): the run's input at token index i (i < 0: from the conv state, row H + i).
    const auto xx = [&](int i) {
        return i >= 0 ? a.x[int64_t{r0 + i} * a.x_stride + c] : st[(H + i) * a.n_ch + c];
    };
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) acc = fmaf(w[j], xx(t - H + j), acc);
    a.y[int64_t{row} * a.n_ch + c] = acc / (1.0f + expf(-acc));  // silu
    if (e_out >= 0) {
        float* dst = a.state + int64_t{e_out} * a.state_stride;
#pragma unroll
        for (int j = 0; j < H; ++j) dst[j * a.n_ch + c] = xx(t - H + 1 + j);
    }
}

[[noreturn]] void bad(const char* what) {
    std::fprintf(stderr, "pelican: cuda::conv1d_silu_runs: %s\n", what);
    std::abort();
}

template <int K>
void launch(const ConvRunsArgs& a, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((a.n_ch + kThreads - 1) / kThreads),
                    static_cast<unsigned>(a.n_rows));
    launch_pdl(conv_runs_kernel<K>, grid, dim3(kThreads), 0, stream, a);
}

}  // namespace

void conv1d_silu_runs(const ConvRunsArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_ch <= 0) return;
    if (!a.x || !a.w || !a.row_run || !a.run_row0 || !a.run_state_in || !a.row_state_out || !a.state || !a.y)
        bad("null pointer");
    if (a.x_stride < a.n_ch) bad("x_stride < n_ch");
    if (a.state_stride < int64_t{a.kernel - 1} * a.n_ch) bad("state_stride shorter than a conv state");
    if (a.n_rows > 65535 || (a.n_ch + kThreads - 1) / kThreads > 0x7fffffff) bad("too many rows or channels");
    switch (a.kernel) {
        case 2:
            return launch<2>(a, stream);
        case 3:
            return launch<3>(a, stream);
        case 4:
            return launch<4>(a, stream);
        case 5:
            return launch<5>(a, stream);
        case 6:
            return launch<6>(a, stream);
        case 7:
            return launch<7>(a, stream);
        case 8:
            return launch<8>(a, stream);
        default:
            bad("kernel width not supported (2..8)");
    }
}

}  // namespace pelican::cuda
