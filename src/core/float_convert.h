// Scalar conversions between fp32 and the narrow float formats pelican stores:
//   fp16  IEEE binary16 (1-5-10, bias 15): subnormals, inf, NaN; f32 -> f16 rounds to nearest even,
//         overflows to inf, NaN stays NaN (quiet, sign kept).
//   bf16  top 16 bits of an fp32: f32 -> bf16 rounds to nearest even, NaN stays NaN (quiet).
//   e4m3  OCP FP8 E4M3 "fn" (1-4-3, bias 7): no inf, max +-448, NaN = 0x7f / 0xff, subnormals
//         down to 2^-9. f32 -> e4m3 rounds to nearest even and SATURATES to +-448 (inf too);
//         NaN -> 0x7f with the input's sign.
// All functions are branch-light bit manipulation, safe for any input bit pattern.
#pragma once

#include <bit>
#include <cstdint>

namespace pelican {

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {  // inf / NaN: keep payload
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {  // normal: rebias 15 -> 127
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal half = mant * 2^-24: normalise into an fp32 normal
        int e = -1;
        do {
            mant <<= 1;
            ++e;
        } while ((mant & 0x400u) == 0);
        bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3ffu) << 13);
    }
    return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {  // inf / NaN (NaN forced quiet so payload truncation keeps it NaN)
        return static_cast<uint16_t>(sign | 0x7c00u |
                                     (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    }
    if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
    if (ax >= 0x38800000u) {                                              // >= 2^-14: normal half
        const uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);               // round to nearest even at bit 13
        return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
    }
    if (ax < 0x33000000u) return sign;  // < 2^-25 (half of the smallest subnormal): rounds to 0
    // Subnormal half: value = m * 2^-24 with m in [0, 1024]; shift the full 24-bit significand.
    const uint32_t e = ax >> 23;  // 102..112
    const uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24
    const uint32_t half_ulp = 1u << (shift - 1);
    const uint32_t rest = sig & ((1u << shift) - 1u);
    uint32_t m = sig >> shift;
    if (rest > half_ulp || (rest == half_ulp && (m & 1u))) ++m;  // m == 1024 becomes the min normal
    return static_cast<uint16_t>(sign | m);
}

inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float e4m3_to_f32(uint8_t v) {
    const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
    const uint32_t exp = (v >> 3) & 0xfu;
    const uint32_t mant = v & 0x7u;
    if (exp == 0xf && mant == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
    // subnormal: mant * 2^-9 (exact in fp32)
    const float mag = static_cast<float>(mant) * (1.0f / 512.0f);
    return sign ? -mag : mag;
}

inline uint8_t f32_to_e4m3(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);   // NaN
    if (ax >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
    if (ax >= 0x3c800000u) {  // >= 2^-6: normal e4m3; round to nearest even at bit 20
        const uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);
        // rebias 127 -> 7; inputs below 448 round to at most 448 (0x7e), never to the NaN code
        return static_cast<uint8_t>(sign | ((r - 0x3c000000u) >> 20));
    }
    if (ax < 0x3a800000u) return sign;  // < 2^-10, half the smallest subnormal 2^-9: rounds to 0
    // Subnormal: m * 2^-9, m in [0, 8]; m == 8 is the smallest normal (bits 0x08).
    const uint32_t e = ax >> 23;  // 117..120
    const uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 141u - e;  // 21..24
    const uint32_t half_ulp = 1u << (shift - 1);
    const uint32_t rest = sig & ((1u << shift) - 1u);
    uint32_t m = sig >> shift;
    if (rest > half_ulp || (rest == half_ulp && (m & 1u))) ++m;
    return static_cast<uint8_t>(sign | m);
}

}  // namespace pelican
