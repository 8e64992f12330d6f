// AVX-512 attention for one query token and one KV head group (see attention.cpp): the same
// online-softmax loop as the scalar kernel with 16-lane dot products, exp and p * V updates.
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/simd_avx512.h"

namespace pelican::cpu::detail {
namespace {

constexpr int kKeyBlock = 64;
constexpr int kMaxGroup = 16;

// 16 cache elements starting at base + idx (masked lanes read as 0).
inline __m512 load_kv(const void* base, bool f16, int64_t idx, __mmask16 m) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + idx));
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + idx);
}

inline __mmask16 lane_mask(int i, int n) {
    return n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
}

}  // namespace

void attention_group_avx512(const AttnGroupArgs& a) {
    const int hd = a.head_dim, ng = a.group;
    alignas(64) float s[kMaxGroup][kKeyBlock];  // scores, then probabilities p
    float m[kMaxGroup], l[kMaxGroup], corr[kMaxGroup];
    for (int g = 0; g < ng; ++g) {
        m[g] = -__builtin_inff();
        l[g] = 0.0f;
        for (int d = 0; d < hd; d += 16)
            _mm512_mask_storeu_ps(a.out + g * hd + d, lane_mask(d, hd), _mm512_setzero_ps());
    }
    for (int64_t j0 = a.first; j0 <= a.last; j0 += kKeyBlock) {
        const int nk = static_cast<int>(a.last - j0 + 1 < kKeyBlock ? a.last - j0 + 1 : kKeyBlock);
        // Scores: each K row is loaded once for all query heads of the group.
        for (int j = 0; j < nk; ++j) {
            const int64_t base = (j0 + j) * a.pos_stride;
            __m512 acc[kMaxGroup];
            for (int g = 0; g < ng; ++g) acc[g] = _mm512_setzero_ps();
            for (int d = 0; d < hd; d += 16) {
                const __mmask16 mk = lane_mask(d, hd);
                const __m512 kv = load_kv(a.k, a.f16, base + d, mk);
                for (int g = 0; g < ng; ++g)
                    acc[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a.q + g * hd + d), kv, acc[g]);
            }
            for (int g = 0; g < ng; ++g) s[g][j] = avx512::hsum(acc[g]) * a.scale;
        }
        // Online softmax: new max, rescale factor, p = exp(s - m_new), running sum l.
        for (int g = 0; g < ng; ++g) {
            __m512 vmax = _mm512_set1_ps(-__builtin_inff());
            for (int j = 0; j < nk; j += 16)
                vmax = _mm512_mask_max_ps(vmax, lane_mask(j, nk), vmax, _mm512_loadu_ps(s[g] + j));
            const float bmax = _mm512_reduce_max_ps(vmax);
            const float m_new = m[g] > bmax ? m[g] : bmax;
            corr[g] = __builtin_expf(m[g] - m_new);  // 0 for the first block (m = -inf)
            m[g] = m_new;
            const __m512 mv = _mm512_set1_ps(m_new);
            __m512 psum = _mm512_setzero_ps();
            for (int j = 0; j < nk; j += 16) {
                const __mmask16 mk = lane_mask(j, nk);
                const __m512 p =
                    _mm512_maskz_mov_ps(mk, avx512::exp_ps(_mm512_sub_ps(_mm512_loadu_ps(s[g] + j), mv)));
                _mm512_storeu_ps(s[g] + j, p);
                psum = _mm512_add_ps(psum, p);
            }
            l[g] = l[g] * corr[g] + avx512::hsum(psum);
        }
        // out = out * corr + sum_j p_j V_j, 16 dims at a time with the group's accumulators in
        // registers; each V row slice is loaded once for the group.
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 mk = lane_mask(d, hd);
            __m512 acc[kMaxGroup];
            for (int g = 0; g < ng; ++g)
                acc[g] =
                    _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, a.out + g * hd + d), _mm512_set1_ps(corr[g]));
            for (int j = 0; j < nk; ++j) {
                const __m512 vv = load_kv(a.v, a.f16, (j0 + j) * a.pos_stride + d, mk);
                for (int g = 0; g < ng; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(s[g][j]), vv, acc[g]);
            }
            for (int g = 0; g < ng; ++g) _mm512_mask_storeu_ps(a.out + g * hd + d, mk, acc[g]);
        }
    }
    for (int g = 0; g < ng; ++g) {
        const __m512 inv = _mm512_set1_ps(1.0f / l[g]);
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 mk = lane_mask(d, hd);
            _mm512_mask_storeu_ps(a.out + g * hd + d, mk,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, a.out + g * hd + d), inv));
        }
    }
}

}  // namespace pelican::cpu::detail
