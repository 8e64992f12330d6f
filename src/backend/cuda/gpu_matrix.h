// A matmul weight W [n_out, n_in] resident on the GPU, in the layout the GEMV kernels read fastest
// (see gemv.h). Host-includable, fmt-free (also included by .cu files).
//
//   GpuMatrix m;
//   HostRows parts[3] = {{wq_ptr, wq_stride, q_dim}, {wk...}, {wv...}};   // same type and n_in
//   if (!upload_matrix(DType::Q4_0, n_in, parts, 3, m, stream, &err)) ...  // Q, K, V stacked
//   gemv(m, args, stream);                      // decode (gemv.h)
//   dequantize_matrix(m, 0, m.n_out, out, DType::F16, stream);   // prefill tiles for cuBLAS
//   free_matrix(m);
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace pelican::cuda {

// Weight types the GPU matmul path accepts.
bool gpu_matmul_supported(DType t);  // F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K

// One host part of a (possibly stacked) matrix: n_rows GGUF rows (each dtype_row_bytes(type,
// n_in) bytes, dense blocks), row r at data + r * row_stride. Host memory (mmap'd file is fine).
struct HostRows {
    const void* data = nullptr;
    size_t row_stride = 0;  // bytes
    int64_t n_rows = 0;
};

struct GpuMatrix {
    DType type = DType::F32;
    int64_t n_in = 0;
    int64_t n_out = 0;  // total rows (sum of the stacked parts)
    // Device memory owned by this matrix (one allocation). The layout inside is private to
    // gemv*.cu (e.g. quants and scales split into separate 16-byte aligned arrays).
    void* data = nullptr;
    size_t bytes = 0;  // device bytes of the allocation
    // Layout offsets/strides used by the kernels (meaning private to gemv*.cu).
    size_t off[4] = {0, 0, 0, 0};
    int64_t stride[4] = {0, 0, 0, 0};
    // Weight bytes one GEMV reads (quants + scales), for GB/s figures.
    size_t read_bytes = 0;
    // Decode kernel variant chosen by gemv_autotune (gemv.h) for this matrix; -1 = untuned (a
    // built-in guess per shape).
    int gemv_variant = -1;
};

// Uploads n_parts parts (same type, same n_in) stacked along n_out into one GpuMatrix (rows of
// part 0 first). Synchronous with respect to the host buffers (they may be freed on return).
// Returns false with *err set (static string) on unsupported type/shape or allocation failure.
bool upload_matrix(DType type, int64_t n_in, const HostRows* parts, int n_parts, GpuMatrix& out,
                   cudaStream_t stream, const char** err);
void free_matrix(GpuMatrix& m);  // no-op on an empty matrix
// F32 matrices: the rows (plane 0, row r at + r * gpu_matrix_f32_row_floats(m) floats; n_in floats
// then zero padding to a multiple of 4). Other types or an empty matrix: nullptr / 0.
const float* gpu_matrix_f32_rows(const GpuMatrix& m);
int64_t gpu_matrix_f32_row_floats(const GpuMatrix& m);

// Writes rows row0 .. row0 + n_rows - 1 of W dequantized (exactly as core/dequantize.cpp, then
// rounded to out_type) into out [n_rows, n_in] (row-major, dense). out_type: F16, BF16 or F32.
void dequantize_matrix(const GpuMatrix& m, int64_t row0, int64_t n_rows, void* out, DType out_type,
                       cudaStream_t stream);

}  // namespace pelican::cuda
