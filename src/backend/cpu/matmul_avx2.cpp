// AVX2 matmul kernels for GGUF rows: Q4_0 / Q8_0 against 32-block int8 activations, and
// F32 / F16 / BF16 against fp32 activations. kR rows x kT tokens per tile share activation loads
// and weight unpacking.
//   Q4_0: u = nibble in [0, 15], sum w x = d_w (d_x sum u q_x - 8 s_x)   (vpmaddubsw: u8 x s8)
//   Q8_0: sum w x = d_w d_x sum q_w q_x, as vpmaddubsw(|q_w|, sign(q_x, q_w)) (|.| <= 127 * 127 * 2)
#include "backend/cpu/kernels_avx2.h"
#include "backend/cpu/simd_avx2.h"
#include <type_traits>

#include "core/blocks.h"

namespace pelican::cpu::detail {
namespace {

template <WType kType, int kR, int kT>
inline void q32_tile(const MatmulArgs& a, int64_t r, int64_t t) {
    using Block = std::conditional_t<kType == WType::Q4_0, BlockQ4_0, BlockQ8_0>;
    const int64_t nb = a.n_in / 32;
    const Block* rows[kR];
    for (int k = 0; k < kR; ++k) rows[k] = reinterpret_cast<const Block*>(a.w + (r + k) * a.w_stride);
    __m256 acc[kR][kT];
    float corr[kR][kT] = {};
    for (int k = 0; k < kR; ++k)
        for (int j = 0; j < kT; ++j) acc[k][j] = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; ++b) {
        __m256i xq[kT];
        float dx[kT];
        for (int j = 0; j < kT; ++j) {
            xq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + (t + j) * a.n_in + 32 * b));
            dx[j] = a.xd[(t + j) * nb + b];
        }
        for (int k = 0; k < kR; ++k) {
            const Block& blk = rows[k][b];
            const float dw = avx2::half_to_float(blk.d);
            if constexpr (kType == WType::Q4_0) {
                const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
                const __m256i u =
                    _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
                for (int j = 0; j < kT; ++j) {
                    const __m256 isum = _mm256_cvtepi32_ps(avx2::dot_u8s8(u, xq[j]));
                    acc[k][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[j]), isum, acc[k][j]);
                    corr[k][j] += dw * a.xs[(t + j) * nb + b];
                }
            } else {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
                const __m256i uq = _mm256_sign_epi8(q, q);  // |q_w|
                for (int j = 0; j < kT; ++j) {
                    const __m256 isum = _mm256_cvtepi32_ps(avx2::dot_u8s8(uq, _mm256_sign_epi8(xq[j], q)));
                    acc[k][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[j]), isum, acc[k][j]);
                }
            }
        }
    }
    for (int k = 0; k < kR; ++k)
        for (int j = 0; j < kT; ++j)
            a.y[(t + j) * a.n_out + r + k] = avx2::hsum(acc[k][j]) - 8.0f * corr[k][j];
}

template <WType kType>
inline __m256 load_w8(const uint8_t* row, int64_t i) {
    if constexpr (kType == WType::F32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (kType == WType::F16) {
        return _mm256_cvtph_ps(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i)));
    } else {
        const __m128i h =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
}

template <WType kType>
inline float load_w1(const uint8_t* row, int64_t i) {
    if constexpr (kType == WType::F32) {
        return reinterpret_cast<const float*>(row)[i];
    } else if constexpr (kType == WType::F16) {
        return avx2::half_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
    } else {
        const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[i]) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
    }
}

template <WType kType, int kR, int kT>
inline void float_tile(const MatmulArgs& a, int64_t r, int64_t t) {
    const uint8_t* rows[kR];
    for (int k = 0; k < kR; ++k) rows[k] = a.w + (r + k) * a.w_stride;
    __m256 acc[kR][kT];
    for (int k = 0; k < kR; ++k)
        for (int j = 0; j < kT; ++j) acc[k][j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= a.n_in; i += 8) {
        __m256 xv[kT];
        for (int j = 0; j < kT; ++j) xv[j] = _mm256_loadu_ps(a.x + (t + j) * a.n_in + i);
        for (int k = 0; k < kR; ++k) {
            const __m256 w = load_w8<kType>(rows[k], i);
            for (int j = 0; j < kT; ++j) acc[k][j] = _mm256_fmadd_ps(w, xv[j], acc[k][j]);
        }
    }
    for (int k = 0; k < kR; ++k) {
        for (int j = 0; j < kT; ++j) {
            float s = avx2::hsum(acc[k][j]);
            for (int64_t e = i; e < a.n_in; ++e) s += load_w1<kType>(rows[k], e) * a.x[(t + j) * a.n_in + e];
            a.y[(t + j) * a.n_out + r + k] = s;
        }
    }
}

template <WType kType, int kR, int kT>
inline void tile(const MatmulArgs& a, int64_t r, int64_t t) {
    if constexpr (kType == WType::Q4_0 || kType == WType::Q8_0) {
        q32_tile<kType, kR, kT>(a, r, t);
    } else {
        float_tile<kType, kR, kT>(a, r, t);
    }
}

template <WType kType, int kR>
inline void rows_tile(const MatmulArgs& a, int64_t r, int64_t t0, int64_t t1) {
    constexpr int kT = 3;
    int64_t t = t0;
    for (; t + kT <= t1; t += kT) tile<kType, kR, kT>(a, r, t);
    for (; t < t1; ++t) tile<kType, kR, 1>(a, r, t);
}

template <WType kType>
void kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    constexpr int kR = 4;
    int64_t r = r0;
    for (; r + kR <= r1; r += kR) rows_tile<kType, kR>(a, r, t0, t1);
    for (; r < r1; ++r) rows_tile<kType, 1>(a, r, t0, t1);
}

}  // namespace

void matmul_q4_0_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q4_0>(a, r0, r1, t0, t1);
}
void matmul_q8_0_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::Q8_0>(a, r0, r1, t0, t1);
}
void matmul_f32_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::F32>(a, r0, r1, t0, t1);
}
void matmul_f16_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::F16>(a, r0, r1, t0, t1);
}
void matmul_bf16_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::BF16>(a, r0, r1, t0, t1);
}

}  // namespace pelican::cpu::detail
