// AVX-512 kernels for Q4_K / Q5_K / Q6_K weights (GGUF rows) against 256-block int8 activations
// (ops/act_quant.h: one scale per 256, sums of every 16 quants).
//
// A super-block is unpacked once into four 64-byte vectors of unsigned codes u (chunk c pairs
// with activation bytes [64c, 64c + 64)), four per-lane int16 scale vectors, and one 16 x int16
// vector that weights the activation 16-sums for the zero point / min term:
//   Q4_K, Q5_K: w = d sc u - dmin m       -> sum w x = d_x (d  sum sc (u.q) - dmin sum m (q-sums))
//   Q6_K:       w = d sc (u - 32)         -> sum w x = d_x (d  sum sc (u.q) - 32 d sum sc (q-sums))
// u.q per lane pair: vpmaddubsw (u8 x s8 -> s16, |.| <= 63 * 127 * 2: no saturation), then
// vpmaddwd with the scales (-> s32). A tile of up to kT tokens reuses the unpacked weights.
#include "backend/cpu/kernels_avx512.h"
#include "backend/cpu/simd_avx512.h"
#include <type_traits>

#include "core/blocks.h"

namespace pelican::cpu::detail {
namespace {

struct Unpacked {
    __m512i u[4];   // unsigned codes for activation bytes [64c, 64c + 64)
    __m512i sc[4];  // int16 scale of each int16 lane of maddubs(u[c], x)
    __m256i minv;   // int16 multipliers of the 16 activation 16-sums
    float d_main;   // multiplies the scaled dot
    float d_min;    // multiplies minv . bsum (negative: it is subtracted)
};

inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Q4_K/Q5_K packed 6-bit scales and mins -> 8 int16 each (see blocks.h / ref::unpack_k_scale_min).
inline void unpack_scales_mins(const uint8_t* s, __m128i* sc, __m128i* mn) {
    const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
    const uint32_t sc_lo = a & 0x3f3f3f3fu, m_lo = b & 0x3f3f3f3fu;
    const uint32_t sc_hi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
    *sc = _mm_cvtepu8_epi16(
        _mm_cvtsi64_si128(static_cast<long long>(sc_lo | static_cast<uint64_t>(sc_hi) << 32)));
    *mn = _mm_cvtepu8_epi16(
        _mm_cvtsi64_si128(static_cast<long long>(m_lo | static_cast<uint64_t>(m_hi) << 32)));
}

// Lane index vector: int16 lane k (0..31) -> base + k / per.
inline __m512i lane_index(int base, int per) {
    alignas(64) int16_t idx[32];
    for (int k = 0; k < 32; ++k) idx[k] = static_cast<int16_t>(base + k / per);
    return _mm512_load_si512(idx);
}

struct IndexTables {
    __m512i q4k[4];  // chunk c: lanes 0..15 -> scale 2c, 16..31 -> 2c + 1
    __m512i q6k[4];  // chunk c: lane k -> scale 4c + k / 8
    IndexTables() {
        for (int c = 0; c < 4; ++c) {
            q4k[c] = lane_index(2 * c, 16);
            q6k[c] = lane_index(4 * c, 8);
        }
    }
};

template <WType kType>
inline void unpack(const uint8_t* blk, const IndexTables& ix, Unpacked* w) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    if constexpr (kType == WType::Q4_K || kType == WType::Q5_K) {
        using Block = std::conditional_t<kType == WType::Q4_K, BlockQ4_K, BlockQ5_K>;
        const auto* b = reinterpret_cast<const Block*>(blk);
        __m128i sc, mn;
        unpack_scales_mins(b->scales, &sc, &mn);
        const __m512i sc512 = _mm512_castsi128_si512(sc);
        // lanes of the low 256 bits take the low nibbles (sub-block 2c), the high 256 bits the
        // high nibbles (sub-block 2c + 1): one 16-bit variable shift by 0 | 4.
        const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        for (int c = 0; c < 4; ++c) {
            const __m512i q =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * c)));
            w->u[c] = _mm512_and_si512(_mm512_srlv_epi16(q, nib_shift), m4);
            w->sc[c] = _mm512_permutexvar_epi16(ix.q4k[c], sc512);
        }
        if constexpr (kType == WType::Q5_K) {
            // fifth bit: bit 2c of qh[l] for the low half, 2c + 1 for the high half.
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh)));
            const __m512i one = _mm512_set1_epi8(1);
            for (int c = 0; c < 4; ++c) {
                const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * c)),
                                                      _mm256_set1_epi16(static_cast<short>(2 * c + 1)), 1);
                const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, sh), one);
                w->u[c] = _mm512_or_si512(w->u[c], _mm512_slli_epi16(bit, 4));
            }
        }
        w->minv = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
        w->d_main = avx512::half_to_float(b->d);
        w->d_min = -avx512::half_to_float(b->dmin);
    } else {  // Q6_K
        const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
        const __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        const __m512i three = _mm512_set1_epi8(3);
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h)));
            // chunk 2h: lo nibbles of ql[0..64) | qh bits (0,1) / (2,3); chunk 2h+1: hi nibbles | bits (4,5)
            // / (6,7)
            const __m512i sh_a = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
            const __m512i sh_b = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
            const __m512i ha = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh_a), three), 4);
            const __m512i hb = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh_b), three), 4);
            w->u[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), ha);
            w->u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hb);
        }
        for (int c = 0; c < 4; ++c) w->sc[c] = _mm512_permutexvar_epi16(ix.q6k[c], sc512);
        w->minv = sc16;
        w->d_main = avx512::half_to_float(b->d);
        w->d_min = -32.0f * w->d_main;
    }
}

constexpr int64_t kPrefetchBlocks = 12;

// One row, kT tokens starting at t.
template <WType kType, int kT>
inline void row_tile(const MatmulArgs& a, const IndexTables& ix, int64_t r, int64_t t) {
    constexpr int64_t kBlockBytes = kType == WType::Q4_K   ? sizeof(BlockQ4_K)
                                    : kType == WType::Q5_K ? sizeof(BlockQ5_K)
                                                           : sizeof(BlockQ6_K);
    const int64_t nb = a.n_in / 256;
    const uint8_t* row = a.w + r * a.w_stride;
    __m512 acc[kT];
    __m256 accm[kT];
    for (int j = 0; j < kT; ++j) {
        acc[j] = _mm512_setzero_ps();
        accm[j] = _mm256_setzero_ps();
    }
    Unpacked w;
    for (int64_t b = 0; b < nb; ++b) {
        // Software prefetch kPrefetchBlocks super-blocks ahead (one row stream; see q32 kernel).
        const uintptr_t pf = reinterpret_cast<uintptr_t>(row) + (b + kPrefetchBlocks) * kBlockBytes;
        for (int64_t o = 0; o < kBlockBytes; o += 64) avx512::prefetch(pf + o);
        unpack<kType>(row + b * kBlockBytes, ix, &w);
        for (int j = 0; j < kT; ++j) {
            const int64_t tok = t + j;
            const int8_t* xq = a.xq + tok * a.n_in + 256 * b;
            __m512i isum = _mm512_setzero_si512();
            for (int c = 0; c < 4; ++c) {
                const __m512i p = _mm512_maddubs_epi16(w.u[c], _mm512_loadu_si512(xq + 64 * c));
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, w.sc[c]));
            }
            const __m256i bs =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xbsum + tok * (a.n_in / 16) + 16 * b));
            const __m256i msum = _mm256_madd_epi16(w.minv, bs);
            const float dx = a.xd[tok * nb + b];
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(w.d_main * dx), acc[j]);
            accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(w.d_min * dx), accm[j]);
        }
    }
    for (int j = 0; j < kT; ++j) {
        const __m256 m = accm[j];
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        a.y[(t + j) * a.n_out + r] = avx512::hsum(acc[j]) + _mm_cvtss_f32(h);
    }
}

template <WType kType>
void kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    static const IndexTables ix;
    constexpr int kT = 4;
    for (int64_t r = r0; r < r1; ++r) {
        int64_t t = t0;
        for (; t + kT <= t1; t += kT) row_tile<kType, kT>(a, ix, r, t);
        for (; t < t1; ++t) row_tile<kType, 1>(a, ix, r, t);
    }
}

}  // namespace

void matmul_q4_k_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q4_K>(a, r0, r1, t0, t1);
}
void matmul_q5_k_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q5_K>(a, r0, r1, t0, t1);
}
void matmul_q6_k_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q6_K>(a, r0, r1, t0, t1);
}

}  // namespace pelican::cpu::detail
