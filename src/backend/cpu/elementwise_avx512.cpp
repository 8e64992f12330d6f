// AVX-512 versions of the exp-heavy and reduction element-wise ops (semantics and formulas as in
// elementwise.cpp; exp by avx512::exp_ps, <= 3u relative).
#include "backend/cpu/elementwise_kernels.h"
#include "backend/cpu/simd_avx512.h"

namespace pelican::cpu::detail {
namespace {

inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// x / (1 + exp(-x)) for 16 lanes.
inline __m512 silu16(__m512 x) {
    const __m512 e = avx512::exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace

void rms_norm_row_avx512(const float* x, const float* w, float* y, int64_t n, float eps, bool one_plus) {
    __m512 ss = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        ss = _mm512_fmadd_ps(v, v, ss);
    }
    const float inv = 1.0f / __builtin_sqrtf(_mm512_reduce_add_ps(ss) / static_cast<float>(n) + eps);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv);
        if (w) {
            __m512 wv = _mm512_maskz_loadu_ps(m, w + i);
            if (one_plus) wv = _mm512_add_ps(wv, _mm512_set1_ps(1.0f));
            v = _mm512_mul_ps(v, wv);
        }
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

void softmax_row_avx512(float* x, int64_t n) {
    __m512 mx = _mm512_set1_ps(-__builtin_inff());
    for (int64_t i = 0; i < n; i += 16)
        mx = _mm512_mask_max_ps(mx, tail_mask(n - i), mx, _mm512_loadu_ps(x + i));
    const float m = _mm512_reduce_max_ps(mx);
    if (m == -__builtin_inff()) {
        for (int64_t i = 0; i < n; i += 16)
            _mm512_mask_storeu_ps(x + i, tail_mask(n - i), _mm512_setzero_ps());
        return;
    }
    const __m512 vm = _mm512_set1_ps(m);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 e =
            _mm512_maskz_mov_ps(k, avx512::exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        _mm512_mask_storeu_ps(x + i, k, e);
        sum = _mm512_add_ps(sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
    }
}

void silu_avx512(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, k, silu16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

void swiglu_avx512(const float* gate, const float* up, float* y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 s = silu16(_mm512_maskz_loadu_ps(k, gate + i));
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

void sigmoid_mul_avx512(float* x, const float* gate, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 e =
            avx512::exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, gate + i)));
        _mm512_mask_storeu_ps(x + i, k,
                              _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_add_ps(one, e)));
    }
}

float sum_squares_avx512(const float* x, int64_t n) {
    __m512 ss = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        ss = _mm512_fmadd_ps(v, v, ss);
    }
    return _mm512_reduce_add_ps(ss);
}

void gelu_tanh_avx512(const float* x, float* y, int64_t n) {
    const __m512 k0 = _mm512_set1_ps(0.7978845608028654f), k1 = _mm512_set1_ps(0.044715f);
    const __m512 m2 = _mm512_set1_ps(-2.0f), one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        // same operation order as the portable version: k0 * (v + ((k1 * v) * v) * v)
        const __m512 c = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(k1, v), v), v);
        const __m512 z = _mm512_mul_ps(k0, _mm512_add_ps(v, c));
        const __m512 e = avx512::exp_ps(_mm512_mul_ps(m2, z));
        _mm512_mask_storeu_ps(y + i, k, _mm512_div_ps(v, _mm512_add_ps(one, e)));
    }
}

}  // namespace pelican::cpu::detail
