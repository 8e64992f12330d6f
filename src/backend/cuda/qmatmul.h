// Tensor-core matmul with on-the-fly dequantization for batched decode (many sequences, one token
// each): y [n_tok, n_out] = x [n_tok, n_in] W^T for W a GpuMatrix of type Q4_0, Q8_0, Q4_K or Q6_K,
// fp32 in and out, n_tok >= 1 (tuned for 9 .. 512; correct for any count the workspace holds).
// Host-includable, fmt-free. Graph-capturable: no allocation, no host synchronisation, the grid
// depends only on the shapes (and the device's SM count); launched with programmatic dependent
// launch (pdl.cuh) like the other kernels.
//
//   size_t ws = qmatmul_workspace_bytes(max_n_in, max_n_out, max_tok);   // once, at setup
//   cudaMalloc(&workspace, ws);                                          // no initialisation needed
//   if (qmatmul_supported(w)) qmatmul(w, x, n_in, n_tok, y, n_out, workspace, ws, stream);
//
// Numerics (documented contract; tests/unit/cuda_qmatmul_test.cpp checks it):
//   * x is rounded to f16 (round to nearest even), as PrefillMatmul does;
//   * each weight is dequantized exactly as dequantize_matrix / core/dequantize.cpp computes it in
//     fp32 (Q4_0, Q8_0: q d is exact; Q4_K: d sc q - dmin m with exact products; Q6_K: (d sc) (q - 32)
//     with the reference's fp32 rounding), then rounded once to f16: the weights of
//     dequantize_matrix(..., DType::F16);
//   * products of the f16 values are exact; sums are fp32 (mma.sync m16n8k16 fp32 accumulation
//     along k in chunks of 16, split-K partial sums added in a fixed order: deterministic).
//   So |y - sum_i w_i x16_i| <= 2^-11 sum |w_i x16_i| + 2^-25 sum |x16_i| (f16 weight rounding,
//   subnormal part) + the fp32 accumulation error (~ (n_in / 16 + 32) 2^-22 sum |w x|).
//
// How (qmatmul_impl.cuh has the details): a pre-pass converts x to f16 into the workspace in the
// mma B-fragment order (and zeroes the split-K counters); the main kernel gives each CTA a tile of
// output rows (128 or 256) x tokens (16, 32, 64 or 128, chosen from n_tok) and a range of k: it
// streams 128-k tiles of the weights (cp.async, 16-byte chunks, 4 stages) and of x into shared
// memory, dequantizes the weights to f16 in registers and runs mma.sync m16n8k16 with the weights
// as the M operand and the tokens as N. Split-K (fp32 partials in the workspace, the last CTA of a
// tile adds them in order) fills the SMs when there are few row tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/gpu_matrix.h"

namespace pelican::cuda {

// True when qmatmul accepts w: type Q4_0, Q8_0, Q4_K or Q6_K (F32 / F16 / BF16 go through cuBLAS:
// PrefillMatmul), w.data set, n_in a positive multiple of 256 (<= 2^28), 1 <= n_out <= 65535 * 128, and the
// device layout of gpu_matrix.cu (16-byte aligned planes). Any n_out (odd ones too) is fine.
bool qmatmul_supported(const GpuMatrix& w);

// Workspace bytes that serve every call with n_in <= max_n_in, n_out <= max_n_out and
// n_tok <= max_tok (the f16 copy of x, split-K counters and partial sums; about
// 2 * roundup(max_tok, 128) * max_n_in bytes plus at most ~21 MiB). 0 for non-positive bounds.
size_t qmatmul_workspace_bytes(int64_t max_n_in, int64_t max_n_out, int max_tok);

// y [n_tok rows of y_stride floats, n_out used] = x [n_tok rows of x_stride floats, n_in used] W^T.
// x and y are device pointers; y must not overlap x or the workspace. workspace: device memory of
// workspace_bytes >= the bytes this call needs (qmatmul_workspace_bytes of bounds covering it),
// 256-byte aligned (cudaMalloc); its contents need no initialisation and are overwritten (calls that
// may run concurrently, e.g. on two streams, need separate workspaces; calls in one stream share one).
// n_tok <= 0 does nothing. Aborts (message on stderr) on an unsupported matrix, null pointers,
// strides below the row widths or a workspace that is too small, like the other kernels.
void qmatmul(const GpuMatrix& w, const float* x, int64_t x_stride, int n_tok, float* y, int64_t y_stride,
             void* workspace, size_t workspace_bytes, cudaStream_t stream);

// The launch qmatmul makes for this matrix and token count (for benchmarks and tests).
struct QmatmulPlan {
    int config = -1;         // tile configuration (index into the kernel's table)
    int rows_per_cta = 0;    // output rows of a CTA tile
    int tokens_per_cta = 0;  // tokens of a CTA tile
    int split = 0;           // k ranges (CTAs per output tile)
    int ctas = 0;            // grid size
    size_t workspace = 0;    // bytes of workspace the call needs
};
QmatmulPlan qmatmul_plan(const GpuMatrix& w, int n_tok);

// Tests and benchmarks only (not thread-safe): the number of tile configurations, and forcing one
// (config outside [0, count): the built-in choice by n_tok again). Every configuration is correct for
// every shape; they differ in speed.
int qmatmul_config_count();
void qmatmul_force_config(int config);

// Tests and benchmarks only: force the split-K factor (clamped to 1 .. min(16, n_in / 128) and the
// workspace's partial-sum capacity); 0 restores the built-in choice. Not thread-safe.
void qmatmul_force_split(int split);

}  // namespace pelican::cuda
