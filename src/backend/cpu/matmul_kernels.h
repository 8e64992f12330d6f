// Internal interface between the matmul driver (matmul.cpp) and the per-ISA kernel translation
// units (*_scalar.cpp, *_avx2.cpp, *_avx512.cpp). Plain C++ only: SIMD translation units include
// nothing with non-static inline functions (no fmt, no std containers), so no AVX-512 copy of a
// shared inline function can be picked by the linker for code that runs on older CPUs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pelican::cpu::detail {

// Weight types (values equal pelican::DType) and layouts (equal cpu::Weight::Layout).
enum class WType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q8_0 = 8,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    BF16 = 30
};
enum class WLayout : uint8_t { kRows = 0, kInterleave16 = 1 };

// 16-row interleaved layout for 32-element blocks (Q4_0, Q8_0). Rows are grouped by 16 (the
// last group zero-padded: d = 0). A group is ONE linear stream (the hardware prefetchers follow
// a single stream best) of units, each holding two block columns b = 2u, 2u + 1:
//   [quants of b][quants of b + 1][scales of b][scales of b + 1]
//   quants of b: kWords x 16 x 4 bytes: word c, row r = the 4 bytes qs_r[4c .. 4c + 4) of that
//                row's block (Q4_0: kWords = 4, 256 B; Q8_0: kWords = 8, 512 B)
//   scales of b: 16 fp16, d of rows 16g .. 16g + 15 (32 B)
// A unit is 2 * 64 * kWords + 64 bytes (a multiple of 64: units stay cache-line aligned); an odd
// block count leaves a zero column in the last unit. Group g starts at g * ilv_group_bytes.
inline constexpr int kIlvRows = 16;
static inline int64_t ilv_unit_bytes(int words) { return 2 * 64 * words + 64; }
static inline int64_t ilv_group_bytes(int64_t nb, int words) { return (nb + 1) / 2 * ilv_unit_bytes(words); }
// Byte offsets of block column b's quants and scales within its group.
static inline int64_t ilv_quant_offset(int64_t b, int words) {
    return b / 2 * ilv_unit_bytes(words) + b % 2 * 64 * words;
}
static inline int64_t ilv_scale_offset(int64_t b, int words) {
    return b / 2 * ilv_unit_bytes(words) + 2 * 64 * words + b % 2 * 32;
}

struct MatmulArgs {
    const uint8_t* w = nullptr;  // weight data (layout-specific)
    int64_t w_stride = 0;        // kRows: bytes between rows; kInterleave16: bytes between groups
    int64_t n_in = 0;
    int64_t n_out = 0;
    int64_t n_tok = 0;
    const float* x = nullptr;        // [n_tok, n_in] fp32 activations
    const int8_t* xq = nullptr;      // [n_tok, n_in] quantized activations (integer kernels)
    const float* xd = nullptr;       // [n_tok, n_in / act_block] activation block scales
    const float* xs = nullptr;       // 32-blocks: [n_tok, n_in / 32] d * sum(qs)
    const int16_t* xbsum = nullptr;  // 256-blocks: [n_tok, n_in / 16] sums of 16 qs
    float* y = nullptr;              // [n_tok, n_out]
};

// Computes y[t, r] for rows [r0, r1) and tokens [t0, t1). For kInterleave16, r0 and r1 are
// multiples of 16 (r1 may be the padded row count; rows >= n_out are not written).
using MatmulKernel = void (*)(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

// Activation quantizers (semantics: ops/act_quant.h); one row of n values.
using QuantizeAct32Fn = void (*)(const float* x, int64_t n, int8_t* qs, float* d, float* s);
using QuantizeAct256Fn = void (*)(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsum);

struct KernelTable {
    MatmulKernel (*find)(WType t, WLayout layout) = nullptr;  // nullptr when it has none
    QuantizeAct32Fn quantize_act32 = nullptr;
    QuantizeAct256Fn quantize_act256 = nullptr;
};

// One table per ISA; the AVX tables exist only on x86-64 builds.
const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();

}  // namespace pelican::cpu::detail
