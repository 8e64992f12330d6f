// Reference round-to-nearest quantizers (see core/dequantize.h for the contract).
// Block scales are rounded UP to fp16 (never down), so the largest magnitude of a block always
// fits the code range and the per-element error stays within half a step.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/blocks.h"
#include "core/dequantize.h"
#include "core/float_convert.h"

namespace pelican {
namespace {

// Smallest fp16 >= x (x finite; overflows to inf past 65504).
uint16_t f16_round_up(float x) {
    uint16_t h = f32_to_f16(x);
    if (f16_to_f32(h) >= x) return h;
    return (h & 0x8000u) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}
// Largest fp16 <= x.
uint16_t f16_round_down(float x) { return static_cast<uint16_t>(f16_round_up(-x) ^ 0x8000u); }

int round_clamp(float v, int lo, int hi) {
    const float r = std::nearbyint(v);              // ties to even
    if (!(r >= static_cast<float>(lo))) return lo;  // also catches NaN
    if (r > static_cast<float>(hi)) return hi;
    return static_cast<int>(r);
}

float amax_of(const float* x, int n) {
    float a = 0;
    for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
    return a;
}

template <typename B, typename Fn>
void for_out_blocks(void* dst, int64_t n, int qk, Fn fn) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n / qk; ++i) {
        B b{};
        fn(i * qk, b);
        std::memcpy(p + i * sizeof(B), &b, sizeof(B));
    }
}

template <typename T, typename Fn>
void store_elems(const float* src, void* dst, int64_t n, Fn from_f32) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const T v = from_f32(src[i]);
        std::memcpy(p + i * sizeof(T), &v, sizeof(T));
    }
}

// Q8_0 / Q8_1 body: returns sum of the codes.
template <typename B>
int quantize_q8_block(const float* x, B& b) {
    const uint16_t dh = f16_round_up(amax_of(x, kQK4_0) / 127.0f);
    const float d = f16_to_f32(dh);
    const float id = d > 0 ? 1.0f / d : 0.0f;
    b.d = dh;
    int sum = 0;
    for (int i = 0; i < kQK4_0; ++i) {
        b.qs[i] = static_cast<int8_t>(round_clamp(x[i] * id, -127, 127));
        sum += b.qs[i];
    }
    return sum;
}

}  // namespace

namespace ref {

void quantize_f32(const float* src, void* dst, int64_t n) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_f16(const float* src, void* dst, int64_t n) { store_elems<uint16_t>(src, dst, n, f32_to_f16); }
void quantize_bf16(const float* src, void* dst, int64_t n) {
    store_elems<uint16_t>(src, dst, n, f32_to_bf16);
}
void quantize_f8_e4m3(const float* src, void* dst, int64_t n) {
    store_elems<uint8_t>(src, dst, n, f32_to_e4m3);
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ8_0>(dst, n, kQK4_0,
                              [&](int64_t at, BlockQ8_0& b) { quantize_q8_block(src + at, b); });
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ8_1>(dst, n, kQK4_0, [&](int64_t at, BlockQ8_1& b) {
        const int sum = quantize_q8_block(src + at, b);
        b.s = f32_to_f16(f16_to_f32(b.d) * static_cast<float>(sum));
    });
}

// The element of largest magnitude maps to code 0 (-8 steps), as ggml does; values of the other
// sign beyond +7.5 steps clamp to code 15.
void quantize_q4_0(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ4_0>(dst, n, kQK4_0, [&](int64_t at, BlockQ4_0& b) {
        const float* x = src + at;
        float max = 0;
        for (int i = 0; i < kQK4_0; ++i)
            if (std::fabs(x[i]) > std::fabs(max)) max = x[i];
        const uint16_t mag = f16_round_up(std::fabs(max) / 8.0f);
        b.d = max > 0 ? static_cast<uint16_t>(mag | 0x8000u) : mag;  // d = -max / 8
        const float d = f16_to_f32(b.d);
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            const int lo = round_clamp(x[j] * id + 8.0f, 0, 15);
            const int hi = round_clamp(x[j + 16] * id + 8.0f, 0, 15);
            b.qs[j] = static_cast<uint8_t>(lo | hi << 4);
        }
    });
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ4_1>(dst, n, kQK4_0, [&](int64_t at, BlockQ4_1& b) {
        const float* x = src + at;
        const auto [mn, mx] = std::minmax_element(x, x + kQK4_0);
        b.m = f16_round_down(*mn);
        const float m = f16_to_f32(b.m);
        b.d = f16_round_up((*mx - m) / 15.0f);
        const float d = f16_to_f32(b.d);
        const float id = d > 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < kQK4_0 / 2; ++j) {
            const int lo = round_clamp((x[j] - m) * id, 0, 15);
            const int hi = round_clamp((x[j + 16] - m) * id, 0, 15);
            b.qs[j] = static_cast<uint8_t>(lo | hi << 4);
        }
    });
}

// Q4_K: per sub-block of 32, min M_j = dmin*m_j >= -min(x) (rounded up) and step S_j = d*sc_j >=
// (max(x) + M_j) / 15 (rounded up); q = round((x + M_j) / S_j) in [0, 15].
void quantize_q4_k(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ4_K>(dst, n, kQK_K, [&](int64_t at, BlockQ4_K& b) {
        const float* x = src + at;
        float mn[8], mx[8], step[8];
        float mn_max = 0;
        for (int j = 0; j < 8; ++j) {
            const auto [lo, hi] = std::minmax_element(x + 32 * j, x + 32 * j + 32);
            mn[j] = std::max(0.0f, -*lo);
            mx[j] = *hi;
            mn_max = std::max(mn_max, mn[j]);
        }
        b.dmin = f16_round_up(mn_max / 63.0f);
        const float dmin = f16_to_f32(b.dmin);
        uint8_t ms[8], scs[8];
        float step_max = 0;
        for (int j = 0; j < 8; ++j) {
            ms[j] = static_cast<uint8_t>(dmin > 0 ? std::min(63.0f, std::ceil(mn[j] / dmin)) : 0);
            step[j] = std::max(0.0f, (mx[j] + dmin * ms[j]) / 15.0f);
            step_max = std::max(step_max, step[j]);
        }
        b.d = f16_round_up(step_max / 63.0f);
        const float d = f16_to_f32(b.d);
        for (int j = 0; j < 8; ++j)
            scs[j] = static_cast<uint8_t>(d > 0 ? std::min(63.0f, std::ceil(step[j] / d)) : 0);
        for (int j = 0; j < 4; ++j) {
            b.scales[j] = static_cast<uint8_t>(scs[j] | (scs[j + 4] >> 4) << 6);
            b.scales[j + 4] = static_cast<uint8_t>(ms[j] | (ms[j + 4] >> 4) << 6);
            b.scales[j + 8] = static_cast<uint8_t>((scs[j + 4] & 15) | (ms[j + 4] & 15) << 4);
        }
        for (int c = 0; c < 4; ++c) {
            int q[2][32];
            for (int part = 0; part < 2; ++part) {
                const int j = 2 * c + part;
                const float s = d * scs[j], off = dmin * ms[j];
                const float is = s > 0 ? 1.0f / s : 0.0f;
                for (int l = 0; l < 32; ++l) q[part][l] = round_clamp((x[32 * j + l] + off) * is, 0, 15);
            }
            for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(q[0][l] | q[1][l] << 4);
        }
    });
}

// Q6_K: per sub-block of 16, step S_j = d*sc_j >= amax_j / 31, q = round(x / S_j) in [-31, 31].
void quantize_q6_k(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ6_K>(dst, n, kQK_K, [&](int64_t at, BlockQ6_K& b) {
        const float* x = src + at;
        float step[16], step_max = 0;
        for (int j = 0; j < 16; ++j) {
            step[j] = amax_of(x + 16 * j, 16) / 31.0f;
            step_max = std::max(step_max, step[j]);
        }
        b.d = f16_round_up(step_max / 127.0f);
        const float d = f16_to_f32(b.d);
        int q[kQK_K];  // biased codes 0..63
        for (int j = 0; j < 16; ++j) {
            const int sc = d > 0 ? static_cast<int>(std::min(127.0f, std::ceil(step[j] / d))) : 0;
            b.scales[j] = static_cast<int8_t>(sc);
            const float s = d * static_cast<float>(sc);
            const float is = s > 0 ? 1.0f / s : 0.0f;
            for (int l = 0; l < 16; ++l) q[16 * j + l] = round_clamp(x[16 * j + l] * is, -32, 31) + 32;
        }
        for (int h = 0; h < 2; ++h) {
            const int* qh_ = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int q1 = qh_[l], q2 = qh_[l + 32], q3 = qh_[l + 64], q4 = qh_[l + 96];
                b.ql[64 * h + l] = static_cast<uint8_t>((q1 & 15) | (q3 & 15) << 4);
                b.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 15) | (q4 & 15) << 4);
                b.qh[32 * h + l] =
                    static_cast<uint8_t>((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    });
}

// Q8_K: fp32 scale d = amax / 127; bsums hold the sums of each 16 codes.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
    for_out_blocks<BlockQ8_K>(dst, n, kQK_K, [&](int64_t at, BlockQ8_K& b) {
        const float* x = src + at;
        b.d = amax_of(x, kQK_K) / 127.0f;
        const float id = b.d > 0 ? 1.0f / b.d : 0.0f;
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) {
                b.qs[16 * j + l] = static_cast<int8_t>(round_clamp(x[16 * j + l] * id, -127, 127));
                sum += b.qs[16 * j + l];
            }
            b.bsums[j] = static_cast<int16_t>(sum);
        }
    });
}

}  // namespace ref
}  // namespace pelican
