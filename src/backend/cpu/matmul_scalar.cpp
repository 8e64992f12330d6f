// Portable matmul kernels: the fallback on CPUs without AVX2 and for layouts a SIMD table lacks.
// Weight blocks are dequantized with the reference converters; quantized weights are multiplied
// with the quantized activations (so the result matches ref::matmul_act_rounded).
#include <algorithm>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "core/blocks.h"
#include "core/dequantize.h"
#include "core/dtype.h"
#include "ops/act_quant.h"

namespace pelican::cpu::detail {
namespace {

constexpr int64_t kTokTile = 8;

// kRows, any type: dequantize one weight block (<= 256 elements) at a time, dot it with the
// activations of up to kTokTile tokens. Quantized weights step by the activation block; float
// weights by 256 elements (the last step may be shorter: block_elems is 1).
template <bool kQuantActs>
void rows_kernel(const MatmulArgs& a, DType type, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    const DTypeInfo& info = dtype_info(type);
    const int64_t step = kQuantActs ? act_quant_block(type) : 256;
    const int64_t n_act_blocks = kQuantActs ? a.n_in / step : 0;
    float w[256];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wr = a.w + r * a.w_stride;
        for (int64_t tt = t0; tt < t1; tt += kTokTile) {
            const int64_t nt = std::min(kTokTile, t1 - tt);
            float acc[kTokTile] = {};
            for (int64_t i0 = 0; i0 < a.n_in; i0 += step) {
                const int64_t len = std::min(step, a.n_in - i0);
                info.to_float(wr + i0 / info.block_elems * info.block_bytes, w, len);
                for (int64_t t = 0; t < nt; ++t) {
                    const int64_t tok = tt + t;
                    float dot = 0.0f;
                    if constexpr (kQuantActs) {
                        const int8_t* q = a.xq + tok * a.n_in + i0;
                        for (int64_t j = 0; j < len; ++j) dot += w[j] * static_cast<float>(q[j]);
                        acc[t] += a.xd[tok * n_act_blocks + i0 / step] * dot;
                    } else {
                        const float* x = a.x + tok * a.n_in + i0;
                        for (int64_t j = 0; j < len; ++j) dot += w[j] * x[j];
                        acc[t] += dot;
                    }
                }
            }
            for (int64_t t = 0; t < nt; ++t) a.y[(tt + t) * a.n_out + r] = acc[t];
        }
    }
}

template <DType kType>
void rows_kernel_t(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    constexpr bool kFloat = kType == DType::F32 || kType == DType::F16 || kType == DType::BF16;
    rows_kernel<!kFloat>(a, kType, r0, r1, t0, t1);
}

// kInterleave16 (Q4_0 / Q8_0): rebuild each row's GGUF block, then as rows_kernel.
template <typename Block, int kWords>
void ilv_kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    const int64_t nb = a.n_in / 32;
    const ToFloatFn to_float = kWords == 4 ? ref::dequantize_q4_0 : ref::dequantize_q8_0;
    float w[32];
    for (int64_t r = r0; r < std::min(r1, a.n_out); ++r) {
        const uint8_t* g = a.w + (r / kIlvRows) * a.w_stride;
        const int rr = static_cast<int>(r % kIlvRows);
        for (int64_t tt = t0; tt < t1; tt += kTokTile) {
            const int64_t nt = std::min(kTokTile, t1 - tt);
            float acc[kTokTile] = {};
            for (int64_t b = 0; b < nb; ++b) {
                Block blk;
                std::memcpy(&blk.d, g + ilv_scale_offset(b, kWords) + 2 * rr, 2);
                const uint8_t* quants = g + ilv_quant_offset(b, kWords);
                for (int c = 0; c < kWords; ++c)
                    std::memcpy(reinterpret_cast<uint8_t*>(blk.qs) + 4 * c, quants + (c * kIlvRows + rr) * 4,
                                4);
                to_float(&blk, w, 32);
                for (int64_t t = 0; t < nt; ++t) {
                    const int8_t* q = a.xq + (tt + t) * a.n_in + b * 32;
                    float dot = 0.0f;
                    for (int j = 0; j < 32; ++j) dot += w[j] * static_cast<float>(q[j]);
                    acc[t] += a.xd[(tt + t) * nb + b] * dot;
                }
            }
            for (int64_t t = 0; t < nt; ++t) a.y[(tt + t) * a.n_out + r] = acc[t];
        }
    }
}

MatmulKernel find(WType t, WLayout layout) {
    if (layout == WLayout::kInterleave16) {
        if (t == WType::Q4_0) return ilv_kernel<BlockQ4_0, 4>;
        if (t == WType::Q8_0) return ilv_kernel<BlockQ8_0, 8>;
        return nullptr;
    }
    switch (t) {
        case WType::F32:
            return rows_kernel_t<DType::F32>;
        case WType::F16:
            return rows_kernel_t<DType::F16>;
        case WType::BF16:
            return rows_kernel_t<DType::BF16>;
        case WType::Q4_0:
            return rows_kernel_t<DType::Q4_0>;
        case WType::Q8_0:
            return rows_kernel_t<DType::Q8_0>;
        case WType::Q4_K:
            return rows_kernel_t<DType::Q4_K>;
        case WType::Q5_K:
            return rows_kernel_t<DType::Q5_K>;
        case WType::Q6_K:
            return rows_kernel_t<DType::Q6_K>;
    }
    return nullptr;
}

}  // namespace

const KernelTable& scalar_kernels() {
    static const KernelTable table{find, ref::quantize_act_q32, ref::quantize_act_q256};
    return table;
}

}  // namespace pelican::cpu::detail
