// Scalar reference conversions between fp32 and every storage type in the dtype table: the
// ground truth that SIMD/CUDA kernels are tested against. Block layouts: core/blocks.h.
//
// dequantize_row / quantize_row dispatch once per call through the dtype table's to_float /
// from_float columns; the per-type functions in namespace ref can be called directly when the
// type is already known (n must then be a multiple of the block size; nothing is checked).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace pelican {

// dst[0..n) = src as fp32. src holds n / block_elems blocks. Errors: n negative or not a multiple
// of the block size, null pointers with n > 0.
Status dequantize_row(DType t, const void* src, float* dst, int64_t n);

// dst[0..n_elements) = the whole view as fp32, rows in order (ne[0] fastest). Handles strided
// views (slices, transposes of plain types). Errors: a view that is not well formed.
Status dequantize_tensor(const Tensor& src, float* dst);

// Reference round-to-nearest quantizer: dst = n / block_elems blocks of type t. Types with one:
// F32, F16, BF16, F8_E4M3 (saturating), Q4_0, Q4_1, Q8_0, Q8_1, Q4_K, Q6_K, Q8_K.
// Inputs must be finite and small enough that fp16 block scales do not overflow (|x| < ~4e6).
// Per element |x - dequant(quant(x))| <= (effective step of its block) / 2, except Q4_0 where
// values beyond +7.5 steps (opposite sign of the block's largest magnitude) clamp to +7 steps.
Status quantize_row(DType t, const float* src, void* dst, int64_t n);
bool can_quantize(DType t);

namespace ref {

void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void dequantize_f8_e4m3(const void* src, float* dst, int64_t n);
void dequantize_f64(const void* src, float* dst, int64_t n);
void dequantize_i8(const void* src, float* dst, int64_t n);
void dequantize_i16(const void* src, float* dst, int64_t n);
void dequantize_i32(const void* src, float* dst, int64_t n);
void dequantize_i64(const void* src, float* dst, int64_t n);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);

void quantize_f32(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
void quantize_f8_e4m3(const float* src, void* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// Unpacks Q4_K/Q5_K sub-block j's (0..7) 6-bit scale and min from the 12 packed bytes.
inline void unpack_k_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

}  // namespace ref
}  // namespace pelican
