#include "ops/act_quant.h"

#include <cassert>
#include <cmath>

namespace pelican {

int act_quant_block(DType t) {
    switch (t) {
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q8_0:
            return kActBlock32;
        case DType::Q2_K:
        case DType::Q3_K:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
            return kActBlock256;
        default:
            return 0;
    }
}

namespace ref {
namespace {

// Quantizes one block of len values; returns d. Every step is one fp32 IEEE operation.
float quantize_block(const float* x, int len, int8_t* qs) {
    float amax = 0.0f;
    for (int j = 0; j < len; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < len; ++j) {
        const float v = x[j] * iscale;
        qs[j] = static_cast<int8_t>(std::nearbyint(v));  // default rounding mode: ties to even
    }
    return d;
}

}  // namespace

void quantize_act_q32(const float* x, int64_t n, int8_t* qs, float* d, float* s) {
    assert(n % kActBlock32 == 0);
    for (int64_t b = 0; b < n / kActBlock32; ++b) {
        int8_t* q = qs + b * kActBlock32;
        d[b] = quantize_block(x + b * kActBlock32, kActBlock32, q);
        int sum = 0;
        for (int j = 0; j < kActBlock32; ++j) sum += q[j];
        s[b] = d[b] * static_cast<float>(sum);
    }
}

void quantize_act_q256(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsum) {
    assert(n % kActBlock256 == 0);
    for (int64_t b = 0; b < n / kActBlock256; ++b) {
        int8_t* q = qs + b * kActBlock256;
        d[b] = quantize_block(x + b * kActBlock256, kActBlock256, q);
        for (int k = 0; k < kActBlock256 / 16; ++k) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += q[16 * k + j];
            bsum[b * 16 + k] = static_cast<int16_t>(sum);
        }
    }
}

void dequantize_act(const ActQ8& a, int64_t r, float* x) {
    const int8_t* qs = a.qs + r * a.n;
    const float* d = a.d + r * (a.n / a.block);
    for (int64_t i = 0; i < a.n; ++i) x[i] = d[i / a.block] * static_cast<float>(qs[i]);
}

}  // namespace ref
}  // namespace pelican
