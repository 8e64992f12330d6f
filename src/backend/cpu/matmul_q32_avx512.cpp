// AVX-512 VNNI kernels for Q4_0 / Q8_0 weights in the 16-row interleaved layout
// (matmul_kernels.h) against 32-block int8 activations (ops/act_quant.h).
//
// One zmm load holds word c (4 bytes) of block b for 16 rows; vpdpbusd against the activation's
// matching 4 bytes broadcast to every lane adds each row's 4-element partial dot into its own
// int32 lane. So a block column (16 rows x 32 elements) costs 8 vpdpbusd, and no horizontal sum
// is ever needed. vpdpbusd multiplies UNSIGNED bytes by signed bytes, so the weights are made
// unsigned and the zero point removed with the activation block sums s = d_x * sum(q_x):
//   Q4_0: w = d_w (u - 8), u = nibble in [0, 15]:  sum w x = d_w (d_x sum u q_x - 8 s)
//   Q8_0: w = d_w q, u = q + 128 = q ^ 0x80:        sum w x = d_w (d_x sum u q_x - 128 s)
// Per token and block: acc += (d_w * d_x) * float(isum); corr += d_w * s; y = acc - zp * corr.
//
// Memory: each 16-row group is one linear stream (matmul_kernels.h). Measured on the Zen 4 dev VM:
// with the scales in a separate stream the kernel reached ~60% of a plain read's bandwidth even
// with software prefetch; as one stream, without software prefetch (which now only costs), it
// reaches ~85-90% with 2 threads.
#include "backend/cpu/kernels_avx512.h"
#include "backend/cpu/simd_avx512.h"

namespace pelican::cpu::detail {
namespace {

using avx512::bcast4;

// Weight vectors (unsigned bytes) of one block column: for Q4_0 lo nibbles pair with activation
// bytes 4c.., hi nibbles with 16 + 4c..; for Q8_0 word c pairs with bytes 4c...
template <int kWords>
struct BlockCol {
    __m512i u[8];  // u[k] multiplies activation bytes [4 * k, 4 * k + 4)

    inline void load(const uint8_t* q) {
        if constexpr (kWords == 4) {
            const __m512i m4 = _mm512_set1_epi8(0x0f);
            for (int c = 0; c < 4; ++c) {
                const __m512i v = _mm512_loadu_si512(q + 64 * c);
                u[c] = _mm512_and_si512(v, m4);
                u[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
        } else {
            const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
            for (int c = 0; c < 8; ++c) u[c] = _mm512_xor_si512(_mm512_loadu_si512(q + 64 * c), flip);
        }
    }

    // 16 int32 lanes: row r's sum over the block of u_r * q_x.
    inline __m512i dot(const int8_t* xq) const {
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
            s0 = _mm512_dpbusd_epi32(s0, u[k], bcast4(xq + 4 * k));
            s1 = _mm512_dpbusd_epi32(s1, u[k + 1], bcast4(xq + 4 * k + 4));
        }
        return _mm512_add_epi32(s0, s1);
    }
};

// One 16-row group, kT tokens starting at t: y[t + j, row0 .. row0 + 16) (masked to n_out).
template <int kWords, int kT>
inline void group_tile(const MatmulArgs& a, const uint8_t* g, int64_t row0, int64_t t) {
    const int64_t nb = a.n_in / 32;
    __m512 acc[kT], corr[kT];
    for (int j = 0; j < kT; ++j) acc[j] = corr[j] = _mm512_setzero_ps();
    const int8_t* xq = a.xq + t * a.n_in;
    const float* xd = a.xd + t * nb;
    const float* xs = a.xs + t * nb;
    constexpr int64_t kUnit = 2 * 64 * kWords + 64;  // ilv_unit_bytes
    BlockCol<kWords> col;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* unit = g + b / 2 * kUnit;
        const uint8_t* quants = unit + b % 2 * 64 * kWords;
        const __m512 dw = _mm512_cvtph_ps(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(unit + 2 * 64 * kWords + b % 2 * 32)));
        col.load(quants);
        for (int j = 0; j < kT; ++j) {
            const __m512i isum = col.dot(xq + j * a.n_in + 32 * b);
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xd[j * nb + b]));
            acc[j] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[j]);
            corr[j] = _mm512_fmadd_ps(dw, _mm512_set1_ps(xs[j * nb + b]), corr[j]);
        }
    }
    const __m512 zp = _mm512_set1_ps(kWords == 4 ? 8.0f : 128.0f);
    const int64_t valid = a.n_out - row0 < 16 ? a.n_out - row0 : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    for (int j = 0; j < kT; ++j) {
        const __m512 r = _mm512_fnmadd_ps(zp, corr[j], acc[j]);
        _mm512_mask_storeu_ps(a.y + (t + j) * a.n_out + row0, mask, r);
    }
}

// Tokens [t, t1) of one group in tiles of kT, then the remainder with smaller tiles.
template <int kWords, int kT>
inline void group_tokens(const MatmulArgs& a, const uint8_t* g, int64_t r, int64_t t, int64_t t1) {
    for (; t + kT <= t1; t += kT) group_tile<kWords, kT>(a, g, r, t);
    if constexpr (kT > 1) group_tokens<kWords, kT - 1>(a, g, r, t, t1);
}

template <int kWords>
void ilv_kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    constexpr int kT = 4;  // tokens per tile: 2 x kT accumulators + 8 weight vectors in registers
    for (int64_t r = r0; r < r1; r += kIlvRows)
        group_tokens<kWords, kT>(a, a.w + (r / kIlvRows) * a.w_stride, r, t0, t1);
}

}  // namespace

void matmul_q4_0_ilv_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    ilv_kernel<4>(a, r0, r1, t0, t1);
}

void matmul_q8_0_ilv_avx512(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
    ilv_kernel<8>(a, r0, r1, t0, t1);
}

}  // namespace pelican::cpu::detail
