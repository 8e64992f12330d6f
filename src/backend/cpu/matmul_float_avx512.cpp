// AVX-512 kernels for F32 / F16 / BF16 weights (GGUF rows) with fp32 activations: each 16-element
// weight slice is widened to fp32 once and multiplied into kR rows x kT tokens accumulators.
#include "backend/cpu/kernels_avx512.h"
#include "backend/cpu/simd_avx512.h"

namespace pelican::cpu::detail {
namespace {

// Loads 16 weights starting at element i of a row as fp32 (masked: lanes outside m are 0).
template <WType kType>
inline __m512 load_w(const uint8_t* row, int64_t i, __mmask16 m) {
    if constexpr (kType == WType::F32) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
    } else if constexpr (kType == WType::F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i));
    } else {
        const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

template <WType kType>
inline __m512 load_w(const uint8_t* row, int64_t i) {
    if constexpr (kType == WType::F32) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (kType == WType::F16) {
        return _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i)));
    } else {
        const __m256i h =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

// kR rows starting at r, kT tokens starting at t.
template <WType kType, int kR, int kT>
inline void tile(const MatmulArgs& a, int64_t r, int64_t t) {
    const uint8_t* rows[kR];
    for (int k = 0; k < kR; ++k) rows[k] = a.w + (r + k) * a.w_stride;
    const float* xs[kT];
    for (int j = 0; j < kT; ++j) xs[j] = a.x + (t + j) * a.n_in;
    __m512 acc[kR][kT];
    for (int k = 0; k < kR; ++k)
        for (int j = 0; j < kT; ++j) acc[k][j] = _mm512_setzero_ps();
    // (No software prefetch: with kR row streams the hardware prefetchers do better; measured.)
    int64_t i = 0;
    for (; i + 16 <= a.n_in; i += 16) {
        __m512 xv[kT];
        for (int j = 0; j < kT; ++j) xv[j] = _mm512_loadu_ps(xs[j] + i);
        for (int k = 0; k < kR; ++k) {
            const __m512 w = load_w<kType>(rows[k], i);
            for (int j = 0; j < kT; ++j) acc[k][j] = _mm512_fmadd_ps(w, xv[j], acc[k][j]);
        }
    }
    if (i < a.n_in) {
        const __mmask16 m = static_cast<__mmask16>((1u << (a.n_in - i)) - 1u);
        __m512 xv[kT];
        for (int j = 0; j < kT; ++j) xv[j] = _mm512_maskz_loadu_ps(m, xs[j] + i);
        for (int k = 0; k < kR; ++k) {
            const __m512 w = load_w<kType>(rows[k], i, m);
            for (int j = 0; j < kT; ++j) acc[k][j] = _mm512_fmadd_ps(w, xv[j], acc[k][j]);
        }
    }
    for (int k = 0; k < kR; ++k)
        for (int j = 0; j < kT; ++j) a.y[(t + j) * a.n_out + r + k] = avx512::hsum(acc[k][j]);
}

template <WType kType, int kR>
inline void rows_tile(const MatmulArgs& a, int64_t r, int64_t t0, int64_t t1) {
    constexpr int kT = 4;
    int64_t t = t0;
    for (; t + kT <= t1; t += kT) tile<kType, kR, kT>(a, r, t);
    for (; t < t1; ++t) tile<kType, kR, 1>(a, r, t);
}

// Decode (one token): one row at a time, so consecutive rows form a single linear stream (the
// hardware prefetchers follow one stream best; measured a few % faster than 4-row tiles from
// DRAM), 4 accumulators for the fma latency.
template <WType kType>
inline void row_decode(const MatmulArgs& a, int64_t r, int64_t t) {
    const uint8_t* row = a.w + r * a.w_stride;
    const float* x = a.x + t * a.n_in;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 64 <= a.n_in; i += 64) {
        acc0 = _mm512_fmadd_ps(load_w<kType>(row, i), _mm512_loadu_ps(x + i), acc0);
        acc1 = _mm512_fmadd_ps(load_w<kType>(row, i + 16), _mm512_loadu_ps(x + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(load_w<kType>(row, i + 32), _mm512_loadu_ps(x + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(load_w<kType>(row, i + 48), _mm512_loadu_ps(x + i + 48), acc3);
    }
    for (; i < a.n_in; i += 16) {
        const __mmask16 m = a.n_in - i >= 16 ? static_cast<__mmask16>(0xffff)
                                             : static_cast<__mmask16>((1u << (a.n_in - i)) - 1u);
        acc0 = _mm512_fmadd_ps(load_w<kType>(row, i, m), _mm512_maskz_loadu_ps(m, x + i), acc0);
    }
    a.y[t * a.n_out + r] = avx512::hsum(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

// Decode, kR rows per pass over x: each 16-float x chunk is loaded once into a register and
// serves kR rows (x is re-read from cache n_out / kR times instead of n_out times); two
// accumulators per row for the fma latency.
template <WType kType, int kR>
inline void rows_decode(const MatmulArgs& a, int64_t r, int64_t t) {
    const uint8_t* rows[kR];
    for (int k = 0; k < kR; ++k) rows[k] = a.w + (r + k) * a.w_stride;
    const float* x = a.x + t * a.n_in;
    __m512 acc0[kR], acc1[kR];
    for (int k = 0; k < kR; ++k) acc0[k] = acc1[k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= a.n_in; i += 32) {
        const __m512 x0 = _mm512_loadu_ps(x + i);
        const __m512 x1 = _mm512_loadu_ps(x + i + 16);
        for (int k = 0; k < kR; ++k) {
            acc0[k] = _mm512_fmadd_ps(load_w<kType>(rows[k], i), x0, acc0[k]);
            acc1[k] = _mm512_fmadd_ps(load_w<kType>(rows[k], i + 16), x1, acc1[k]);
        }
    }
    for (; i < a.n_in; i += 16) {
        const __mmask16 m = a.n_in - i >= 16 ? static_cast<__mmask16>(0xffff)
                                             : static_cast<__mmask16>((1u << (a.n_in - i)) - 1u);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
        for (int k = 0; k < kR; ++k) acc0[k] = _mm512_fmadd_ps(load_w<kType>(rows[k], i, m), xv, acc0[k]);
    }
    for (int k = 0; k < kR; ++k) a.y[t * a.n_out + r + k] = avx512::hsum(_mm512_add_ps(acc0[k], acc1[k]));
}

template <WType kType>
void kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    if (t1 - t0 == 1) {
        // F16: 8 rows per pass over x (ops_bench 5632x2048, 2 threads: 27 -> 36 GB/s); the
        // leftover rows use the same per-row summation order (rows_decode<1>), so every output's
        // bits are independent of the row split. F32 / BF16 keep the one-row stream (not measured).
        if constexpr (kType == WType::F16) {
            int64_t r = r0;
            for (; r + 8 <= r1; r += 8) rows_decode<kType, 8>(a, r, t0);
            for (; r < r1; ++r) rows_decode<kType, 1>(a, r, t0);
        } else {
            for (int64_t r = r0; r < r1; ++r) row_decode<kType>(a, r, t0);
        }
        return;
    }
    constexpr int kR = 4;
    int64_t r = r0;
    for (; r + kR <= r1; r += kR) rows_tile<kType, kR>(a, r, t0, t1);
    for (; r < r1; ++r) rows_tile<kType, 1>(a, r, t0, t1);
}

}  // namespace

void matmul_f32_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::F32>(a, r0, r1, t0, t1);
}
void matmul_f16_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::F16>(a, r0, r1, t0, t1);
}
void matmul_bf16_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    kernel<WType::BF16>(a, r0, r1, t0, t1);
}

}  // namespace pelican::cpu::detail
