// Activation quantization for integer dot products with block-quantized weights: the reference
// definition. The fast CPU quantizer (backend/cpu) must produce bit-identical results, so every
// step is a single IEEE fp32 operation (no fused multiply-add, no reassociation).
//
// 32-blocks (weights Q4_0, Q8_0): one row of n fp32 values (n % 32 == 0), block b = x[32b, 32b+32):
//   amax    = max_j |x[32b + j]|
//   d[b]    = amax / 127                      (fp32; 0 when amax == 0)
//   iscale  = 127 / amax                      (fp32; 0 when amax == 0)
//   qs[32b + j] = nearbyint(x[32b + j] * iscale)   (ties to even; always in [-127, 127])
//   s[b]    = d[b] * float(sum_j qs[32b + j])       (lets a kernel remove a weight zero point)
// 256-blocks (weights Q4_K, Q5_K, Q6_K): the same with 256-element blocks, and instead of s:
//   bsum[16b + k] = sum of qs[256b + 16k .. 256b + 16k + 16)   (int16, |bsum| <= 2032)
//
// Rounding: |x - d * qs| <= d / 2 per element, d = amax / 127 of its block.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pelican {

inline constexpr int kActBlock32 = 32;
inline constexpr int kActBlock256 = 256;

// One batch of quantized activation rows (all pointers into caller memory).
struct ActQ8 {
    int8_t* qs = nullptr;     // [n_rows, n]
    float* d = nullptr;       // [n_rows, n / block]
    float* s = nullptr;       // 32-blocks: [n_rows, n / 32]; else nullptr
    int16_t* bsum = nullptr;  // 256-blocks: [n_rows, n / 16]; else nullptr
    int64_t n = 0;            // elements per row
    int block = 0;            // 32 or 256
};

// The activation block the integer kernels use with weights of type t: 32 (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0), 256 (Q2_K .. Q6_K) or 0 (float weights: activations stay fp32).
int act_quant_block(DType weight_type);

namespace ref {

// One row: x [n] -> qs [n], d [n/32], s [n/32].
void quantize_act_q32(const float* x, int64_t n, int8_t* qs, float* d, float* s);
// One row: x [n] -> qs [n], d [n/256], bsum [n/16].
void quantize_act_q256(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsum);
// Dequantizes row r of a: x[i] = d[i / block] * qs[i] (for tests and the reference twin).
void dequantize_act(const ActQ8& a, int64_t r, float* x);

}  // namespace ref
}  // namespace pelican
