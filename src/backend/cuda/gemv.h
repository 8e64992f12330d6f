// Decode matmul on the GPU: y = W x for a few tokens (batch 1 decode, later speculative
// verification), bound by the bandwidth of streaming W once. Fused prologue (RMSNorm of x) and
// epilogues (bias, residual add with scale, SwiGLU over stacked gate/up rows) save passes.
// Host-includable, fmt-free.
//
// Numerics: F32/F16/BF16 weights use fp32 activations and fp32 accumulation. Quantized weights
// (Q8_0, Q4_0, Q4_K, Q6_K) quantize the (normed) activations to int8 blocks of 32 with an fp32
// scale per block (symmetric, d = amax / 127, q = round(x / d)) and use integer dot products
// (dp4a); the result equals the exact product with those rounded activations up to fp32 rounding.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/gpu_matrix.h"

namespace pelican::cuda {

inline constexpr int kMaxGemvTokens = 8;

struct GemvArgs {
    const float* x = nullptr;  // [n_tok, n_in] fp32 (device); rows x_stride floats apart
    int64_t x_stride = 0;      // 0 = n_in
    int n_tok = 1;             // 1 .. kMaxGemvTokens

    // Prologue: when norm_w != nullptr each row of x is RMS-normalised first:
    //   x' = x / sqrt(mean(x^2) + norm_eps) * (norm_one_plus ? 1 + w : w)
    const float* norm_w = nullptr;  // [n_in] fp32 device
    float norm_eps = 1e-6f;
    bool norm_one_plus = false;

    // Epilogue, per output o (before glu):  v = scale * ((W x')[o] + bias[o])
    const float* bias = nullptr;  // [n_out] or nullptr
    float scale = 1.0f;
    // glu: W holds [gate; up] stacked (n_out = 2 * n_half): y[t, i] = silu(v_i) * v_{i + n_half},
    // i < n_half. bias/scale apply before the silu. Output width is n_half.
    bool glu = false;
    // residual: y[t, o] = residual[t, o] + v (after glu when set). May alias y.
    const float* residual = nullptr;

    float* y = nullptr;    // [n_tok, n_out or n_out/2] fp32 device, rows y_stride floats apart
    int64_t y_stride = 0;  // 0 = output width
};

// Launches the GEMV (graph-capturable: no allocation, no host synchronisation). x, norm_w, bias
// and residual are read through the read-only cache: they must not alias y, except residual,
// which may equal y exactly (same rows, residual rows y_stride apart). Any alignment of x is
// accepted (16-byte aligned rows take the vector path).
void gemv(const GpuMatrix& w, const GemvArgs& a, cudaStream_t stream);

// For benchmarks and tuning: size the grid for ctas_per_sm CTAs per SM, each looping over its
// share of the rows (0, the default: as many CTAs as fit on the GPU at once). A large value
// gives one CTA per row group (no loop).
void gemv_set_grid_policy(int ctas_per_sm);

}  // namespace pelican::cuda
