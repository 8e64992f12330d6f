// Embedding lookup (see elementwise.h get_rows): one thread block per token, each thread writes 4
// consecutive outputs (one float4 store when aligned). Values equal core/dequantize.cpp bit for
// bit: the same fp32 operations in the same order, with __fmul_rn / __fsub_rn so nvcc cannot
// contract them into FMAs (the host reference is built without FMA), then one fp32 multiply by
// scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.h"
#include "core/blocks.h"

namespace pelican::cuda {
namespace {

__device__ __forceinline__ float h2f(const uint8_t* p) {  // fp16 bits at a 1-byte aligned address
    const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(h));
}

// Element j of a GGUF row of type T (row = start of the row's bytes).
template <DType T>
__device__ __forceinline__ float row_elem(const uint8_t* row, int64_t j);

template <>
__device__ __forceinline__ float row_elem<DType::F32>(const uint8_t* row, int64_t j) {
    float v;
    memcpy(&v, row + 4 * j, 4);
    return v;
}
template <>
__device__ __forceinline__ float row_elem<DType::F16>(const uint8_t* row, int64_t j) {
    return h2f(row + 2 * j);
}
template <>
__device__ __forceinline__ float row_elem<DType::BF16>(const uint8_t* row, int64_t j) {
    const uint8_t* p = row + 2 * j;
    return __uint_as_float(static_cast<uint32_t>(p[0] | (p[1] << 8)) << 16);
}
template <>
__device__ __forceinline__ float row_elem<DType::Q8_0>(const uint8_t* row, int64_t j) {
    const uint8_t* b = row + (j / kQK4_0) * sizeof(BlockQ8_0);
    const int8_t q = static_cast<int8_t>(b[offsetof(BlockQ8_0, qs) + j % kQK4_0]);
    return __fmul_rn(static_cast<float>(q), h2f(b));  // float(qs) * d
}
template <>
__device__ __forceinline__ float row_elem<DType::Q4_0>(const uint8_t* row, int64_t j) {
    const uint8_t* b = row + (j / kQK4_0) * sizeof(BlockQ4_0);
    const int e = static_cast<int>(j % kQK4_0);
    const uint8_t byte = b[offsetof(BlockQ4_0, qs) + e % 16];
    const int q = (e < 16 ? (byte & 15) : (byte >> 4)) - 8;
    return __fmul_rn(static_cast<float>(q), h2f(b));  // float(q - 8) * d
}
template <>
__device__ __forceinline__ float row_elem<DType::Q4_K>(const uint8_t* row, int64_t j) {
    const uint8_t* b = row + (j / kQK_K) * sizeof(BlockQ4_K);
    const int e = static_cast<int>(j % kQK_K);
    const int c = e / 64, within = e % 64, l = within % 32;
    const int sub = 2 * c + (within >= 32 ? 1 : 0);
    const uint8_t* s = b + offsetof(BlockQ4_K, scales);
    int sc, m;
    if (sub < 4) {
        sc = s[sub] & 63;
        m = s[sub + 4] & 63;
    } else {
        sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
        m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
    }
    const uint8_t byte = b[offsetof(BlockQ4_K, qs) + 32 * c + l];
    const int q = within < 32 ? (byte & 15) : (byte >> 4);
    const float d = h2f(b + offsetof(BlockQ4_K, d)), dmin = h2f(b + offsetof(BlockQ4_K, dmin));
    const float dl = __fmul_rn(d, static_cast<float>(sc)), ml = __fmul_rn(dmin, static_cast<float>(m));
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);  // d*sc*q - dmin*m
}
template <>
__device__ __forceinline__ float row_elem<DType::Q6_K>(const uint8_t* row, int64_t j) {
    const uint8_t* b = row + (j / kQK_K) * sizeof(BlockQ6_K);
    const int e = static_cast<int>(j % kQK_K);
    const int h = e / 128, r = e % 128, quad = r / 32, l = r % 32;
    const uint8_t lq = b[offsetof(BlockQ6_K, ql) + 64 * h + l + (quad & 1) * 32];
    const int lo = quad < 2 ? (lq & 15) : (lq >> 4);
    const int hi = (b[offsetof(BlockQ6_K, qh) + 32 * h + l] >> (2 * quad)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    const int sc = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * h + l / 16 + 2 * quad]);
    const float d = h2f(b + offsetof(BlockQ6_K, d));
    return __fmul_rn(__fmul_rn(d, static_cast<float>(sc)), static_cast<float>(q));  // d * sc * (q - 32)
}

// out [n, n_embd]; block t handles token t; each thread 4 consecutive elements per step.
template <DType T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ table, int64_t n_embd, size_t row_stride,
                                const int32_t* __restrict__ ids, float scale, float* __restrict__ out) {
    const int64_t t = blockIdx.x;
    const uint8_t* row = table + static_cast<size_t>(ids[t]) * row_stride;
    float* o = out + t * n_embd;
    const bool vec = (n_embd % 4 == 0) && (reinterpret_cast<uintptr_t>(out) & 15u) == 0;
    for (int64_t j = 4 * static_cast<int64_t>(threadIdx.x); j < n_embd;
         j += 4 * static_cast<int64_t>(blockDim.x)) {
        if (vec) {
            float4 v;
            v.x = __fmul_rn(scale, row_elem<T>(row, j));
            v.y = __fmul_rn(scale, row_elem<T>(row, j + 1));
            v.z = __fmul_rn(scale, row_elem<T>(row, j + 2));
            v.w = __fmul_rn(scale, row_elem<T>(row, j + 3));
            *reinterpret_cast<float4*>(o + j) = v;
        } else {
            for (int64_t k = j; k < j + 4 && k < n_embd; ++k) o[k] = __fmul_rn(scale, row_elem<T>(row, k));
        }
    }
}

template <DType T>
void launch(const void* table, int64_t n_embd, size_t row_stride, const int32_t* ids, int n, float scale,
            float* out, cudaStream_t stream) {
    int threads = 256;
    if (n_embd <= 512) threads = 128;
    get_rows_kernel<T><<<static_cast<unsigned>(n), threads, 0, stream>>>(static_cast<const uint8_t*>(table),
                                                                         n_embd, row_stride, ids, scale, out);
    PELICAN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void get_rows(const void* table, DType type, int64_t n_embd, size_t row_stride, const int32_t* ids, int n,
              float scale, float* out, cudaStream_t stream) {
    if (n <= 0 || n_embd <= 0) return;
    switch (type) {
        case DType::F32:
            return launch<DType::F32>(table, n_embd, row_stride, ids, n, scale, out, stream);
        case DType::F16:
            return launch<DType::F16>(table, n_embd, row_stride, ids, n, scale, out, stream);
        case DType::BF16:
            return launch<DType::BF16>(table, n_embd, row_stride, ids, n, scale, out, stream);
        case DType::Q8_0:
            return launch<DType::Q8_0>(table, n_embd, row_stride, ids, n, scale, out, stream);
        case DType::Q4_0:
            return launch<DType::Q4_0>(table, n_embd, row_stride, ids, n, scale, out, stream);
        case DType::Q4_K:
            return launch<DType::Q4_K>(table, n_embd, row_stride, ids, n, scale, out, stream);
        case DType::Q6_K:
            return launch<DType::Q6_K>(table, n_embd, row_stride, ids, n, scale, out, stream);
        default:
            std::fprintf(stderr, "pelican: cuda::get_rows: unsupported table type %u\n",
                         static_cast<unsigned>(type));
            std::abort();
    }
}

}  // namespace pelican::cuda
