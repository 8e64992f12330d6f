// Scalar dequantizers (block layouts in core/blocks.h) and the dispatching entry points.
// Blocks are copied out with memcpy, so src needs no alignment.
#include "core/dequantize.h"

#include <cstring>

#include "core/blocks.h"
#include "core/float_convert.h"

namespace pelican {
namespace {

// Element-wise conversion of plain types: reads T with memcpy (no alignment needed).
template <typename T, typename Fn>
void convert_elems(const void* src, float* dst, int64_t n, Fn to_f32) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, p + i * sizeof(T), sizeof(T));
        dst[i] = to_f32(v);
    }
}

// Calls fn(block, y) for each of the n / QK blocks of type B; y points at the block's QK outputs.
template <typename B, int QK, typename Fn>
void for_blocks(const void* src, float* dst, int64_t n, Fn fn) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n / QK; ++i) {
        B b;
        std::memcpy(&b, p + i * sizeof(B), sizeof(B));
        fn(b, dst + i * QK);
    }
}

}  // namespace

namespace ref {

void dequantize_f32(const void* src, float* dst, int64_t n) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequantize_f16(const void* src, float* dst, int64_t n) {
    convert_elems<uint16_t>(src, dst, n, f16_to_f32);
}
void dequantize_bf16(const void* src, float* dst, int64_t n) {
    convert_elems<uint16_t>(src, dst, n, bf16_to_f32);
}
void dequantize_f8_e4m3(const void* src, float* dst, int64_t n) {
    convert_elems<uint8_t>(src, dst, n, e4m3_to_f32);
}
void dequantize_f64(const void* src, float* dst, int64_t n) {
    convert_elems<double>(src, dst, n, [](double v) { return static_cast<float>(v); });
}
void dequantize_i8(const void* src, float* dst, int64_t n) {
    convert_elems<int8_t>(src, dst, n, [](int8_t v) { return static_cast<float>(v); });
}
void dequantize_i16(const void* src, float* dst, int64_t n) {
    convert_elems<int16_t>(src, dst, n, [](int16_t v) { return static_cast<float>(v); });
}
void dequantize_i32(const void* src, float* dst, int64_t n) {
    convert_elems<int32_t>(src, dst, n, [](int32_t v) { return static_cast<float>(v); });
}
void dequantize_i64(const void* src, float* dst, int64_t n) {
    convert_elems<int64_t>(src, dst, n, [](int64_t v) { return static_cast<float>(v); });
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ4_0, kQK4_0>(src, dst, n, [](const BlockQ4_0& b, float* y) {
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            y[j] = static_cast<float>((b.qs[j] & 15) - 8) * d;
            y[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
        }
    });
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ4_1, kQK4_0>(src, dst, n, [](const BlockQ4_1& b, float* y) {
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            y[j] = static_cast<float>(b.qs[j] & 15) * d + m;
            y[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
        }
    });
}

namespace {
uint32_t load_u32(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
// 5-bit values of a Q5_0/Q5_1 block (0..31), element order.
void unpack_q5(const uint8_t* qh4, const uint8_t* qs, int* q) {
    const uint32_t qh = load_u32(qh4);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
        q[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
        q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    }
}
}  // namespace

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ5_0, kQK4_0>(src, dst, n, [](const BlockQ5_0& b, float* y) {
        int q[kQK4_0];
        unpack_q5(b.qh, b.qs, q);
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK4_0; ++i) y[i] = static_cast<float>(q[i] - 16) * d;
    });
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ5_1, kQK4_0>(src, dst, n, [](const BlockQ5_1& b, float* y) {
        int q[kQK4_0];
        unpack_q5(b.qh, b.qs, q);
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        for (int i = 0; i < kQK4_0; ++i) y[i] = static_cast<float>(q[i]) * d + m;
    });
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ8_0, kQK4_0>(src, dst, n, [](const BlockQ8_0& b, float* y) {
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK4_0; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
    });
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ8_1, kQK4_0>(src, dst, n, [](const BlockQ8_1& b, float* y) {
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK4_0; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
    });
}

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ2_K, kQK_K>(src, dst, n, [](const BlockQ2_K& b, float* y) {
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* q = b.qs + 32 * h;
            for (int k = 0; k < 4; ++k) {
                const int shift = 2 * k;
                for (int part = 0; part < 2; ++part) {  // two sub-blocks of 16 per shift
                    const uint8_t s = b.scales[8 * h + 2 * k + part];
                    const float dl = d * static_cast<float>(s & 15), ml = dmin * static_cast<float>(s >> 4);
                    for (int l = 0; l < 16; ++l) {
                        const int v = (q[16 * part + l] >> shift) & 3;
                        y[128 * h + 32 * k + 16 * part + l] = dl * static_cast<float>(v) - ml;
                    }
                }
            }
        }
    });
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ3_K, kQK_K>(src, dst, n, [](const BlockQ3_K& b, float* y) {
        const float d = f16_to_f32(b.d);
        int sc[16];
        for (int i = 0; i < 16; ++i) {
            const int low = i < 8 ? (b.scales[i] & 15) : (b.scales[i - 8] >> 4);
            const int high = (b.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
            sc[i] = (low | high << 4) - 32;
        }
        for (int h = 0; h < 2; ++h) {
            const uint8_t* q = b.qs + 32 * h;
            for (int k = 0; k < 4; ++k) {
                const int shift = 2 * k;
                const int hbit = 4 * h + k;
                for (int part = 0; part < 2; ++part) {
                    const float dl = d * static_cast<float>(sc[8 * h + 2 * k + part]);
                    for (int l = 0; l < 16; ++l) {
                        const int idx = 16 * part + l;
                        const int lo = (q[idx] >> shift) & 3;
                        const int v = lo - (((b.hmask[idx] >> hbit) & 1) ? 0 : 4);
                        y[128 * h + 32 * k + idx] = dl * static_cast<float>(v);
                    }
                }
            }
        }
    });
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ4_K, kQK_K>(src, dst, n, [](const BlockQ4_K& b, float* y) {
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int c = 0; c < 4; ++c) {
            uint8_t sc0, m0, sc1, m1;
            unpack_k_scale_min(b.scales, 2 * c, &sc0, &m0);
            unpack_k_scale_min(b.scales, 2 * c + 1, &sc1, &m1);
            const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
            const uint8_t* q = b.qs + 32 * c;
            for (int l = 0; l < 32; ++l) {
                y[64 * c + l] = d0 * static_cast<float>(q[l] & 15) - mm0;
                y[64 * c + 32 + l] = d1 * static_cast<float>(q[l] >> 4) - mm1;
            }
        }
    });
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ5_K, kQK_K>(src, dst, n, [](const BlockQ5_K& b, float* y) {
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int c = 0; c < 4; ++c) {
            uint8_t sc0, m0, sc1, m1;
            unpack_k_scale_min(b.scales, 2 * c, &sc0, &m0);
            unpack_k_scale_min(b.scales, 2 * c + 1, &sc1, &m1);
            const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
            const uint8_t* q = b.qs + 32 * c;
            for (int l = 0; l < 32; ++l) {
                const int lo = (q[l] & 15) | (((b.qh[l] >> (2 * c)) & 1) << 4);
                const int hi = (q[l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
                y[64 * c + l] = d0 * static_cast<float>(lo) - mm0;
                y[64 * c + 32 + l] = d1 * static_cast<float>(hi) - mm1;
            }
        }
    });
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ6_K, kQK_K>(src, dst, n, [](const BlockQ6_K& b, float* y) {
        const float d = f16_to_f32(b.d);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = b.ql + 64 * h;
            const uint8_t* qh = b.qh + 32 * h;
            const int8_t* sc = b.scales + 8 * h;
            float* yh = y + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = (ql[l] & 15) | (((qh[l] >> 0) & 3) << 4);
                const int q2 = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                yh[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1 - 32);
                yh[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2 - 32);
                yh[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3 - 32);
                yh[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4 - 32);
            }
        }
    });
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
    for_blocks<BlockQ8_K, kQK_K>(src, dst, n, [](const BlockQ8_K& b, float* y) {
        for (int i = 0; i < kQK_K; ++i) y[i] = b.d * static_cast<float>(b.qs[i]);
    });
}

}  // namespace ref

namespace {
Status check_row(DType t, const void* a, const void* b, int64_t n, const char* what) {
    const auto& info = dtype_info(t);
    if (n < 0 || n % info.block_elems != 0)
        return make_error("{}: {} elements is not a multiple of the {} block size {}", what, n, info.name,
                          info.block_elems);
    if (n > 0 && (a == nullptr || b == nullptr)) return make_error("{}: null buffer", what);
    return {};
}
}  // namespace

Status dequantize_row(DType t, const void* src, float* dst, int64_t n) {
    PELICAN_TRY(check_row(t, src, dst, n, "dequantize"));
    const auto fn = dtype_info(t).to_float;
    if (fn == nullptr) return make_error("dequantize: no conversion for type {}", dtype_name(t));
    fn(src, dst, n);
    return {};
}

Status dequantize_tensor(const Tensor& src, float* dst) {
    const auto& info = dtype_info(src.dtype);
    if (src.n_elements() == 0) return {};
    if (src.data == nullptr || dst == nullptr || src.ne[0] % info.block_elems != 0)
        return make_error("dequantize: malformed view {}", src.describe());
    if (src.is_contiguous()) return dequantize_row(src.dtype, src.data, dst, src.n_elements());
    const bool dense_rows = src.ne[0] == info.block_elems || src.nb[0] == info.block_bytes;
    if (!dense_rows && info.block_elems > 1)
        return make_error("dequantize: {} has strided blocks along dim 0", src.describe());
    for (int64_t r = 0; r < src.n_rows(); ++r) {
        const Tensor row = src.row(r);
        float* out = dst + r * src.ne[0];
        if (dense_rows) {
            info.to_float(row.data, out, src.ne[0]);
        } else {  // strided plain type (e.g. a transpose): one element at a time
            for (int64_t i = 0; i < src.ne[0]; ++i)
                info.to_float(static_cast<const uint8_t*>(row.data) + i * src.nb[0], out + i, 1);
        }
    }
    return {};
}

bool can_quantize(DType t) { return dtype_info(t).from_float != nullptr; }

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
    PELICAN_TRY(check_row(t, src, dst, n, "quantize"));
    const auto fn = dtype_info(t).from_float;
    if (fn == nullptr) return make_error("quantize: no reference quantizer for type {}", dtype_name(t));
    fn(src, dst, n);
    return {};
}

}  // namespace pelican
