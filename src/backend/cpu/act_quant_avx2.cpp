// AVX2 activation quantizers: bit-identical to ref::quantize_act_q32 / _q256 (same fp32
// operations; vcvtps2dq rounds to nearest even like nearbyint in the default rounding mode).
#include "backend/cpu/kernels_avx2.h"
#include "backend/cpu/simd_avx2.h"

namespace pelican::cpu::detail {
namespace {

// Quantizes n8 * 8 floats (n8 a multiple of 4) with one scale: int8 values to qs, the sum of
// every 16 quants to sums[k], returns d.
template <int kN8>
inline float quantize_block(const float* x, int8_t* qs, int32_t* sums) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < kN8; ++k)
        amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(x + 8 * k), abs_mask));
    const float m = avx2::hmax(amax);
    const float d = m / 127.0f;
    const float iscale = m != 0.0f ? 127.0f / m : 0.0f;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int k = 0; k < kN8; k += 4) {
        __m256i q[4];
        for (int j = 0; j < 4; ++j)
            q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * (k + j)), is));
        sums[k / 2] = avx2::hsum_i32(_mm256_add_epi32(q[0], q[1]));
        sums[k / 2 + 1] = avx2::hsum_i32(_mm256_add_epi32(q[2], q[3]));
        // packs work per 128-bit lane; the final permute restores element order
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 8 * k), _mm256_permutevar8x32_epi32(p, perm));
    }
    return d;
}

}  // namespace

void quantize_act32_avx2(const float* x, int64_t n, int8_t* qs, float* d, float* s) {
    for (int64_t b = 0; b < n / 32; ++b) {
        int32_t sums[2];
        d[b] = quantize_block<4>(x + 32 * b, qs + 32 * b, sums);
        s[b] = d[b] * static_cast<float>(sums[0] + sums[1]);
    }
}

void quantize_act256_avx2(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsum) {
    for (int64_t b = 0; b < n / 256; ++b) {
        int32_t sums[16];
        d[b] = quantize_block<32>(x + 256 * b, qs + 256 * b, sums);
        for (int k = 0; k < 16; ++k) bsum[16 * b + k] = static_cast<int16_t>(sums[k]);
    }
}

}  // namespace pelican::cpu::detail
