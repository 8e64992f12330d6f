// AVX2 kernels for Q4_K / Q5_K / Q6_K weights (GGUF rows) against 256-block int8 activations;
// same algebra as matmul_kquant_avx512.cpp with 32-byte vectors:
//   Q4_K, Q5_K: sum w x = d_x (d sum_j sc_j (u.q)_j - dmin sum_j m_j (q-sums)_j)
//   Q6_K:       sum w x = d_x d (sum_k sc_k (u.q)_k - 32 sum_k sc_k (q-sums)_k)
// u.q: vpmaddubsw (u8 x s8 -> s16, no saturation for u <= 63), then vpmaddwd with the scales.
#include <type_traits>

#include "backend/cpu/kernels_avx2.h"
#include "backend/cpu/simd_avx2.h"
#include "core/blocks.h"

namespace pelican::cpu::detail {
namespace {

struct Unpacked {
    __m256i u[8];   // unsigned codes for activation bytes [32i, 32i + 32)
    __m256i sc[8];  // int16 scale per int16 lane of maddubs(u[i], x)
    __m256i minv;   // int16 multipliers of the 16 activation 16-sums
    float d_main, d_min;
};

inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

template <WType kType>
inline void unpack(const uint8_t* blk, Unpacked* w) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if constexpr (kType == WType::Q4_K || kType == WType::Q5_K) {
        using Block = std::conditional_t<kType == WType::Q4_K, BlockQ4_K, BlockQ5_K>;
        const auto* b = reinterpret_cast<const Block*>(blk);
        const uint32_t a0 = load_u32(b->scales), a1 = load_u32(b->scales + 4), a2 = load_u32(b->scales + 8);
        const uint32_t sc_lo = a0 & 0x3f3f3f3fu, m_lo = a1 & 0x3f3f3f3fu;
        const uint32_t sc_hi = (a2 & 0x0f0f0f0fu) | (((a0 >> 6) & 0x03030303u) << 4);
        const uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0fu) | (((a1 >> 6) & 0x03030303u) << 4);
        const uint64_t sc = sc_lo | static_cast<uint64_t>(sc_hi) << 32;
        const __m128i mn = _mm_cvtepu8_epi16(
            _mm_cvtsi64_si128(static_cast<long long>(m_lo | static_cast<uint64_t>(m_hi) << 32)));
        __m256i qh = _mm256_setzero_si256();
        if constexpr (kType == WType::Q5_K) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh));
        const __m256i one = _mm256_set1_epi8(1);
        for (int c = 0; c < 4; ++c) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * c));
            w->u[2 * c] = _mm256_and_si256(q, m4);
            w->u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if constexpr (kType == WType::Q5_K) {
                const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
                const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
                w->u[2 * c] = _mm256_or_si256(w->u[2 * c], _mm256_slli_epi16(lo, 4));
                w->u[2 * c + 1] = _mm256_or_si256(w->u[2 * c + 1], _mm256_slli_epi16(hi, 4));
            }
        }
        for (int j = 0; j < 8; ++j) w->sc[j] = _mm256_set1_epi16(static_cast<short>((sc >> (8 * j)) & 0xff));
        w->minv = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
        w->d_main = avx2::half_to_float(b->d);
        w->d_min = -avx2::half_to_float(b->dmin);
    } else {  // Q6_K: per half h, q1..q4 (32 elements each) with two 16-element scales each
        const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
        const __m256i three = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
            const __m256i lo[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                                   _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
            for (int k = 0; k < 4; ++k) {
                const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), three);
                w->u[4 * h + k] = _mm256_or_si256(lo[k], _mm256_slli_epi16(hb, 4));
                const int s0 = b->scales[8 * h + 2 * k], s1 = b->scales[8 * h + 2 * k + 1];
                w->sc[4 * h + k] = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(s1)),
                                                    _mm_set1_epi16(static_cast<short>(s0)));
            }
        }
        w->minv = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
        w->d_main = avx2::half_to_float(b->d);
        w->d_min = -32.0f * w->d_main;
    }
}

template <WType kType, int kT>
inline void row_tile(const MatmulArgs& a, int64_t r, int64_t t) {
    constexpr int64_t kBlockBytes = kType == WType::Q4_K   ? sizeof(BlockQ4_K)
                                    : kType == WType::Q5_K ? sizeof(BlockQ5_K)
                                                           : sizeof(BlockQ6_K);
    const int64_t nb = a.n_in / 256;
    const uint8_t* row = a.w + r * a.w_stride;
    __m256 acc[kT], accm[kT];
    for (int j = 0; j < kT; ++j) acc[j] = accm[j] = _mm256_setzero_ps();
    Unpacked w;
    for (int64_t b = 0; b < nb; ++b) {
        unpack<kType>(row + b * kBlockBytes, &w);
        for (int j = 0; j < kT; ++j) {
            const int64_t tok = t + j;
            const int8_t* xq = a.xq + tok * a.n_in + 256 * b;
            __m256i isum = _mm256_setzero_si256();
            for (int i = 0; i < 8; ++i) {
                const __m256i p = _mm256_maddubs_epi16(
                    w.u[i], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * i)));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, w.sc[i]));
            }
            const __m256i bs =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xbsum + tok * (a.n_in / 16) + 16 * b));
            const __m256i msum = _mm256_madd_epi16(w.minv, bs);
            const float dx = a.xd[tok * nb + b];
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(w.d_main * dx), acc[j]);
            accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(w.d_min * dx), accm[j]);
        }
    }
    for (int j = 0; j < kT; ++j) a.y[(t + j) * a.n_out + r] = avx2::hsum(acc[j]) + avx2::hsum(accm[j]);
}

template <WType kType>
void kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    constexpr int kT = 2;
    for (int64_t r = r0; r < r1; ++r) {
        int64_t t = t0;
        for (; t + kT <= t1; t += kT) row_tile<kType, kT>(a, r, t);
        for (; t < t1; ++t) row_tile<kType, 1>(a, r, t);
    }
}

}  // namespace

void matmul_q4_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q4_K>(a, r0, r1, t0, t1);
}
void matmul_q5_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q5_K>(a, r0, r1, t0, t1);
}
void matmul_q6_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q6_K>(a, r0, r1, t0, t1);
}

}  // namespace pelican::cpu::detail
