// Small AVX-512 helpers shared by the *_avx512.cpp translation units. Every function is static
// (internal linkage), so no AVX-512 code can leak into code that runs on other CPUs.
#pragma once

// GCC 12's AVX-512 intrinsic headers build _mm512_undefined_*() from a self-initialised variable,
// which -Wuninitialized reports wherever such an intrinsic is inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace pelican::cpu::detail::avx512 {

// 4 bytes at p (any alignment) broadcast to all 16 int32 lanes. Read through a may_alias type
// (not memcpy) so the compiler can fold the load into the consumer as an embedded broadcast
// (vpdpbusd zmm, zmm, m32{1to16}): one instruction instead of two.
typedef int32_t unaligned_i32 __attribute__((may_alias, aligned(1)));
static inline __m512i bcast4(const int8_t* p) {
    return _mm512_set1_epi32(*reinterpret_cast<const unaligned_i32*>(p));
}

// Prefetches the cache line holding address a into L1 (a may lie past the end of a buffer:
// prefetches never fault; integer addresses keep the pointer arithmetic defined).
static inline void prefetch(uintptr_t a) { _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0); }

static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// exp(x) for 16 lanes: relative error <= 3u (u = 2^-24) over the whole range; exp(-inf) = 0,
// results below the fp32 range flush to 0, above it saturate to inf. exp(x) = 2^n exp(r) with
// n = round(x / ln2), r = x - n ln2 (ln2 split in two, the first part with few mantissa bits so
// n * ln2_hi is exact), exp(r) for |r| <= ln2/2 by its degree-7 Taylor polynomial (truncation
// <= 0.35^8 / 8! < 0.1u), evaluated by Horner with fma (<= ~2u), scaled exactly by vscalefps.
static inline __m512 exp_ps(__m512 x) {
    // Clamping keeps n in [-150, 129]: vscalefps then rounds to 0 / overflows to inf correctly.
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 hi (exact product)
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);     // ln2 lo
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

}  // namespace pelican::cpu::detail::avx512
