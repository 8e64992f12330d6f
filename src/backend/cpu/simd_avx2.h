// Small AVX2 helpers shared by the *_avx2.cpp translation units. Every function is static
// (internal linkage), so no AVX2 code can leak into code that runs on older CPUs.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace pelican::cpu::detail::avx2 {

static inline float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static inline int32_t hsum_i32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    return _mm_cvtsi128_si32(h);
}

static inline float hmax(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// u8 x s8 dot of 32 bytes into 8 int32 lanes (|u| * |s| * 2 must fit int16: callers ensure it).
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

}  // namespace pelican::cpu::detail::avx2
