// AVX-512 activation quantizers: bit-identical to ref::quantize_act_q32 / _q256 (same fp32
// operations; vcvtps2dq rounds to nearest even like nearbyint in the default rounding mode).
#include "backend/cpu/kernels_avx512.h"
#include "backend/cpu/simd_avx512.h"

namespace pelican::cpu::detail {
namespace {

// Quantizes n16 * 16 floats with one scale; writes the int8 values and returns d. sums[k] =
// sum of the k-th group of 16 quants (when sums != nullptr).
template <int kN16>
inline float quantize_block(const float* x, int8_t* qs, int32_t* sums) {
    __m512 v[kN16];
    __m512 amax = _mm512_setzero_ps();
    for (int k = 0; k < kN16; ++k) {
        v[k] = _mm512_loadu_ps(x + 16 * k);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(v[k]));
    }
    const float m = _mm512_reduce_max_ps(amax);
    const float d = m / 127.0f;
    const float iscale = m != 0.0f ? 127.0f / m : 0.0f;
    const __m512 is = _mm512_set1_ps(iscale);
    for (int k = 0; k < kN16; ++k) {
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[k], is));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * k), _mm512_cvtsepi32_epi8(q));
        sums[k] = _mm512_reduce_add_epi32(q);
    }
    return d;
}

}  // namespace

void quantize_act32_avx512(const float* x, int64_t n, int8_t* qs, float* d, float* s) {
    for (int64_t b = 0; b < n / 32; ++b) {
        int32_t sums[2];
        d[b] = quantize_block<2>(x + 32 * b, qs + 32 * b, sums);
        s[b] = d[b] * static_cast<float>(sums[0] + sums[1]);
    }
}

void quantize_act256_avx512(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsum) {
    for (int64_t b = 0; b < n / 256; ++b) {
        int32_t sums[16];
        d[b] = quantize_block<16>(x + 256 * b, qs + 256 * b, sums);
        for (int k = 0; k < 16; ++k) bsum[16 * b + k] = static_cast<int16_t>(sums[k]);
    }
}

}  // namespace pelican::cpu::detail
