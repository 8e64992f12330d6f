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

// 4 bytes at p (any alignment) broadcast to all 16 int32 lanes.
static inline __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace pelican::cpu::detail::avx512
