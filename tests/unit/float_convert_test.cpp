// fp16 / bf16 / e4m3 conversions against references computed arithmetically (ldexp, nearbyint,
// brute-force nearest), not by bit manipulation.
#include "core/float_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

namespace pelican {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Half value from its fields by arithmetic.
double ref_f16_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

// Nearest half (ties to even) of a finite float, by scaling into the half's ulp and nearbyint.
uint16_t ref_f32_to_f16(float f) {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65520.0) return sign | 0x7c00;
    if (a == 0) return sign;
    int ex;
    std::frexp(a, &ex);                   // a = m * 2^ex, m in [0.5, 1): leading bit is 2^(ex-1)
    const int e = std::max(ex - 1, -14);  // binade exponent, clamped to the subnormal range
    const double q = std::nearbyint(std::ldexp(a, 10 - e));  // significand in units of 2^(e-10)
    if (q == 0) return sign;
    if (e == -14 && q < 1024) return static_cast<uint16_t>(sign | static_cast<int>(q));  // subnormal
    // normal; q may be 2048 after rounding up into the next binade
    const int e2 = q >= 2048 ? e + 1 : e;
    const int m = q >= 2048 ? 0 : static_cast<int>(q) - 1024;
    if (e2 > 15) return sign | 0x7c00;
    return static_cast<uint16_t>(sign | (e2 + 15) << 10 | m);
}

TEST(FloatConvert, F16ToF32Exhaustive) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<uint16_t>(h));
        const int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            if (m == 0) {
                ASSERT_TRUE(std::isinf(f)) << h;
                ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
            } else {
                ASSERT_TRUE(std::isnan(f)) << h;
                ASSERT_EQ((bits(f) >> 13) & 1023, static_cast<uint32_t>(m)) << h;  // payload kept
            }
            continue;
        }
        ASSERT_EQ(static_cast<double>(f), ref_f16_value(static_cast<uint16_t>(h))) << h;
        ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    }
}

TEST(FloatConvert, F16RoundTripExhaustive) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint16_t back = f32_to_f16(f16_to_f32(static_cast<uint16_t>(h)));
        if (((h >> 10) & 31) == 31 && (h & 1023) != 0) {
            EXPECT_EQ(back & 0x7c00, 0x7c00) << h;
            EXPECT_NE(back & 0x3ff, 0) << h;  // still NaN
            EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
        } else {
            ASSERT_EQ(back, h) << h;
        }
    }
}

TEST(FloatConvert, F32ToF16MidpointsAndNeighbours) {
    // Every midpoint between adjacent non-negative halves (and +-1 float ulp), both signs.
    for (uint32_t h = 0; h < 0x7c00; ++h) {
        const double lo = ref_f16_value(static_cast<uint16_t>(h));
        const double hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_value(static_cast<uint16_t>(h + 1));
        const float mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 bits
        for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
            ASSERT_EQ(f32_to_f16(f), ref_f32_to_f16(f)) << f;
            ASSERT_EQ(f32_to_f16(-f), ref_f32_to_f16(-f)) << -f;
        }
    }
    EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
    EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0);                        // tie -> even (0)
    EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 1);  // just above -> min subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 2);                        // 1.5 ulp -> even (2)
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);            // tie -> even
    EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
    const uint16_t nan = f32_to_f16(std::nanf(""));
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x3ff, 0);
    EXPECT_EQ(f32_to_f16(std::bit_cast<float>(0x7f800001u)) & 0x3ff, 0x200);  // signalling -> quiet NaN
}

TEST(FloatConvert, F32ToF16Random) {
    std::mt19937 rng(1234);
    for (int i = 0; i < 2000000; ++i) {
        const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_f16(f), ref_f32_to_f16(f)) << f << " bits " << bits(f);
    }
}

TEST(FloatConvert, Bf16ToF32Exhaustive) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const float f = bf16_to_f32(static_cast<uint16_t>(b));
        const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
        if (e == 255) {
            ASSERT_TRUE(m == 0 ? std::isinf(f) : std::isnan(f)) << b;
            continue;
        }
        double v = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
        if (s) v = -v;
        ASSERT_EQ(static_cast<double>(f), v) << b;
    }
}

// Nearest of the two bf16 candidates bracketing f, by distance in double; ties pick the even one.
uint16_t ref_f32_to_bf16(float f) {
    const uint32_t x = bits(f);
    const uint32_t lo = x & 0xffff0000u, hi = lo + 0x10000u;
    const double vf = f, vlo = std::bit_cast<float>(lo);
    // hi may be the infinity pattern: for rounding, infinity sits at 2^128
    const double vhi = (hi & 0x7fffffffu) == 0x7f800000u ? std::copysign(std::ldexp(1.0, 128), vf)
                                                         : static_cast<double>(std::bit_cast<float>(hi));
    const double dlo = std::fabs(vf - vlo), dhi = std::fabs(vhi - vf);
    if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) return static_cast<uint16_t>(lo >> 16);
    return static_cast<uint16_t>(hi >> 16);
}

TEST(FloatConvert, F32ToBf16) {
    const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234};
    for (uint32_t top = 0; top < 65536; ++top) {
        for (uint32_t low : lows) {
            const float f = std::bit_cast<float>(top << 16 | low);
            if (std::isnan(f)) {
                const uint16_t r = f32_to_bf16(f);
                ASSERT_TRUE(std::isnan(bf16_to_f32(r))) << top;
                ASSERT_EQ(r & 0x8000, top & 0x8000);
                continue;
            }
            if (std::isinf(f)) {
                ASSERT_EQ(f32_to_bf16(f), top);
                continue;
            }
            ASSERT_EQ(f32_to_bf16(f), ref_f32_to_bf16(f)) << std::hex << (top << 16 | low);
        }
    }
    EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f800001u)) & 0x7f, 0x40);  // 0x7f80|0x40: quiet NaN
}

// e4m3fn value from its fields by arithmetic; NaN for s.1111.111.
double ref_e4m3_value(uint8_t v) {
    const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7) return NAN;
    double r = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    return s ? -r : r;
}

// Brute force: nearest finite code (ties to even code), saturating at 448.
uint8_t ref_f32_to_e4m3(float f) {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const double a = std::fabs(static_cast<double>(f));
    int best = 0;
    double best_d = INFINITY;
    for (int c = 0; c <= 0x7e; ++c) {
        const double d = std::fabs(ref_e4m3_value(static_cast<uint8_t>(c)) - a);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best = c;
            best_d = d;
        }
    }
    return static_cast<uint8_t>(sign | best);
}

TEST(FloatConvert, E4m3ToF32All256) {
    for (int v = 0; v < 256; ++v) {
        const float f = e4m3_to_f32(static_cast<uint8_t>(v));
        const double r = ref_e4m3_value(static_cast<uint8_t>(v));
        if (std::isnan(r)) {
            EXPECT_TRUE(std::isnan(f)) << v;
        } else {
            EXPECT_EQ(static_cast<double>(f), r) << v;
            EXPECT_EQ(std::signbit(f), v >= 128) << v;
        }
    }
    EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
    EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in the fn variant
}

TEST(FloatConvert, F32ToE4m3) {
    // Round trip of every finite code.
    for (int v = 0; v < 256; ++v) {
        if ((v & 0x7f) == 0x7f) continue;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(v))), v) << v;
    }
    // Midpoints between adjacent codes and their float neighbours, both signs.
    for (int c = 0; c < 0x7e; ++c) {
        const float mid = static_cast<float>(
            (ref_e4m3_value(static_cast<uint8_t>(c)) + ref_e4m3_value(static_cast<uint8_t>(c + 1))) / 2);
        for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
            ASSERT_EQ(f32_to_e4m3(f), ref_f32_to_e4m3(f)) << f;
            ASSERT_EQ(f32_to_e4m3(-f), ref_f32_to_e4m3(-f)) << -f;
        }
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-600.0f, 600.0f);
    std::uniform_int_distribution<int> sc(-14, 0);
    for (int i = 0; i < 100000; ++i) {
        const float f = std::ldexp(u(rng), sc(rng));
        ASSERT_EQ(f32_to_e4m3(f), ref_f32_to_e4m3(f)) << f;
    }
    EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(463.9f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);  // saturate
    EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::nanf("")), 0x7f);
    EXPECT_EQ(f32_to_e4m3(-std::nanf("")), 0xff);
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie between 0 and 2^-9 -> 0
    EXPECT_EQ(f32_to_e4m3(std::ldexp(3.0f, -10)), 0x02);  // tie between 1 and 2 ulps -> 2
    EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
}

}  // namespace
}  // namespace pelican
