// Dequantizers against hand-built blocks: literal bytes with expected values worked out by hand,
// and random blocks checked element by element with "gather" formulas (element -> bytes) written
// independently of the dequantizer's "scatter" loops (bytes -> elements).
#include "core/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/blocks.h"
#include "core/float_convert.h"

namespace pelican {
namespace {

constexpr uint16_t kH1 = 0x3c00, kHHalf = 0x3800, kHQuarter = 0x3400, kH2 = 0x4000, kHm1 = 0xbc00;

template <typename B>
std::vector<float> deq(DType t, const B& b) {
    std::vector<float> y(dtype_info(t).block_elems, -12345.0f);
    Status s = dequantize_row(t, &b, y.data(), static_cast<int64_t>(y.size()));
    EXPECT_TRUE(s.ok());
    return y;
}

// Expected value = t1 - t2 (exact in double); fp32 evaluation error is a few ulps of |t1| + |t2|.
struct Want {
    std::vector<double> t1, t2;
    explicit Want(size_t n) : t1(n), t2(n) {}
};
void expect_close(const std::vector<float>& y, const Want& w, const char* what) {
    ASSERT_EQ(y.size(), w.t1.size());
    for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], w.t1[i] - w.t2[i], 1e-6 * (std::fabs(w.t1[i]) + std::fabs(w.t2[i])) + 1e-30)
            << what << " element " << i;
}

template <typename B>
B random_block(std::mt19937& rng) {
    B b;
    auto* p = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof(B); ++i) p[i] = static_cast<uint8_t>(rng());
    return b;
}
uint16_t random_scale(std::mt19937& rng) {
    return f32_to_f16(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng));
}
double h(uint16_t v) { return f16_to_f32(v); }

// ---- literal blocks -------------------------------------------------------------------------

TEST(Dequantize, Q4_0Literal) {
    BlockQ4_0 b{};
    b.d = kHHalf;
    std::memset(b.qs, 0x88, sizeof(b.qs));  // all codes 8 -> 0
    b.qs[0] = 0x0F;                         // y[0] = (15-8)*0.5, y[16] = (0-8)*0.5
    b.qs[1] = 0x80;                         // y[1] = -4, y[17] = 0
    auto y = deq(DType::Q4_0, b);
    EXPECT_EQ(y[0], 3.5f);
    EXPECT_EQ(y[16], -4.0f);
    EXPECT_EQ(y[1], -4.0f);
    EXPECT_EQ(y[17], 0.0f);
    for (int i : {2, 15, 18, 31}) EXPECT_EQ(y[i], 0.0f);
}

TEST(Dequantize, Q4_1Literal) {
    BlockQ4_1 b{};
    b.d = kHQuarter;
    b.m = kHm1;
    b.qs[0] = 0xF0;  // y[0] = 0*0.25 - 1, y[16] = 15*0.25 - 1
    auto y = deq(DType::Q4_1, b);
    EXPECT_EQ(y[0], -1.0f);
    EXPECT_EQ(y[16], 2.75f);
    EXPECT_EQ(y[5], -1.0f);
}

TEST(Dequantize, Q5_0Literal) {
    BlockQ5_0 b{};
    b.d = kH1;
    b.qh[0] = 0x01;  // element 0's fifth bit
    b.qh[2] = 0x01;  // element 16
    b.qh[3] = 0x80;  // element 31
    b.qs[0] = 0xFF;
    b.qs[15] = 0x00;
    auto y = deq(DType::Q5_0, b);
    EXPECT_EQ(y[0], 15.0f);    // (15 | 16) - 16
    EXPECT_EQ(y[16], 15.0f);   // (15 | 16) - 16
    EXPECT_EQ(y[15], -16.0f);  // 0 - 16
    EXPECT_EQ(y[31], 0.0f);    // (0 | 16) - 16
    EXPECT_EQ(y[1], -16.0f);
}

TEST(Dequantize, Q5_1Literal) {
    BlockQ5_1 b{};
    b.d = kHHalf;
    b.m = kH2;
    b.qh[1] = 0x02;  // element 9
    b.qs[9] = 0x3F;  // element 9 low nibble 15, element 25 high nibble 3
    auto y = deq(DType::Q5_1, b);
    EXPECT_EQ(y[9], 31 * 0.5f + 2.0f);
    EXPECT_EQ(y[25], 3 * 0.5f + 2.0f);
    EXPECT_EQ(y[0], 2.0f);
}

TEST(Dequantize, Q8_0AndQ8_1Literal) {
    BlockQ8_0 b{};
    b.d = kH2;
    b.qs[0] = -128;
    b.qs[1] = 127;
    b.qs[2] = -1;
    auto y = deq(DType::Q8_0, b);
    EXPECT_EQ(y[0], -256.0f);
    EXPECT_EQ(y[1], 254.0f);
    EXPECT_EQ(y[2], -2.0f);
    EXPECT_EQ(y[3], 0.0f);
    BlockQ8_1 c{};
    c.d = kHHalf;
    c.s = 0x7bff;  // ignored by dequantize
    c.qs[31] = -7;
    auto z = deq(DType::Q8_1, c);
    EXPECT_EQ(z[31], -3.5f);
}

TEST(Dequantize, Q2_KLiteral) {
    BlockQ2_K b{};
    b.d = kH2;
    b.dmin = kH1;
    b.scales[5] = 0x3A;  // sub-block 5 (elements 80..95): scale 10, min 3
    b.qs[16] = 0x30;     // element 80: first half, shift 4 (k = 2), second 16 -> q = 3
    auto y = deq(DType::Q2_K, b);
    EXPECT_EQ(y[80], 2 * 10 * 3 - 3.0f);
    EXPECT_EQ(y[81], -3.0f);
    EXPECT_EQ(y[0], 0.0f);
    b.qs[32 + 15] = 0xC0;  // second half, shift 6 (k = 3), first 16, l = 15 -> element 128+96+15
    b.scales[14] = 0x01;   // sub-block 14: scale 1, min 0
    y = deq(DType::Q2_K, b);
    EXPECT_EQ(y[239], 2 * 1 * 3.0f);
}

TEST(Dequantize, Q3_KLiteral) {
    BlockQ3_K b{};
    b.d = kH1;
    // All raw 6-bit scales 0 (-> -32) except sub-block 13: low4 from scales[5] >> 4,
    // high2 from scales[9] bits 6..7 -> raw 63 -> scale 31.
    b.scales[5] = 0xF0;
    b.scales[9] = 0xC0;
    // Element 208 = second half (h=1), k = 2, index 16: lo2 = (qs[32+16] >> 4) & 3, hbit = hmask[16] bit 6.
    b.qs[48] = 0x30;
    b.hmask[16] = 0x40;
    auto y = deq(DType::Q3_K, b);
    EXPECT_EQ(y[208], 31 * 3.0f);
    EXPECT_EQ(y[209], 31 * -4.0f);  // lo2 0, bit clear -> -4
    EXPECT_EQ(y[0], -32 * -4.0f);   // sub-block 0: scale -32, q = -4
    // Sub-block 5 uses scales[5] low nibble (0) and scales[9] bits 2..3 (0): raw 0 -> -32.
    EXPECT_EQ(y[80], -32 * -4.0f);
}

// Packs eight 6-bit scales and mins the Q4_K/Q5_K way (test's own code).
void pack_k_scales(const int sc[8], const int m[8], uint8_t out[12]) {
    for (int j = 0; j < 4; ++j) {
        out[j] = static_cast<uint8_t>((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        out[j + 4] = static_cast<uint8_t>((m[j] & 63) | (m[j + 4] >> 4) << 6);
        out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

TEST(Dequantize, Q4_KLiteral) {
    BlockQ4_K b{};
    b.d = kH1;
    b.dmin = kHHalf;
    // Only sub-block 5 has sc = 37 (0b100101), m = 50 (0b110010): bytes worked out by hand.
    const uint8_t s[12] = {0, 0x80, 0, 0, 0, 0xC0, 0, 0, 0, 0x25, 0, 0};
    std::memcpy(b.scales, s, 12);
    b.qs[64] = 0xF0;  // chunk 2, hi nibble = sub-block 5, l = 0 -> element 160 has q = 15
    auto y = deq(DType::Q4_K, b);
    EXPECT_EQ(y[160], 37 * 15 - 0.5f * 50);
    EXPECT_EQ(y[161], -25.0f);
    EXPECT_EQ(y[128], 0.0f);  // sub-block 4: sc 0, m 0
    for (int i = 0; i < 160; ++i) EXPECT_EQ(y[i], 0.0f) << i;
    // Low sub-blocks: sc = 63 (s[0] & 63), m = 1 (s[4] & 63); top bits of s[0]/s[4] belong to 4.
    int sc[8] = {63, 0, 0, 0, 17, 0, 0, 0}, m[8] = {1, 0, 0, 0, 33, 0, 0, 0};
    pack_k_scales(sc, m, b.scales);
    EXPECT_EQ(b.scales[0], 63 | 1 << 6);  // sc[4] >> 4 = 1
    EXPECT_EQ(b.scales[4], 1 | 2 << 6);   // m[4] >> 4 = 2
    b.qs[0] = 0x07;                       // element 0: q = 7
    b.qs[96] = 0;
    y = deq(DType::Q4_K, b);
    EXPECT_EQ(y[0], 63 * 7 - 0.5f);
    EXPECT_EQ(y[128], -0.5f * 33);  // sub-block 4, q = 0
}

TEST(Dequantize, Q5_KLiteral) {
    BlockQ5_K b{};
    b.d = kH1;
    b.dmin = kH1;
    int sc[8] = {0, 0, 0, 0, 0, 0, 0, 40}, m[8] = {0, 0, 0, 0, 0, 0, 0, 20};
    pack_k_scales(sc, m, b.scales);
    b.qs[96] = 0xF0;  // chunk 3 hi nibble (sub-block 7), l = 0 -> element 224
    b.qh[0] = 0x80;   // bit 2*3+1 -> fifth bit of element 224
    b.qh[1] = 0x40;   // bit 6 -> element 192 + 1 (lo nibble of chunk 3, sub-block 6: sc 0)
    auto y = deq(DType::Q5_K, b);
    EXPECT_EQ(y[224], 40 * 31 - 20.0f);
    EXPECT_EQ(y[225], -20.0f);
    EXPECT_EQ(y[193], 0.0f);
}

TEST(Dequantize, Q6_KLiteral) {
    BlockQ6_K b{};
    b.d = kHHalf;
    for (auto& s : b.scales) s = 1;
    b.scales[3] = -2;
    // Element 48: first half, group 1 (ql[l+32] low nibble, qh bits 2..3), l = 16.
    b.ql[48] = 0x0F;
    b.qh[16] = 0x0C;
    // Element 128 + 96 + 31 = 255: second half, group 3 (ql[64+31+32] high nibble, qh[32+31] bits 6..7).
    b.ql[127] = 0xA0;
    b.qh[63] = 0x40;
    auto y = deq(DType::Q6_K, b);
    EXPECT_EQ(y[48], 0.5f * -2 * (63 - 32));
    EXPECT_EQ(y[49], 0.5f * -2 * -32);
    EXPECT_EQ(y[0], 0.5f * 1 * -32);
    EXPECT_EQ(y[255], 0.5f * 1 * ((10 | 1 << 4) - 32));
}

TEST(Dequantize, Q8_KAndPlainTypes) {
    BlockQ8_K b{};
    b.d = 0.25f;
    b.qs[255] = -128;
    EXPECT_EQ(deq(DType::Q8_K, b)[255], -32.0f);

    const int8_t i8[4] = {-128, 127, 0, -1};
    float y[4];
    ASSERT_TRUE(dequantize_row(DType::I8, i8, y, 4).ok());
    EXPECT_EQ(y[0], -128.0f);
    EXPECT_EQ(y[1], 127.0f);
    EXPECT_EQ(y[3], -1.0f);
    const uint16_t f16[2] = {0x3c00, 0xc000};  // 1, -2
    ASSERT_TRUE(dequantize_row(DType::F16, f16, y, 2).ok());
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -2.0f);
    const uint16_t bf16[2] = {0x3f80, 0xc040};  // 1, -3
    ASSERT_TRUE(dequantize_row(DType::BF16, bf16, y, 2).ok());
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -3.0f);
    const uint8_t e4m3[3] = {0x7e, 0x38, 0xb8};  // 448, 1, -1
    ASSERT_TRUE(dequantize_row(DType::F8_E4M3, e4m3, y, 3).ok());
    EXPECT_EQ(y[0], 448.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_EQ(y[2], -1.0f);
    const int32_t i32[2] = {-5, 1 << 20};
    ASSERT_TRUE(dequantize_row(DType::I32, i32, y, 2).ok());
    EXPECT_EQ(y[0], -5.0f);
    EXPECT_EQ(y[1], 1048576.0f);
    // Unaligned source: a Q8_0 block at an odd address.
    alignas(4) uint8_t raw[1 + sizeof(BlockQ8_0)] = {};
    raw[1] = 0x00;
    raw[2] = 0x3c;  // d = 1
    raw[3] = 0xFB;  // qs[0] = -5
    float z[32];
    ASSERT_TRUE(dequantize_row(DType::Q8_0, raw + 1, z, 32).ok());
    EXPECT_EQ(z[0], -5.0f);
}

TEST(Dequantize, RejectsBadCounts) {
    float y[64];
    uint8_t src[64] = {};
    EXPECT_FALSE(dequantize_row(DType::Q4_0, src, y, 31).ok());
    EXPECT_FALSE(dequantize_row(DType::Q4_K, src, y, 32).ok());
    EXPECT_FALSE(dequantize_row(DType::F32, src, y, -1).ok());
    EXPECT_FALSE(dequantize_row(DType::F32, nullptr, y, 4).ok());
    EXPECT_TRUE(dequantize_row(DType::F32, nullptr, nullptr, 0).ok());
    Status s = quantize_row(DType::Q3_K, y, src, 256);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("q3_k"), std::string::npos);
    EXPECT_FALSE(quantize_row(DType::Q8_0, y, src, 33).ok());
}

// ---- random blocks vs gather formulas -------------------------------------------------------

constexpr int kRandomBlocks = 200;

TEST(Dequantize, LegacyRandomBlocks) {
    std::mt19937 rng(42);
    for (int it = 0; it < kRandomBlocks; ++it) {
        auto a = random_block<BlockQ4_0>(rng);
        a.d = random_scale(rng);
        auto b = random_block<BlockQ4_1>(rng);
        b.d = random_scale(rng);
        b.m = random_scale(rng);
        auto c = random_block<BlockQ5_0>(rng);
        c.d = random_scale(rng);
        auto e = random_block<BlockQ5_1>(rng);
        e.d = random_scale(rng);
        e.m = random_scale(rng);
        Want wa(32), wb(32), wc(32), we(32);
        const uint32_t qh_c = c.qh[0] | c.qh[1] << 8 | c.qh[2] << 16 | static_cast<uint32_t>(c.qh[3]) << 24;
        const uint32_t qh_e = e.qh[0] | e.qh[1] << 8 | e.qh[2] << 16 | static_cast<uint32_t>(e.qh[3]) << 24;
        for (int i = 0; i < 32; ++i) {
            auto nib = [&](const uint8_t* qs) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; };
            wa.t1[i] = (nib(a.qs) - 8) * h(a.d);
            wb.t1[i] = nib(b.qs) * h(b.d);
            wb.t2[i] = -h(b.m);
            wc.t1[i] = (nib(c.qs) + 16 * static_cast<int>((qh_c >> i) & 1) - 16) * h(c.d);
            we.t1[i] = (nib(e.qs) + 16 * static_cast<int>((qh_e >> i) & 1)) * h(e.d);
            we.t2[i] = -h(e.m);
        }
        expect_close(deq(DType::Q4_0, a), wa, "q4_0");
        expect_close(deq(DType::Q4_1, b), wb, "q4_1");
        expect_close(deq(DType::Q5_0, c), wc, "q5_0");
        expect_close(deq(DType::Q5_1, e), we, "q5_1");
    }
}

TEST(Dequantize, KQuantRandomBlocks) {
    std::mt19937 rng(43);
    for (int it = 0; it < kRandomBlocks; ++it) {
        auto q2 = random_block<BlockQ2_K>(rng);
        q2.d = random_scale(rng);
        q2.dmin = random_scale(rng);
        auto q3 = random_block<BlockQ3_K>(rng);
        q3.d = random_scale(rng);
        auto q4 = random_block<BlockQ4_K>(rng);
        q4.d = random_scale(rng);
        q4.dmin = random_scale(rng);
        auto q5 = random_block<BlockQ5_K>(rng);
        q5.d = random_scale(rng);
        q5.dmin = random_scale(rng);
        auto q6 = random_block<BlockQ6_K>(rng);
        q6.d = random_scale(rng);

        // Q3_K scales via 32-bit mask arithmetic (the vectorised formulation).
        uint32_t aux[4];
        std::memcpy(aux, q3.scales, 12);
        const uint32_t km1 = 0x03030303, km2 = 0x0f0f0f0f, tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & km2) | (((tmp >> 4) & km1) << 4);
        aux[3] = ((aux[1] >> 4) & km2) | (((tmp >> 6) & km1) << 4);
        aux[0] = (aux[0] & km2) | (((tmp >> 0) & km1) << 4);
        aux[1] = (aux[1] & km2) | (((tmp >> 2) & km1) << 4);
        uint8_t sc3[16];
        std::memcpy(sc3, aux, 16);

        // Q4_K / Q5_K scales and mins via 32-bit masks as well.
        auto unpack = [](const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
            uint32_t u[4];
            std::memcpy(u, s, 12);
            const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
            u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
            const uint32_t mins_lo = u[1] & k1;
            u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
            u[2] = mins_lo;
            u[0] &= k1;
            std::memcpy(sc, &u[0], 8);
            std::memcpy(mn, &u[2], 8);
        };
        uint8_t sc4[8], m4[8], sc5[8], m5[8];
        unpack(q4.scales, sc4, m4);
        unpack(q5.scales, sc5, m5);

        Want w2(256), w3(256), w4(256), w5(256), w6(256);
        for (int i = 0; i < 256; ++i) {
            const int hh = i / 128, r = i % 128, k = r / 32, idx = r % 32;
            const int q2v = (q2.qs[32 * hh + idx] >> (2 * k)) & 3;
            w2.t1[i] = h(q2.d) * (q2.scales[i / 16] & 15) * q2v;
            w2.t2[i] = h(q2.dmin) * (q2.scales[i / 16] >> 4);
            const int lo3 = (q3.qs[32 * hh + idx] >> (2 * k)) & 3;
            const int hb3 = (q3.hmask[idx] >> (4 * hh + k)) & 1;
            w3.t1[i] = h(q3.d) * (static_cast<int>(sc3[i / 16]) - 32) * (lo3 - (hb3 ? 0 : 4));
            const int c = i / 64, part = (i % 64) / 32, l = i % 32, j = i / 32;
            const int n4 = part ? q4.qs[32 * c + l] >> 4 : q4.qs[32 * c + l] & 15;
            w4.t1[i] = h(q4.d) * sc4[j] * n4;
            w4.t2[i] = h(q4.dmin) * m4[j];
            const int n5 = (part ? q5.qs[32 * c + l] >> 4 : q5.qs[32 * c + l] & 15) +
                           16 * ((q5.qh[l] >> (2 * c + part)) & 1);
            w5.t1[i] = h(q5.d) * sc5[j] * n5;
            w5.t2[i] = h(q5.dmin) * m5[j];
            const int g = r / 32, l6 = r % 32;
            const uint8_t qlb = q6.ql[64 * hh + l6 + 32 * (g & 1)];
            const int q6v = (g < 2 ? qlb & 15 : qlb >> 4) | ((q6.qh[32 * hh + l6] >> (2 * g)) & 3) << 4;
            w6.t1[i] = h(q6.d) * q6.scales[i / 16] * (q6v - 32);
        }
        expect_close(deq(DType::Q2_K, q2), w2, "q2_k");
        expect_close(deq(DType::Q3_K, q3), w3, "q3_k");
        expect_close(deq(DType::Q4_K, q4), w4, "q4_k");
        expect_close(deq(DType::Q5_K, q5), w5, "q5_k");
        expect_close(deq(DType::Q6_K, q6), w6, "q6_k");
    }
}

// ---- reference quantizers: round trip within half a step --------------------------------------

// Test rows: mixed magnitudes per block, an all-zero block, a constant block, an all-negative
// block and an outlier.
std::vector<float> test_row(int n_blocks, int qk, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n_blocks) * qk);
    for (int b = 0; b < n_blocks; ++b) {
        const float scale = std::ldexp(1.0f, b % 7 - 3);
        for (int i = 0; i < qk; ++i) {
            float v = nd(rng) * scale;
            if (b == 1) v = 0;
            if (b == 2) v = 0.3f;
            if (b == 3) v = -std::fabs(v) - 0.5f;
            if (b == 4 && i == 5) v = 40.0f;
            x[static_cast<size_t>(b) * qk + i] = v;
        }
    }
    return x;
}

template <typename B>
std::vector<B> quantize_blocks(DType t, const std::vector<float>& x) {
    std::vector<B> q(x.size() / dtype_info(t).block_elems);
    EXPECT_TRUE(quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size())).ok());
    return q;
}
std::vector<float> dequantize_all(DType t, const void* q, size_t n) {
    std::vector<float> y(n);
    EXPECT_TRUE(dequantize_row(t, q, y.data(), static_cast<int64_t>(n)).ok());
    return y;
}

// |x - y| <= step / 2, plus a few fp32 ulps of the values involved.
void expect_within_half_step(float x, float y, double step, const char* what, size_t i) {
    const double tol = step / 2 * (1 + 1e-5) + 1e-6 * std::fabs(x) + 1e-30;
    ASSERT_LE(std::fabs(static_cast<double>(x) - y), tol) << what << " element " << i << " x=" << x;
}

TEST(Quantize, Q8_0RoundTrip) {
    const auto x = test_row(24, 32, 1);
    const auto q = quantize_blocks<BlockQ8_0>(DType::Q8_0, x);
    const auto y = dequantize_all(DType::Q8_0, q.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) expect_within_half_step(x[i], y[i], h(q[i / 32].d), "q8_0", i);
    EXPECT_EQ(q[1].d, 0);  // all-zero block
    int max_code = 0;
    for (int8_t c : q[0].qs) max_code = std::max(max_code, std::abs(static_cast<int>(c)));
    EXPECT_GE(max_code, 126);  // the largest element uses (nearly) the full range
    const auto q1 = quantize_blocks<BlockQ8_1>(DType::Q8_1, x);
    int sum = 0;
    for (int8_t c : q1[0].qs) sum += c;
    EXPECT_NEAR(h(q1[0].s), h(q1[0].d) * sum, std::fabs(h(q1[0].d) * sum) * 1e-3 + 1e-6);
    EXPECT_EQ(std::memcmp(q1[0].qs, q[0].qs, 32), 0);
}

TEST(Quantize, Q4_0RoundTrip) {
    const auto x = test_row(24, 32, 2);
    const auto q = quantize_blocks<BlockQ4_0>(DType::Q4_0, x);
    const auto y = dequantize_all(DType::Q4_0, q.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double d = h(q[i / 32].d);
        // Codes span -8..+7 steps: values beyond +7.5 steps clamp to +7 (at most one step off).
        const bool clamped = d != 0 && x[i] / d > 7.5;
        expect_within_half_step(x[i], y[i], std::fabs(d) * (clamped ? 2 : 1), "q4_0", i);
    }
    // The outlier block: the largest magnitude maps exactly to -8 steps.
    EXPECT_NEAR(y[4 * 32 + 5], 40.0f, 40.0f * 1e-3);
}

TEST(Quantize, Q4_1RoundTrip) {
    const auto x = test_row(24, 32, 3);
    const auto q = quantize_blocks<BlockQ4_1>(DType::Q4_1, x);
    const auto y = dequantize_all(DType::Q4_1, q.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) expect_within_half_step(x[i], y[i], h(q[i / 32].d), "q4_1", i);
}

TEST(Quantize, Q4_KRoundTrip) {
    const auto x = test_row(12, 256, 4);
    const auto q = quantize_blocks<BlockQ4_K>(DType::Q4_K, x);
    const auto y = dequantize_all(DType::Q4_K, q.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const auto& b = q[i / 256];
        uint8_t sc, m;
        ref::unpack_k_scale_min(b.scales, static_cast<int>(i % 256) / 32, &sc, &m);
        expect_within_half_step(x[i], y[i], h(b.d) * sc, "q4_k", i);
    }
}

TEST(Quantize, Q6_KRoundTrip) {
    const auto x = test_row(12, 256, 5);
    const auto q = quantize_blocks<BlockQ6_K>(DType::Q6_K, x);
    const auto y = dequantize_all(DType::Q6_K, q.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const auto& b = q[i / 256];
        expect_within_half_step(x[i], y[i], h(b.d) * b.scales[(i % 256) / 16], "q6_k", i);
    }
}

TEST(Quantize, Q8_KRoundTrip) {
    const auto x = test_row(12, 256, 6);
    const auto q = quantize_blocks<BlockQ8_K>(DType::Q8_K, x);
    const auto y = dequantize_all(DType::Q8_K, q.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) expect_within_half_step(x[i], y[i], q[i / 256].d, "q8_k", i);
    for (const auto& b : q)
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
            ASSERT_EQ(b.bsums[j], sum);
        }
}

TEST(Quantize, FloatTypesRoundTrip) {
    const auto x = test_row(4, 32, 7);
    std::vector<uint16_t> f16(x.size()), bf16(x.size());
    std::vector<uint8_t> f8(x.size());
    ASSERT_TRUE(quantize_row(DType::F16, x.data(), f16.data(), 128).ok());
    ASSERT_TRUE(quantize_row(DType::BF16, x.data(), bf16.data(), 128).ok());
    ASSERT_TRUE(quantize_row(DType::F8_E4M3, x.data(), f8.data(), 128).ok());
    const auto y16 = dequantize_all(DType::F16, f16.data(), 128);
    const auto yb = dequantize_all(DType::BF16, bf16.data(), 128);
    const auto y8 = dequantize_all(DType::F8_E4M3, f8.data(), 128);
    for (size_t i = 0; i < 128; ++i) {
        // relative half-ulp: 2^-11 (fp16), 2^-8 (bf16), 2^-4 (e4m3); absolute floor for subnormals
        EXPECT_LE(std::fabs(x[i] - y16[i]), std::fabs(x[i]) * 0x1p-11 + 0x1p-25) << i;
        EXPECT_LE(std::fabs(x[i] - yb[i]), std::fabs(x[i]) * 0x1p-8) << i;
        EXPECT_LE(std::fabs(x[i] - y8[i]), std::fabs(x[i]) * 0x1p-4 + 0x1p-10) << i;
    }
}

TEST(Dequantize, WholeTensorsContiguousAndStrided) {
    // 3 rows of 64 Q8_0 elements: row r block b has d = 1 and qs[i] = 10r + b + (i == 0).
    std::vector<BlockQ8_0> blocks(6);
    for (int r = 0; r < 3; ++r)
        for (int b = 0; b < 2; ++b) {
            auto& blk = blocks[static_cast<size_t>(2 * r + b)];
            blk.d = kH1;
            for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(10 * r + b + (i == 0));
        }
    auto t = Tensor::contiguous_view(DType::Q8_0, {64, 3}, blocks.data());
    ASSERT_TRUE(t.ok());
    std::vector<float> y(192);
    ASSERT_TRUE(dequantize_tensor(*t, y.data()).ok());
    EXPECT_EQ(y[64 * 2 + 32], 22.0f);  // row 2, block 1, i = 0
    EXPECT_EQ(y[64 * 2 + 33], 21.0f);
    auto second_blocks = t->slice(0, 32, 32);  // strided rows
    ASSERT_TRUE(second_blocks.ok());
    ASSERT_TRUE(dequantize_tensor(*second_blocks, y.data()).ok());
    EXPECT_EQ(y[0], 2.0f);
    EXPECT_EQ(y[32 * 2 + 1], 21.0f);
    // Transposed f32 [3 x 2] -> [2 x 3].
    float m[6] = {0, 1, 2, 3, 4, 5};  // ne = {3, 2}: rows {0,1,2}, {3,4,5}
    auto f = Tensor::contiguous_view(DType::F32, {3, 2}, m);
    ASSERT_TRUE(f.ok());
    auto tr = f->transpose(0, 1);
    ASSERT_TRUE(tr.ok());
    float out[6];
    ASSERT_TRUE(dequantize_tensor(*tr, out).ok());
    const float want[6] = {0, 3, 1, 4, 2, 5};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], want[i]) << i;
    Tensor bad = *t;
    bad.nb[0] = 40;  // corrupt stride of a block type
    bad.ne[1] = 1;
    EXPECT_FALSE(dequantize_tensor(bad, y.data()).ok());
}

}  // namespace
}  // namespace pelican
