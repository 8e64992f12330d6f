// GpuMatrix: upload (GGUF rows repacked on the host into the GEMV layout of gemv_params.cuh),
// free, and dequantization back to F32/F16/BF16 rows (for prefill tiles).
#include "backend/cuda/gpu_matrix.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/gemv_impl.cuh"
#include "core/blocks.h"

namespace pelican::cuda {
namespace {

using detail::GemvLayout;

// GGUF bytes of one row of n_in elements (n_in a multiple of the block size).
int64_t gguf_row_bytes(DType t, int64_t n_in) {
    switch (t) {
        case DType::F32:
            return n_in * 4;
        case DType::F16:
        case DType::BF16:
            return n_in * 2;
        case DType::Q4_0:
            return n_in / 32 * static_cast<int64_t>(sizeof(BlockQ4_0));
        case DType::Q8_0:
            return n_in / 32 * static_cast<int64_t>(sizeof(BlockQ8_0));
        case DType::Q4_K:
            return n_in / 256 * static_cast<int64_t>(sizeof(BlockQ4_K));
        case DType::Q6_K:
            return n_in / 256 * static_cast<int64_t>(sizeof(BlockQ6_K));
        default:
            return 0;
    }
}

// Destination of one row: plane k's row start.
struct DstRow {
    uint8_t* p[4];
};

void repack_row(DType t, int64_t n_in, const uint8_t* src, const DstRow& d) {
    switch (t) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
            std::memcpy(d.p[0], src, static_cast<size_t>(gguf_row_bytes(t, n_in)));
            return;
        case DType::Q4_0:
            for (int64_t b = 0; b < n_in / 32; ++b) {
                BlockQ4_0 blk;
                std::memcpy(&blk, src + b * sizeof(BlockQ4_0), sizeof blk);
                std::memcpy(d.p[0] + 16 * b, blk.qs, 16);
                std::memcpy(d.p[1] + 2 * b, &blk.d, 2);
            }
            return;
        case DType::Q8_0:
            for (int64_t b = 0; b < n_in / 32; ++b) {
                BlockQ8_0 blk;
                std::memcpy(&blk, src + b * sizeof(BlockQ8_0), sizeof blk);
                std::memcpy(d.p[0] + 16 * b, blk.qs, 16);
                std::memcpy(d.p[1] + 16 * b, blk.qs + 16, 16);
                std::memcpy(d.p[2] + 2 * b, &blk.d, 2);
            }
            return;
        case DType::Q4_K:
            for (int64_t sb = 0; sb < n_in / 256; ++sb) {
                BlockQ4_K blk;
                std::memcpy(&blk, src + sb * sizeof(BlockQ4_K), sizeof blk);
                std::memcpy(d.p[2] + 16 * sb, &blk, 16);  // d, dmin, scales[12]
                for (int c = 0; c < 4; ++c) {
                    std::memcpy(d.p[0] + 16 * (4 * sb + c), blk.qs + 32 * c, 16);
                    std::memcpy(d.p[1] + 16 * (4 * sb + c), blk.qs + 32 * c + 16, 16);
                }
            }
            return;
        case DType::Q6_K:
            for (int64_t sb = 0; sb < n_in / 256; ++sb) {
                BlockQ6_K blk;
                std::memcpy(&blk, src + sb * sizeof(BlockQ6_K), sizeof blk);
                uint8_t q[256];  // 6-bit codes in element order (blocks.h)
                for (int h = 0; h < 2; ++h) {
                    const uint8_t* ql = blk.ql + 64 * h;
                    const uint8_t* qh = blk.qh + 32 * h;
                    for (int l = 0; l < 32; ++l) {
                        q[128 * h + l] = static_cast<uint8_t>((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4);
                        q[128 * h + l + 32] =
                            static_cast<uint8_t>((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
                        q[128 * h + l + 64] = static_cast<uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                        q[128 * h + l + 96] =
                            static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
                    }
                }
                for (int k = 0; k < 8; ++k) {
                    const uint8_t* qb = q + 32 * k;
                    const int64_t blk32 = 8 * sb + k;
                    uint8_t nib[16];
                    for (int j = 0; j < 16; ++j)
                        nib[j] = static_cast<uint8_t>((qb[j] & 15) | (qb[j + 16] & 15) << 4);
                    std::memcpy(d.p[0] + 16 * blk32, nib, 16);
                    for (int half = 0; half < 2; ++half) {
                        uint32_t word = 0;
                        for (int g = 0; g < 4; ++g)
                            for (int i = 0; i < 4; ++i)
                                word |= static_cast<uint32_t>((qb[16 * half + 4 * g + i] >> 4) & 3)
                                        << (8 * i + 2 * g);
                        std::memcpy(d.p[1] + 8 * blk32 + 4 * half, &word, 4);
                    }
                }
                std::memcpy(d.p[2] + 16 * sb, blk.scales, 16);
                std::memcpy(d.p[3] + 2 * sb, &blk.d, 2);
            }
            return;
        default:
            return;
    }
}

// ---- dequantization -------------------------------------------------------------------------------

struct DequantParams {
    const uint8_t* w;
    size_t off[4];
    int64_t stride[4];
    int64_t n_in;
    int64_t row0, n_rows;
    int64_t groups;  // 8-element groups per row
    void* out;
    bool vec;  // 16-byte stores of 8 outputs are aligned
};

__device__ __forceinline__ const uint8_t* drow(const DequantParams& p, int k, int64_t row) {
    return p.w + p.off[k] + row * p.stride[k];
}

// v[0..8) = W[row, e0 .. e0+8) exactly as core/dequantize.cpp (separate fp32 roundings, no fma).
template <DType WT>
__device__ void values8(const DequantParams& p, int64_t row, int64_t e0, float (&v)[8]) {
    if constexpr (WT == DType::F32 || WT == DType::F16 || WT == DType::BF16) {
        const uint8_t* r = drow(p, 0, row);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int64_t e = e0 + k;
            if (e >= p.n_in) {
                v[k] = 0.0f;
            } else if constexpr (WT == DType::F32) {
                v[k] = reinterpret_cast<const float*>(r)[e];
            } else {
                const unsigned short h = reinterpret_cast<const unsigned short*>(r)[e];
                v[k] =
                    WT == DType::F16 ? __half2float(__ushort_as_half(h)) : __uint_as_float(uint32_t{h} << 16);
            }
        }
    } else if constexpr (WT == DType::Q4_0 || WT == DType::Q8_0) {
        const int64_t b = e0 / 32;
        const int j0 = static_cast<int>(e0 % 32);
        const int plane = WT == DType::Q8_0 ? j0 / 16 : 0;
        const uint2 raw = *reinterpret_cast<const uint2*>(drow(p, plane, row) + 16 * b + (j0 & 15));
        const float d = detail::half_bits_to_float(
            *reinterpret_cast<const unsigned short*>(drow(p, WT == DType::Q8_0 ? 2 : 1, row) + 2 * b));
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const uint32_t byte = ((k < 4 ? raw.x : raw.y) >> (8 * (k & 3))) & 0xffu;
            if constexpr (WT == DType::Q4_0) {
                const int q = static_cast<int>((byte >> (j0 >= 16 ? 4 : 0)) & 15u) - 8;
                v[k] = __fmul_rn(static_cast<float>(q), d);
            } else {
                v[k] = __fmul_rn(static_cast<float>(static_cast<int8_t>(byte)), d);
            }
        }
    } else if constexpr (WT == DType::Q4_K) {
        const int64_t u = e0 / 64;
        const int w = static_cast<int>(e0 % 64), sub = w / 32, l = w % 32;
        const uint2 raw = *reinterpret_cast<const uint2*>(drow(p, l < 16 ? 0 : 1, row) + 16 * u + (l & 15));
        const uint4 h = *reinterpret_cast<const uint4*>(drow(p, 2, row) + 16 * (u / 4));
        int sc0, m0, sc1, m1;
        detail::q4k_scale_min(h.y, h.z, h.w, static_cast<int>(u & 3), sc0, m0, sc1, m1);
        const float d = detail::half_bits_to_float(h.x), dmin = detail::half_bits_to_float(h.x >> 16);
        const float dl = __fmul_rn(d, static_cast<float>(sub ? sc1 : sc0));
        const float ml = __fmul_rn(dmin, static_cast<float>(sub ? m1 : m0));
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const uint32_t byte = ((k < 4 ? raw.x : raw.y) >> (8 * (k & 3))) & 0xffu;
            const uint32_t q = (byte >> (4 * sub)) & 15u;
            v[k] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
        }
    } else {  // Q6_K
        const int64_t kb = e0 / 32;
        const int w = static_cast<int>(e0 % 32), half = w / 16, l = w % 16;
        const uint2 raw = *reinterpret_cast<const uint2*>(drow(p, 0, row) + 16 * kb + l);
        const uint32_t qh = *reinterpret_cast<const uint32_t*>(drow(p, 1, row) + 8 * kb + 4 * half);
        const int sc = static_cast<int8_t>(*(drow(p, 2, row) + 2 * kb + half));
        const float d = detail::half_bits_to_float(
            *reinterpret_cast<const unsigned short*>(drow(p, 3, row) + 2 * (kb / 8)));
        const float dsc = __fmul_rn(d, static_cast<float>(sc));
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const uint32_t byte = ((k < 4 ? raw.x : raw.y) >> (8 * (k & 3))) & 0xffu;
            const int j = l + k, g = j / 4, i = j % 4;
            const int q =
                static_cast<int>(((byte >> (4 * half)) & 15u) | ((qh >> (8 * i + 2 * g)) & 3u) << 4);
            v[k] = __fmul_rn(dsc, static_cast<float>(q - 32));
        }
    }
}

template <typename O>
__device__ __forceinline__ O to_out(float v) {
    if constexpr (sizeof(O) == 4)
        return v;
    else if constexpr (std::is_same_v<O, __half>)
        return __float2half_rn(v);
    else
        return __float2bfloat16_rn(v);
}
template <typename O>
__device__ __forceinline__ uint32_t out_bits(float v) {
    if constexpr (std::is_same_v<O, __half>)
        return __half_as_ushort(__float2half_rn(v));
    else
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

template <DType WT, typename O>
__global__ void dequant_kernel(const DequantParams p) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= p.n_rows * p.groups) return;
    const int64_t r = idx / p.groups, e0 = (idx % p.groups) * 8;
    float v[8];
    values8<WT>(p, p.row0 + r, e0, v);
    O* out = static_cast<O*>(p.out) + r * p.n_in + e0;
    if (p.vec) {
        if constexpr (sizeof(O) == 4) {
            reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
            reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
            const uint4 packed = make_uint4(
                out_bits<O>(v[0]) | out_bits<O>(v[1]) << 16, out_bits<O>(v[2]) | out_bits<O>(v[3]) << 16,
                out_bits<O>(v[4]) | out_bits<O>(v[5]) << 16, out_bits<O>(v[6]) | out_bits<O>(v[7]) << 16);
            *reinterpret_cast<uint4*>(out) = packed;
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (e0 + k < p.n_in) out[k] = to_out<O>(v[k]);
    }
}

template <DType WT>
void dequant_launch(const DequantParams& p, DType out_type, cudaStream_t stream) {
    const int64_t n = p.n_rows * p.groups;
    const int threads = 256;
    const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
    switch (out_type) {
        case DType::F32:
            dequant_kernel<WT, float><<<blocks, threads, 0, stream>>>(p);
            break;
        case DType::F16:
            dequant_kernel<WT, __half><<<blocks, threads, 0, stream>>>(p);
            break;
        default:
            dequant_kernel<WT, __nv_bfloat16><<<blocks, threads, 0, stream>>>(p);
            break;
    }
    PELICAN_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool gpu_matmul_supported(DType t) {
    switch (t) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_K:
        case DType::Q6_K:
            return true;
        default:
            return false;
    }
}

bool upload_matrix(DType type, int64_t n_in, const HostRows* parts, int n_parts, GpuMatrix& out,
                   cudaStream_t stream, const char** err) {
    auto fail = [&](const char* e) {
        if (err) *err = e;
        return false;
    };
    GemvLayout l;
    if (!gpu_matmul_supported(type) || !detail::gemv_layout(type, n_in, &l))
        return fail("weight type not supported by the GPU matmul (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
    if (n_in <= 0 || n_in % l.block_elems != 0)
        return fail("n_in is not a positive multiple of the type's block size");
    if (detail::gemv_token_smem(type, n_in) > detail::kGemvMaxSmem || n_in > INT_MAX / 2)
        return fail("n_in too large for the GPU GEMV");
    if (parts == nullptr || n_parts < 1) return fail("no parts to upload");
    const int64_t row_bytes = gguf_row_bytes(type, n_in);
    int64_t n_out = 0;
    for (int i = 0; i < n_parts; ++i) {
        if (parts[i].n_rows < 0) return fail("negative row count");
        if (parts[i].n_rows > 0 && parts[i].data == nullptr) return fail("null host rows");
        if (parts[i].n_rows > 1 && parts[i].row_stride < static_cast<size_t>(row_bytes))
            return fail("row stride smaller than the row size");
        n_out += parts[i].n_rows;
    }
    if (n_out < 1) return fail("matrix has no rows");
    if (n_out > INT_MAX / 2) return fail("too many rows for the GPU GEMV");

    GpuMatrix m;
    m.type = type;
    m.n_in = n_in;
    m.n_out = n_out;
    size_t end = 0;
    for (int k = 0; k < l.n_planes; ++k) {
        m.off[k] = static_cast<size_t>(detail::round_up(static_cast<int64_t>(end), 256));
        m.stride[k] = l.stride[k];
        end = m.off[k] + static_cast<size_t>(n_out * l.stride[k]);
        m.read_bytes += static_cast<size_t>(n_out * l.stride[k]);
    }
    m.bytes = end;

    std::vector<uint8_t> host(m.bytes, 0);                 // zero padding for the float types
    std::vector<std::pair<const uint8_t*, int64_t>> rows;  // (source, destination row)
    rows.reserve(static_cast<size_t>(n_out));
    int64_t r = 0;
    for (int i = 0; i < n_parts; ++i)
        for (int64_t j = 0; j < parts[i].n_rows; ++j)
            rows.emplace_back(static_cast<const uint8_t*>(parts[i].data) + j * parts[i].row_stride, r++);
    auto work = [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) {
            DstRow d{};
            for (int k = 0; k < l.n_planes; ++k)
                d.p[k] = host.data() + m.off[k] + rows[i].second * l.stride[k];
            repack_row(type, n_in, rows[i].first, d);
        }
    };
    const int64_t total_bytes = n_out * row_bytes;
    const int n_threads = total_bytes < (8 << 20)
                              ? 1
                              : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
    if (n_threads == 1) {
        work(0, n_out);
    } else {
        std::vector<std::thread> pool;
        for (int i = 0; i < n_threads; ++i)
            pool.emplace_back(work, n_out * i / n_threads, n_out * (i + 1) / n_threads);
        for (auto& th : pool) th.join();
    }

    if (cudaMalloc(&m.data, m.bytes) != cudaSuccess) {
        cudaGetLastError();
        return fail("cudaMalloc failed for a GPU matrix (out of device memory?)");
    }
    if (cudaMemcpyAsync(m.data, host.data(), m.bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(m.data);
        return fail("copying a GPU matrix to the device failed");
    }
    detail::gemv_prepare(type);
    free_matrix(out);
    out = m;
    return true;
}

const float* gpu_matrix_f32_rows(const GpuMatrix& m) {
    if (m.type != DType::F32 || m.data == nullptr) return nullptr;
    return reinterpret_cast<const float*>(static_cast<const uint8_t*>(m.data) + m.off[0]);
}

int64_t gpu_matrix_f32_row_floats(const GpuMatrix& m) {
    return m.type == DType::F32 && m.data != nullptr ? m.stride[0] / 4 : 0;  // gemv_params.cuh: F32 plane 0
}

void free_matrix(GpuMatrix& m) {
    if (m.data != nullptr) PELICAN_CUDA_CHECK(cudaFree(m.data));
    m = GpuMatrix{};
}

void dequantize_matrix(const GpuMatrix& m, int64_t row0, int64_t n_rows, void* out, DType out_type,
                       cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (m.data == nullptr || row0 < 0 || row0 + n_rows > m.n_out || out == nullptr ||
        (out_type != DType::F32 && out_type != DType::F16 && out_type != DType::BF16)) {
        std::fprintf(stderr,
                     "pelican: dequantize_matrix: bad arguments (rows %lld+%lld of %lld, out type %u)\n",
                     static_cast<long long>(row0), static_cast<long long>(n_rows),
                     static_cast<long long>(m.n_out), static_cast<unsigned>(out_type));
        std::abort();
    }
    DequantParams p{};
    p.w = static_cast<const uint8_t*>(m.data);
    for (int k = 0; k < 4; ++k) {
        p.off[k] = m.off[k];
        p.stride[k] = m.stride[k];
    }
    p.n_in = m.n_in;
    p.row0 = row0;
    p.n_rows = n_rows;
    p.groups = (m.n_in + 7) / 8;
    p.out = out;
    const int64_t esize = out_type == DType::F32 ? 4 : 2;
    p.vec = m.n_in % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 && (m.n_in * esize) % 16 == 0;
    switch (m.type) {
        case DType::F32:
            dequant_launch<DType::F32>(p, out_type, stream);
            break;
        case DType::F16:
            dequant_launch<DType::F16>(p, out_type, stream);
            break;
        case DType::BF16:
            dequant_launch<DType::BF16>(p, out_type, stream);
            break;
        case DType::Q4_0:
            dequant_launch<DType::Q4_0>(p, out_type, stream);
            break;
        case DType::Q8_0:
            dequant_launch<DType::Q8_0>(p, out_type, stream);
            break;
        case DType::Q4_K:
            dequant_launch<DType::Q4_K>(p, out_type, stream);
            break;
        case DType::Q6_K:
            dequant_launch<DType::Q6_K>(p, out_type, stream);
            break;
        default:
            std::fprintf(stderr, "pelican: dequantize_matrix: unsupported type %u\n",
                         static_cast<unsigned>(m.type));
            std::abort();
    }
}

}  // namespace pelican::cuda
