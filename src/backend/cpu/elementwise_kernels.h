// Internal interface of the AVX-512 element-wise kernels (elementwise_avx512.cpp); the portable
// versions and the dispatch live in elementwise.cpp. Plain C++ only (see matmul_kernels.h).
#pragma once

#include <cstdint>

namespace pelican::cpu::detail {

// One row of n: y = x / sqrt(mean(x^2) + eps) * w' (w' = w, 1 + w, or 1 when w is null).
void rms_norm_row_avx512(const float* x, const float* w, float* y, int64_t n, float eps, bool one_plus);
void softmax_row_avx512(float* x, int64_t n);
void silu_avx512(const float* x, float* y, int64_t n);
void swiglu_avx512(const float* gate, const float* up, float* y, int64_t n);
// x *= sigmoid(gate) over n.
void sigmoid_mul_avx512(float* x, const float* gate, int64_t n);
// Sum of squares of n floats.
float sum_squares_avx512(const float* x, int64_t n);
void gelu_tanh_avx512(const float* x, float* y, int64_t n);

}  // namespace pelican::cpu::detail
