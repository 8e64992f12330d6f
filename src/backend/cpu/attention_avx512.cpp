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

// Horizontal sums of 16 vectors at once: lane i of the result = sum of the lanes of v[i]. Four
// halving rounds (512 -> 256 -> 128 -> 64 -> 32 bits per partial), 3 ops per combined pair, then
// one permute into natural order: ~46 ops instead of 16 separate reductions (~8 ops each).
inline __m512 reduce16(__m512 v[16]) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i)  // halves of v[i] | halves of v[i + 8]
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44),
                             _mm512_shuffle_f32x4(v[i], v[i + 8], 0xee));
    for (int i = 0; i < 4; ++i)  // quarters: v[i], v[i+8], v[i+4], v[i+12]
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 4], 0x88),
                             _mm512_shuffle_f32x4(a[i], a[i + 4], 0xdd));
    for (int i = 0; i < 2; ++i)  // per quarter: 2-lane partials of b[i], b[i + 2]
        c[i] =
            _mm512_add_ps(_mm512_shuffle_ps(b[i], b[i + 2], 0x44), _mm512_shuffle_ps(b[i], b[i + 2], 0xee));
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xdd));
    // y lane 4Q + L holds v[{0, 2, 1, 3}[L] + {0, 8, 4, 12}[Q]]; put v[i] in lane i.
    const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
    return _mm512_permutexvar_ps(order, y);
}

// Scores of 16 keys (rows base + j * pos_stride) against one query head q; hd = 16 * kChunks
// (kChunks 0: any hd, q read from memory). Keys j >= nk16 repeat row nk16 - 1 (always in bounds)
// and their lanes are garbage for the caller to mask. Fixed trip counts keep the 16 accumulators
// in registers.
template <int kChunks>
inline __m512 scores16(const float* q, const void* k, bool f16, int64_t base, int64_t pos_stride, int nk16,
                       int hd) {
    __m512 acc[16];
    int64_t row[16];
    for (int j = 0; j < 16; ++j) {
        acc[j] = _mm512_setzero_ps();
        row[j] = base + (j < nk16 ? j : nk16 - 1) * pos_stride;
    }
    if constexpr (kChunks > 0) {
        __m512 qv[kChunks];
        for (int c = 0; c < kChunks; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j)
#pragma GCC unroll 8
            for (int c = 0; c < kChunks; ++c)
                acc[j] = _mm512_fmadd_ps(qv[c], load_kv(k, f16, row[j] + 16 * c, 0xffff), acc[j]);
    } else {
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 mk = lane_mask(d, hd);
            const __m512 qd = _mm512_maskz_loadu_ps(mk, q + d);
#pragma GCC unroll 16
            for (int j = 0; j < 16; ++j)
                acc[j] = _mm512_fmadd_ps(qd, load_kv(k, f16, row[j] + d, mk), acc[j]);
        }
    }
    return reduce16(acc);
}

// out[g] = out[g] * corr[g] + sum_j p[g][j] V_j for kNG query heads (a compile-time count keeps
// the kNG accumulators in registers), 16 dims at a time; V rows at base + j * pos_stride.
template <int kNG>
inline void pv_update(float* out, const void* v, bool f16, int64_t base, int64_t pos_stride, int nk, int hd,
                      const float (*p)[kKeyBlock], const float* corr) {
    for (int d = 0; d < hd; d += 16) {
        const __mmask16 mk = lane_mask(d, hd);
        __m512 acc[kNG];
        for (int g = 0; g < kNG; ++g)
            acc[g] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, out + g * hd + d), _mm512_set1_ps(corr[g]));
        for (int j = 0; j < nk; ++j) {
            const __m512 vv = load_kv(v, f16, base + j * pos_stride + d, mk);
            for (int g = 0; g < kNG; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(p[g][j]), vv, acc[g]);
        }
        for (int g = 0; g < kNG; ++g) _mm512_mask_storeu_ps(out + g * hd + d, mk, acc[g]);
    }
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
    for (int64_t j0 = a.first; j0 <= a.last;) {
        const void *kc, *vc;
        int64_t r0;
        const int nk = key_chunk(a, j0, kKeyBlock, &kc, &vc, &r0);
        // Scores, 16 keys x one head at a time (the K block stays in L1 across the group's heads).
        const __m512 vscale = _mm512_set1_ps(a.scale);
        for (int g = 0; g < ng; ++g) {
            for (int j = 0; j < nk; j += 16) {
                const int n16 = nk - j < 16 ? nk - j : 16;
                const int64_t base = (r0 + j) * a.pos_stride;
                __m512 sv;
                if (hd == 64) {
                    sv = scores16<4>(a.q + g * hd, kc, a.f16, base, a.pos_stride, n16, hd);
                } else if (hd == 128) {
                    sv = scores16<8>(a.q + g * hd, kc, a.f16, base, a.pos_stride, n16, hd);
                } else {
                    sv = scores16<0>(a.q + g * hd, kc, a.f16, base, a.pos_stride, n16, hd);
                }
                _mm512_storeu_ps(s[g] + j, _mm512_mul_ps(sv, vscale));
            }
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
        // out = out * corr + sum_j p_j V_j (each V row slice loaded once for the group).
        // clang-format off
        switch (ng) {
#define PELICAN_PV_CASE(n) \
    case n: pv_update<n>(a.out, vc, a.f16, r0 * a.pos_stride, a.pos_stride, nk, hd, s, corr); break;
            PELICAN_PV_CASE(1) PELICAN_PV_CASE(2) PELICAN_PV_CASE(3) PELICAN_PV_CASE(4)
            PELICAN_PV_CASE(5) PELICAN_PV_CASE(6) PELICAN_PV_CASE(7) PELICAN_PV_CASE(8)
            PELICAN_PV_CASE(9) PELICAN_PV_CASE(10) PELICAN_PV_CASE(11) PELICAN_PV_CASE(12)
            PELICAN_PV_CASE(13) PELICAN_PV_CASE(14) PELICAN_PV_CASE(15) PELICAN_PV_CASE(16)
#undef PELICAN_PV_CASE
            default: break;
        }
        // clang-format on
        j0 += nk;
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
