// Small GPU ops of the forward pass (host-includable, fmt-free). All graph-capturable.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace pelican::cuda {

// out[t, :] = scale * to_float(table row ids[t]) for t < n; table: GGUF rows of `type`
// (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K; row r at table + r * row_stride bytes), device.
// ids: device int32 [n]. out [n, n_embd] fp32.
void get_rows(const void* table, DType type, int64_t n_embd, size_t row_stride, const int32_t* ids, int n,
              float scale, float* out, cudaStream_t stream);
// y[r, :] = x[r, :] / sqrt(mean(x^2) + eps) * (one_plus ? 1 + w : w); y may equal x.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, bool one_plus,
              cudaStream_t stream);
// y = a + s * b over n floats (y may alias a or b).
void add_scaled(const float* a, const float* b, float s, float* y, int64_t n, cudaStream_t stream);
// y[r, i] = silu(gu[r, i]) * gu[r, n_half + i]   (gu [n_rows, 2 * n_half]; y [n_rows, n_half])
void swiglu_stacked(const float* gu, float* y, int64_t n_rows, int64_t n_half, cudaStream_t stream);
// x[r, i] *= sigmoid(gate[r, i]) for r < n_rows, i < n (rows x_stride / gate_stride floats apart):
// the gated attention's output gate (ops_qwen35.h ref::sigmoid_gate_mul per row).
void sigmoid_gate_mul(float* x, int64_t x_stride, const float* gate, int64_t gate_stride, int64_t n_rows,
                      int64_t n, cudaStream_t stream);
// y[r, :] += bias  (y [n_rows, n])
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n, cudaStream_t stream);
// y = s * x
void scale(const float* x, float s, float* y, int64_t n, cudaStream_t stream);
// fp32 -> F16 / BF16 conversion (round to nearest even), n elements.
void convert_f32(const float* x, void* y, DType out_type, int64_t n, cudaStream_t stream);

}  // namespace pelican::cuda
