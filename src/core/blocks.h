// GGUF/ggml block layouts, declared once for host C++ and CUDA (plain structs, no std headers
// beyond <cstdint>). Half-precision fields are raw IEEE fp16 bits (uint16_t); convert them with
// core/float_convert.h on the host. Sizes are checked here and against the dtype table in
// tests/unit/blocks_test.cpp.
//
// Notation below: a block holds QK elements y[0..QK); d/dmin/m are fp16 scales.
#pragma once

#include <cstdint>

namespace pelican {

inline constexpr int kQK4_0 = 32;        // elements per Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q8_1 block
inline constexpr int kQK_K = 256;        // elements per k-quant super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q4_K/Q5_K (and Q3_K scales)

// y[j] = (lo4(qs[j]) - 8) * d, y[j+16] = (hi4(qs[j]) - 8) * d, j < 16.
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

// y[j] = lo4(qs[j]) * d + m, y[j+16] = hi4(qs[j]) * d + m.
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

// 5-bit: element i's fifth bit is bit i of qh (little-endian u32).
// y[j] = ((lo4(qs[j]) | bit_j << 4) - 16) * d, y[j+16] = ((hi4(qs[j]) | bit_{j+16} << 4) - 16) * d.
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");

// As Q5_0 without the -16 offset, plus min: y = q5 * d + m.
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");

// y[i] = qs[i] * d.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQK4_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

// y[i] = qs[i] * d; s = d * sum(qs) (used by dot products, ignored by dequantize).
struct BlockQ8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[kQK4_0];
};
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block is 36 bytes");

// 2-bit k-quant: 16 sub-blocks of 16. scales[i]: lo4 = scale, hi4 = min of sub-block i.
// Per 128-element half h, 32 qs bytes; shift s = 2*k picks sub-blocks (8h+2k, 8h+2k+1):
//   y[128h + 32k + l]      = d * sc * ((qs[32h + l]      >> s) & 3) - dmin * m, l < 16
//   y[128h + 32k + 16 + l] = d * sc * ((qs[32h + 16 + l] >> s) & 3) - dmin * m
struct BlockQ2_K {
    uint8_t scales[kQK_K / 16];
    uint8_t qs[kQK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");

// 3-bit k-quant: 16 sub-blocks of 16 with signed 6-bit scales (stored +32):
//   sc[i] = (low4 | high2 << 4) - 32, low4 = i < 8 ? scales[i] & 15 : scales[i-8] >> 4,
//   high2 = (scales[8 + i%4] >> 2*(i/4)) & 3.
// Low 2 bits as Q2_K's qs; the third bit is hmask[l] bit (4h + k) for the same positions
// (l < 32 within the half); a CLEAR bit subtracts 4: q = lo2 - (bit ? 0 : 4), y = d * sc * q.
struct BlockQ3_K {
    uint8_t hmask[kQK_K / 8];
    uint8_t qs[kQK_K / 4];
    uint8_t scales[kKScaleBytes];
    uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");

// 4-bit k-quant: 8 sub-blocks of 32 with 6-bit scale sc and min m packed in scales[12]:
//   j < 4: sc = s[j] & 63, m = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4
// 64-element chunk c uses qs[32c .. 32c+32): lo nibbles = sub-block 2c, hi nibbles = 2c+1.
// y = d * sc * q - dmin * m.
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[kKScaleBytes];
    uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");

// 5-bit k-quant: Q4_K plus a fifth bit: for chunk c, lo nibbles use bit 2c of qh[l], hi nibbles
// bit 2c+1 (l < 32). q = nibble + 16 * bit.
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[kKScaleBytes];
    uint8_t qh[kQK_K / 8];
    uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");

// 6-bit k-quant: 16 sub-blocks of 16, int8 scales. Per 128-element half h (ql += 64h, qh += 32h,
// sc += 8h), l < 32:
//   q1 = lo4(ql[l])    | ((qh[l] >> 0) & 3) << 4   -> y[l]      = d * sc[l/16 + 0] * (q1 - 32)
//   q2 = lo4(ql[l+32]) | ((qh[l] >> 2) & 3) << 4   -> y[l + 32] = d * sc[l/16 + 2] * (q2 - 32)
//   q3 = hi4(ql[l])    | ((qh[l] >> 4) & 3) << 4   -> y[l + 64] = d * sc[l/16 + 4] * (q3 - 32)
//   q4 = hi4(ql[l+32]) | ((qh[l] >> 6) & 3) << 4   -> y[l + 96] = d * sc[l/16 + 6] * (q4 - 32)
struct BlockQ6_K {
    uint8_t ql[kQK_K / 2];
    uint8_t qh[kQK_K / 4];
    int8_t scales[kQK_K / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");

// 8-bit k-quant (activations for k-quant dot products): y = qs * d, d is fp32;
// bsums[i] = sum of qs[16i .. 16i+16).
struct BlockQ8_K {
    float d;
    int8_t qs[kQK_K];
    int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block is 292 bytes");

}  // namespace pelican
