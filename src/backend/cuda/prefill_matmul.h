// Prefill matmul on the GPU through cuBLAS: y [n_tok, n_out] = x [n_tok, n_in] W^T, fp32 in and
// out. F32 weights: cublas fp32 GEMM (CUBLAS_COMPUTE_32F, no TF32). F16 / BF16 weights: x is
// converted to the weight's type, tensor-core GEMM with fp32 accumulation. Quantized weights:
// W is dequantized (gpu_matrix.h dequantize_matrix) to F16 in row tiles inside a scratch
// buffer, x converted to F16, then F16 GEMMs with fp32 accumulation per tile.
// Host-includable, fmt-free. Not graph-captured (decode uses gemv.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/gpu_matrix.h"

namespace pelican::cuda {

class PrefillMatmul {
public:
    // max_n_in / max_n_out / max_tok bound every later call (scratch is allocated here, once).
    // Returns false with *err set on failure (cuBLAS handle, allocation).
    bool init(int64_t max_n_in, int64_t max_n_out, int64_t max_tok, cudaStream_t stream, const char** err);
    ~PrefillMatmul();
    PrefillMatmul() = default;
    PrefillMatmul(const PrefillMatmul&) = delete;
    PrefillMatmul& operator=(const PrefillMatmul&) = delete;

    // y = x W^T (y must not alias x). n_tok <= max_tok, shapes within the init bounds.
    void run(const GpuMatrix& w, const float* x, int64_t n_tok, float* y, cudaStream_t stream);

private:
    void* handle_ = nullptr;  // cublasHandle_t
    void* w_tile_ = nullptr;  // dequantized weight tile (F16)
    void* x_conv_ = nullptr;  // activations converted to F16 / BF16
    void* workspace_ = nullptr;
    size_t w_tile_bytes_ = 0, x_conv_bytes_ = 0, workspace_bytes_ = 0;
    int64_t max_n_in_ = 0, max_n_out_ = 0, max_tok_ = 0;
};

}  // namespace pelican::cuda
