// Prefill matmul through cuBLAS (see prefill_matmul.h).
//
// Layout: cuBLAS is column-major. Row-major y [n_tok, n_out] is column-major [n_out, n_tok]
// (ld n_out); row-major W [n_out, n_in] is column-major [n_in, n_out] (ld n_in), so op(W) = T;
// row-major x [n_tok, n_in] is column-major [n_in, n_tok] (ld n_in), op N. Hence
//   y^T [n_out, n_tok] = W [n_out, n_in] x^T [n_in, n_tok]:  gemm(T, N, m = n_out, n = n_tok, k = n_in).
// A tile of rows row0 .. row0 + rows of W writes rows row0 .. of y^T: C = y + row0, ldc = n_out.
//
// F32 / F16 / BF16 weights are read in place: gpu_matrix.cu keeps their rows dense in plane 0
// (data + off[0], stride[0] bytes per row, n_in padded with zeros); plain_rows() checks that
// assumption and otherwise falls back to tiles. Quantized weights reach cuBLAS as dense F16 row
// tiles written by dequantize_matrix (each weight dequantized in fp32 exactly as
// core/dequantize, then rounded to F16). GEMM types: F32 (CUBLAS_COMPUTE_32F_PEDANTIC: no TF32,
// no reduced-precision reductions), F16, BF16, F16 for quantized. x is converted once per call
// to the GEMM type (round to nearest even); accumulation is fp32 throughout.
#include "backend/cuda/prefill_matmul.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/tuning.h"

namespace pelican::cuda {
namespace {

// Weight tile scratch: large enough that a tile GEMM fills the GPU even at n_tok = 512 (an
// [n_tok, rows] output with rows in the thousands), small enough to stay a fixed cost.
// The size is tuning prefill_tile_mib (128 MiB by default; PELICAN_PREFILL_TILE_MIB, 1 .. 1024), read at
// init.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS workspace (Hopper recommends 32 MiB)
constexpr int64_t kRowQuantum = 256;                  // tile rows are a multiple of this (when < n_out)

size_t tile_cap_bytes() { return static_cast<size_t>(cuda_tuning().prefill_tile_mib) << 20; }

DType tile_type(DType w) {
    switch (w) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
            return w;
        default:
            return DType::F16;
    }
}

size_t elem_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

cudaDataType_t cuda_type(DType t) {
    switch (t) {
        case DType::F32:
            return CUDA_R_32F;
        case DType::BF16:
            return CUDA_R_16BF;
        default:
            return CUDA_R_16F;
    }
}

// Dense rows of a plain-type matrix in device memory: W row r at base + r * ld elements.
// nullptr when the matrix is quantized or its layout is not dense rows (then use tiles).
const void* plain_rows(const GpuMatrix& m, int64_t* ld) {
    if (m.type != DType::F32 && m.type != DType::F16 && m.type != DType::BF16) return nullptr;
    const int64_t esize = static_cast<int64_t>(elem_bytes(m.type));
    const int64_t stride = m.stride[0];
    if (m.data == nullptr || stride % esize != 0 || stride / esize < m.n_in || m.off[0] % 16 != 0 ||
        m.off[0] + static_cast<size_t>(stride) * static_cast<size_t>(m.n_out) > m.bytes)
        return nullptr;
    *ld = stride / esize;
    return static_cast<const uint8_t*>(m.data) + m.off[0];
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "pelican: PrefillMatmul: %s\n", what);
    std::abort();
}

}  // namespace

bool PrefillMatmul::init(int64_t max_n_in, int64_t max_n_out, int64_t max_tok, cudaStream_t stream,
                         const char** err) {
    const auto set_err = [&](const char* m) {
        if (err) *err = m;
        return false;
    };
    if (handle_) return set_err("PrefillMatmul::init called twice");
    if (max_n_in <= 0 || max_n_out <= 0 || max_tok <= 0) return set_err("PrefillMatmul: empty shape bounds");
    max_n_in_ = max_n_in;
    max_n_out_ = max_n_out;
    max_tok_ = max_tok;

    const size_t n_in = static_cast<size_t>(max_n_in), n_out = static_cast<size_t>(max_n_out);
    // Room for the whole matrix in 2-byte elements when it is small, else the cap; always at
    // least min(n_out, kRowQuantum) fp32 rows.
    size_t tile = std::min(tile_cap_bytes(), n_out * n_in * 2);
    tile = std::max(tile, std::min<size_t>(n_out, kRowQuantum) * n_in * 4);
    w_tile_bytes_ = tile;
    x_conv_bytes_ = static_cast<size_t>(max_tok) * n_in * 2;
    workspace_bytes_ = kWorkspaceBytes;

    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return set_err("PrefillMatmul: cublasCreate failed");
    handle_ = h;
    if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS)
        return set_err("PrefillMatmul: cublasSetStream failed");
    if (cudaMalloc(&w_tile_, w_tile_bytes_) != cudaSuccess ||
        cudaMalloc(&x_conv_, x_conv_bytes_) != cudaSuccess ||
        cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess) {
        cudaGetLastError();
        return set_err("PrefillMatmul: out of GPU memory for the weight tile / activation scratch");
    }
    if (cublasSetWorkspace(h, workspace_, workspace_bytes_) != CUBLAS_STATUS_SUCCESS)
        return set_err("PrefillMatmul: cublasSetWorkspace failed");
    // Default math: no TF32 for fp32 (the F32 path also asks for the pedantic compute type).
    if (cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        return set_err("PrefillMatmul: cublasSetMathMode failed");
    return true;
}

PrefillMatmul::~PrefillMatmul() {
    if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
    if (w_tile_) cudaFree(w_tile_);
    if (x_conv_) cudaFree(x_conv_);
    if (workspace_) cudaFree(workspace_);
}

void PrefillMatmul::run(const GpuMatrix& w, const float* x, int64_t n_tok, float* y, cudaStream_t stream) {
    if (!handle_) fail("run before a successful init");
    if (n_tok <= 0 || w.n_out <= 0) return;
    if (n_tok > max_tok_ || w.n_in > max_n_in_ || w.n_in <= 0) {
        std::fprintf(stderr,
                     "pelican: PrefillMatmul: n_tok %lld / n_in %lld outside the init bounds %lld / %lld\n",
                     static_cast<long long>(n_tok), static_cast<long long>(w.n_in),
                     static_cast<long long>(max_tok_), static_cast<long long>(max_n_in_));
        std::abort();
    }
    if (!gpu_matmul_supported(w.type)) fail("unsupported weight type");
    auto* h = static_cast<cublasHandle_t>(handle_);
    PELICAN_CUBLAS_CHECK(cublasSetStream(h, stream));

    const DType tt = tile_type(w.type);
    const int64_t n_in = w.n_in, n_out = w.n_out;
    const size_t row_bytes = static_cast<size_t>(n_in) * elem_bytes(tt);
    int64_t rows = static_cast<int64_t>(w_tile_bytes_ / row_bytes);
    if (rows >= n_out) {
        rows = n_out;
    } else if (rows >= kRowQuantum) {  // balanced tiles of whole quanta (no tiny last GEMM)
        rows -= rows % kRowQuantum;
        const int64_t n_tiles = (n_out + rows - 1) / rows;
        const int64_t even = (n_out + n_tiles - 1) / n_tiles;
        rows = std::min(rows, (even + kRowQuantum - 1) / kRowQuantum * kRowQuantum);
    } else if (rows < 1) {
        fail("weight tile scratch holds no row");
    }

    const void* xb = x;
    if (tt != DType::F32) {
        convert_f32(x, x_conv_, tt, n_tok * n_in, stream);
        xb = x_conv_;
    }
    const cudaDataType_t ct = cuda_type(tt);
    const cublasComputeType_t compute = tt == DType::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f, beta = 0.0f;
    int64_t ld = 0;
    if (const void* wp = plain_rows(w, &ld)) {  // one GEMM straight from the resident weights
        PELICAN_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out),
                                          static_cast<int>(n_tok), static_cast<int>(n_in), &alpha, wp, ct,
                                          static_cast<int>(ld), xb, ct, static_cast<int>(n_in), &beta, y,
                                          CUDA_R_32F, static_cast<int>(n_out), compute, CUBLAS_GEMM_DEFAULT));
        return;
    }
    for (int64_t row0 = 0; row0 < n_out; row0 += rows) {
        const int64_t r = std::min(rows, n_out - row0);
        dequantize_matrix(w, row0, r, w_tile_, tt, stream);
        PELICAN_CUBLAS_CHECK(cublasGemmEx(
            h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(r), static_cast<int>(n_tok), static_cast<int>(n_in),
            &alpha, w_tile_, ct, static_cast<int>(n_in), xb, ct, static_cast<int>(n_in), &beta, y + row0,
            CUDA_R_32F, static_cast<int>(n_out), compute, CUBLAS_GEMM_DEFAULT));
    }
}

}  // namespace pelican::cuda
