// Private to qmatmul*.cu: the parameters, tile configurations, per-type weight decoders and the kernel
// template of qmatmul (qmatmul.h). CUDA only.
//
// Shapes. A CTA computes MT = 16 MI WM output rows x NT = WN WTOK tokens over a range of k tiles of
// kKT = 128. Warp (wm, wn) owns rows 16 MI wm .. + 16 MI (MI m16 tiles) x tokens WTOK wn .. + WTOK
// (WTOK / 8 n8 tiles). mma.sync m16n8k16 (f16 x f16 -> f32): A = 16 weight rows x 16 k, dequantized in
// registers; B = 16 k x 8 tokens, from shared memory; C = 16 rows x 8 tokens in registers.
//
// k order. A dot product does not depend on the order of its terms, so A and B may use any common
// permutation of k. A 128-k tile is 4 "blocks" of 32 values: lane (g, t) (g = lane / 4, t = lane % 4)
// takes block t of the rows it holds (rows g, g + 8 of each m16 tile) and runs 8 mma steps s; in step s
// its fragment slots {2t, 2t+1, 2t+8, 2t+9} carry the block's values v = 4s + {0, 2, 1, 3}:
//   Q4_0 / Q8_0 / Q6_K  block t = k 32 t .. 32 t + 31 of the tile, value v = k offset v;
//   Q4_K                block t = plane (t & 1) of the tile's 64-value unit t / 2 (gpu_matrix layout:
//                       plane pl holds qs bytes 16 pl .. 16 pl + 15 of each unit; byte j's low nibble is
//                       unit value 16 pl + j, its high nibble 32 + 16 pl + j), value v = unit offset
//                       32 (v / 16) + 16 pl + v % 16.
// With the 16 quant bytes of a block as 4 words, step s reads word s % 4: its low nibbles (s < 4) or
// high nibbles (s >= 4) are the values 4s .. 4s + 3 (Q8_0: word s of elements 0..15, word s - 4 of
// 16..31), so a pair (v0, v2) is (w & 0x000f000f) and (v1, v3) is ((w >> 8) & 0x000f000f).
//
// x in the workspace (f16, written by the pre-pass in exactly the order the B fragments are read):
// for k tile kt, step s, token pair p (tokens 16p .. 16p + 15) a 512-byte record of 32 lane entries of
// 16 bytes; entry (g, t) = [token 16p + g: x(v0), x(v2), x(v1), x(v3)] [token 16p + 8 + g: the same],
// v = 4s + i of block t, i.e. the B fragments (b0 b1, b2 b3) of n tiles 2p and 2p + 1. Record index
// (kt * 8 + s) * n_pairs + p. A CTA's x tile for one stage is therefore 8 runs of NT / 16 records,
// copied as they are; each warp reads 512 contiguous bytes per (step, pair): no bank conflict.
//
// Weights in shared memory, per stage (rows r = 0 .. MT - 1 of the CTA, zero-filled past n_out):
//   Q4_0  [MT][64] quants of the tile's 4 blocks | [MT][8] their fp16 d
//   Q8_0  [MT][64] elements 0..15 of the 4 blocks | [MT][64] elements 16..31 | [MT][8] d
//   Q4_K  [MT][64] the 2 units' quants, 16-byte chunk 2 u + pl = plane pl of unit u | [MT][16] header
//         (d, dmin, 12 scale bytes) of the tile's super-block
//   Q6_K  [MT][64] low nibbles | [MT][32] high-bit words | [MT][8] int8 scales; d (fp16, 2 bytes per
//         super-block: too small for cp.async) is loaded by each lane from global memory one tile ahead
// 64-byte rows read as 16 bytes per lane: lanes (g, t) of a quarter warp hit 8 distinct 16-byte
// columns, so no bank conflicts either.
//
// Pipeline: kStages stages of cp.async (weights with an L2 evict-first policy: they are read once;
// x with the default policy: every row tile reads it). Weights of the first stages are issued before
// the PDL wait (no kernel writes them), x after it.
//
// Split-K: blockIdx.z = split of the k tiles. With split > 1 each CTA stores its fp32 tile to the
// workspace (fragment order, float4 per lane), bumps the tile's counter (zeroed by the pre-pass), and
// the last CTA adds the splits in split order (deterministic) and writes y.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_traits.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/dtype.h"

namespace pelican::cuda::qmm {

inline constexpr int kKT = 128;                 // k per pipeline tile
inline constexpr int kStages = 4;               // cp.async stages
inline constexpr int kMaxSplit = 16;            // k splits per output tile
inline constexpr int kMaxSlices = 320;          // split CTAs (tiles x splits) the partial-sum area holds
inline constexpr int kMaxTileElems = 256 * 64;  // MT x NT of every configuration (partial-sum slice)
inline constexpr int kMaxTokTile = 128;         // largest NT (the x workspace pads tokens to a multiple)

// WM warps along rows, WN along tokens, WTOK tokens per warp (a multiple of 16).
// MI m16 tiles per warp (warp rows 16 MI).
struct Config {
    int wm, wn, wtok, mi;
};
// 0 .. 3: the built-in choice by n_tok (pick_config in qmatmul.cu); the others are A/B candidates
// reachable through qmatmul_force_config until measurements settle the table.
inline constexpr int kConfigs = 9;
inline constexpr Config kConfigTable[kConfigs] = {
    {8, 1, 16, 2},  // 0: 256 x 16
    {8, 1, 32, 2},  // 1: 256 x 32
    {8, 1, 64, 2},  // 2: 256 x 64
    {4, 2, 64, 2},  // 3: 128 x 128
    {4, 1, 64, 2},  // 4: 128 x 64, 128 threads
    {2, 4, 32, 4},  // 5: 128 x 128, warp tiles of 64 rows x 32 tokens (half the B-fragment loads)
    {4, 2, 32, 4},  // 6: 256 x 64, warp tiles of 64 x 32
    {4, 1, 32, 2},  // 7: 128 x 32, 128 threads
    {4, 1, 16, 4},  // 8: 256 x 16, 128 threads, warp tiles of 64 x 16
};
constexpr int cfg_rows(const Config& c) { return 16 * c.mi * c.wm; }
constexpr int cfg_tokens(const Config& c) { return c.wn * c.wtok; }
constexpr int cfg_threads(const Config& c) { return 32 * c.wm * c.wn; }
// CTAs per SM the registers are budgeted for (__launch_bounds__): 64 or more fp32 accumulators per
// thread, or 4 m16 tiles of weight rows held per lane, get 65536 registers per 256 threads, the
// others half of that.
constexpr int cfg_min_blocks(const Config& c) {
    const int per256 = c.mi * c.wtok / 2 >= 64 || c.mi >= 4 ? 1 : 2;
    const int b = per256 * 256 / cfg_threads(c);
    return b < 1 ? 1 : b;
}

// Shared-memory bytes per weight row per stage (see the header comment); 0 for unsupported types.
constexpr int row_bytes(DType t) {
    switch (t) {
        case DType::Q4_0:
            return 64 + 8;
        case DType::Q8_0:
            return 64 + 64 + 8;
        case DType::Q4_K:
            return 64 + 16;
        case DType::Q6_K:
            return 64 + 32 + 8;
        default:
            return 0;
    }
}
constexpr size_t stage_bytes(int rb, const Config& c) {
    return static_cast<size_t>(cfg_rows(c)) * rb + static_cast<size_t>(cfg_tokens(c)) * 256;
}
constexpr size_t smem_bytes(int rb, const Config& c) { return kStages * stage_bytes(rb, c); }
constexpr bool configs_fit() {
    for (const Config& c : kConfigTable)
        if (smem_bytes(row_bytes(DType::Q8_0), c) > 227 * 1024 || cfg_rows(c) * cfg_tokens(c) > 256 * 64 ||
            cfg_tokens(c) > 128 || c.wtok % 16 != 0)
            return false;
    return true;
}
static_assert(configs_fit(),
              "a configuration exceeds the shared memory, the partial-sum slice or 128 tokens");

struct Params {
    const uint8_t* w = nullptr;  // GpuMatrix::data
    size_t off[4] = {0, 0, 0, 0};
    int64_t stride[4] = {0, 0, 0, 0};
    int n_out = 0;
    int n_kt = 0;     // k tiles (n_in / 128)
    int n_tok = 0;    // real tokens (rows of y)
    int n_pairs = 0;  // token pairs of the x workspace (n_tok padded / 16)
    const __half* xh = nullptr;
    float* y = nullptr;
    int64_t y_stride = 0;
    int split = 1;            // k splits (gridDim.z)
    int tok_tiles = 1;        // gridDim.x
    float* part = nullptr;    // split > 1: [tile][split][MT * NT] fp32
    unsigned* ctr = nullptr;  // split > 1: [tile] arrival counters (zeroed by the pre-pass)
};

struct StageParams {
    const float* x = nullptr;
    int64_t x_stride = 0;
    bool x_vec = false;  // x and x_stride allow float4 loads
    int n_tok = 0, n_tok_pad = 0, n_in = 0;
    bool q4k = false;  // Q4_K k order
    __half* xh = nullptr;
    unsigned* ctr = nullptr;
    int n_ctr = 0;  // counters to zero
};

// Per-type entry points (qmatmul_<type>.cu).
void launch_q4_0(const Params& p, int cfg, dim3 grid, cudaStream_t stream);
void launch_q8_0(const Params& p, int cfg, dim3 grid, cudaStream_t stream);
void launch_q4_k(const Params& p, int cfg, dim3 grid, cudaStream_t stream);
void launch_q6_k(const Params& p, int cfg, dim3 grid, cudaStream_t stream);

// ---- device helpers ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
// cp.async of 16 / 8 bytes; !ok: the destination is zero-filled (src is not read).
__device__ __forceinline__ void cp16w(uint32_t dst, const void* src, bool ok, uint64_t pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void cp8w(uint32_t dst, const void* src, bool ok, uint64_t pol) {
    asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], 8, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 8 : 0), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void cp16x(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t h2_bits(__half2 v) { return *reinterpret_cast<const uint32_t*>(&v); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<const __half2*>(&u); }
// Two fp32 values rounded to f16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) { return h2_bits(__floats2half2_rn(lo, hi)); }

__device__ __forceinline__ uint32_t word(const uint4& q, int i) {
    return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}
// float(byte i of v) exactly: 2^23 + b as fp32 bits, minus 2^23 (minus bias: float(b - bias)).
__device__ __forceinline__ float byte_float(uint32_t v, int i, float bias_plus_2p23) {
    return __fsub_rn(__uint_as_float(__byte_perm(v, 0x4b000000u, 0x7540u | static_cast<uint32_t>(i))),
                     bias_plus_2p23);
}

__device__ __forceinline__ const uint8_t* plane_row(const Params& p, int k, int row) {
    return p.w + p.off[k] + static_cast<int64_t>(row) * p.stride[k];
}

// ---- per-type decoders -----------------------------------------------------------------------------
// issue<MT>(p, ws, row0, kt, pol): cp.async of k tile kt of rows row0 .. row0 + MT - 1 into the stage at
// shared address ws (every thread of the CTA calls it). load<MT>(ws, lr, t, kt, d): the Row of local
// row lr for lane column t. frag(a, b, s, f): step s's A fragment from rows a (g) and b (g + 8):
// f[0] = row g (v0, v2), f[1] = row g + 8 (v0, v2), f[2] = row g (v1, v3), f[3] = row g + 8 (v1, v3).

struct TQ4_0 {
    static constexpr DType kType = DType::Q4_0;
    static constexpr int kRowBytes = row_bytes(kType);
    static constexpr bool kGlobalD = false;
    struct Row {
        uint4 q;
        uint32_t d2;  // half2 (d, d)
    };
    template <int MT, int NTHR>
    __device__ static void issue(const Params& p, uint32_t ws, int row0, int kt, uint64_t pol) {
        for (int c = static_cast<int>(threadIdx.x); c < MT * 4; c += NTHR) {
            const int r = c >> 2, j = c & 3, row = row0 + r;
            const bool ok = row < p.n_out;
            cp16w(ws + r * 64 + 16 * j, ok ? plane_row(p, 0, row) + kt * 64 + 16 * j : p.w, ok, pol);
        }
        for (int r = static_cast<int>(threadIdx.x); r < MT; r += NTHR) {
            const int row = row0 + r;
            const bool ok = row < p.n_out;
            cp8w(ws + MT * 64 + r * 8, ok ? plane_row(p, 1, row) + kt * 8 : p.w, ok, pol);
        }
    }
    template <int MT>
    __device__ static Row load(const uint8_t* ws, int lr, int t, int /*kt*/, float /*d*/) {
        Row r;
        r.q = *reinterpret_cast<const uint4*>(ws + lr * 64 + 16 * t);
        const uint32_t d = *reinterpret_cast<const unsigned short*>(ws + MT * 64 + lr * 8 + 2 * t);
        r.d2 = d | (d << 16);
        return r;
    }
    // (1024 + n) - 1032 = n - 8 exactly in f16, then one rounding of (n - 8) d.
    __device__ static uint32_t deq(uint32_t nib2, uint32_t d2) {
        const __half2 v = __hsub2(bits_h2(nib2 | 0x64006400u), bits_h2(0x64086408u));
        return h2_bits(__hmul2(v, bits_h2(d2)));
    }
    __device__ static void frag(const Row& a, const Row& b, int s, uint32_t (&f)[4]) {
        const uint32_t wa = word(a.q, s & 3), wb = word(b.q, s & 3);
        const int sh = s >= 4 ? 4 : 0;
        f[0] = deq((wa >> sh) & 0x000f000fu, a.d2);
        f[1] = deq((wb >> sh) & 0x000f000fu, b.d2);
        f[2] = deq((wa >> (sh + 8)) & 0x000f000fu, a.d2);
        f[3] = deq((wb >> (sh + 8)) & 0x000f000fu, b.d2);
    }
};

struct TQ8_0 {
    static constexpr DType kType = DType::Q8_0;
    static constexpr int kRowBytes = row_bytes(kType);
    static constexpr bool kGlobalD = false;
    struct Row {
        uint4 lo, hi;  // elements 0..15, 16..31 of the block
        uint32_t d2;
    };
    template <int MT, int NTHR>
    __device__ static void issue(const Params& p, uint32_t ws, int row0, int kt, uint64_t pol) {
        for (int c = static_cast<int>(threadIdx.x); c < MT * 8; c += NTHR) {
            const int pl = c >= MT * 4 ? 1 : 0, cc = c - pl * MT * 4;
            const int r = cc >> 2, j = cc & 3, row = row0 + r;
            const bool ok = row < p.n_out;
            cp16w(ws + pl * MT * 64 + r * 64 + 16 * j, ok ? plane_row(p, pl, row) + kt * 64 + 16 * j : p.w,
                  ok, pol);
        }
        for (int r = static_cast<int>(threadIdx.x); r < MT; r += NTHR) {
            const int row = row0 + r;
            const bool ok = row < p.n_out;
            cp8w(ws + MT * 128 + r * 8, ok ? plane_row(p, 2, row) + kt * 8 : p.w, ok, pol);
        }
    }
    template <int MT>
    __device__ static Row load(const uint8_t* ws, int lr, int t, int /*kt*/, float /*d*/) {
        Row r;
        r.lo = *reinterpret_cast<const uint4*>(ws + lr * 64 + 16 * t);
        r.hi = *reinterpret_cast<const uint4*>(ws + MT * 64 + lr * 64 + 16 * t);
        const uint32_t d = *reinterpret_cast<const unsigned short*>(ws + MT * 128 + lr * 8 + 2 * t);
        r.d2 = d | (d << 16);
        return r;
    }
    // Bytes b of x (int8) as f16 (1024 + (b + 128)) - 1152 = b exactly, then one rounding of b d.
    __device__ static uint32_t deq(uint32_t x, uint32_t sel, uint32_t d2) {
        const uint32_t h = __byte_perm(x, 0x64646464u, sel);
        return h2_bits(__hmul2(__hsub2(bits_h2(h), bits_h2(0x64806480u)), bits_h2(d2)));
    }
    __device__ static void frag(const Row& a, const Row& b, int s, uint32_t (&f)[4]) {
        const uint32_t xa = (s < 4 ? word(a.lo, s & 3) : word(a.hi, s & 3)) ^ 0x80808080u;
        const uint32_t xb = (s < 4 ? word(b.lo, s & 3) : word(b.hi, s & 3)) ^ 0x80808080u;
        f[0] = deq(xa, 0x4240u, a.d2);  // bytes 0, 2
        f[1] = deq(xb, 0x4240u, b.d2);
        f[2] = deq(xa, 0x4341u, a.d2);  // bytes 1, 3
        f[3] = deq(xb, 0x4341u, b.d2);
    }
};

struct TQ4_K {
    static constexpr DType kType = DType::Q4_K;
    static constexpr int kRowBytes = row_bytes(kType);
    static constexpr bool kGlobalD = false;
    struct Row {
        uint4 q;
        float dl[2], ml[2];  // d sc and dmin m of the unit's sub-blocks (low nibbles, high nibbles)
    };
    template <int MT, int NTHR>
    __device__ static void issue(const Params& p, uint32_t ws, int row0, int kt, uint64_t pol) {
        for (int c = static_cast<int>(threadIdx.x); c < MT * 4; c += NTHR) {
            const int r = c >> 2, j = c & 3, pl = j & 1, u = j >> 1, row = row0 + r;
            const bool ok = row < p.n_out;
            cp16w(ws + r * 64 + 16 * j, ok ? plane_row(p, pl, row) + (2 * kt + u) * 16 : p.w, ok, pol);
        }
        for (int r = static_cast<int>(threadIdx.x); r < MT; r += NTHR) {
            const int row = row0 + r;
            const bool ok = row < p.n_out;
            cp16w(ws + MT * 64 + r * 16, ok ? plane_row(p, 2, row) + (kt >> 1) * 16 : p.w, ok, pol);
        }
    }
    template <int MT>
    __device__ static Row load(const uint8_t* ws, int lr, int t, int kt, float /*d*/) {
        Row r;
        r.q = *reinterpret_cast<const uint4*>(ws + lr * 64 + 16 * t);
        const uint4 h = *reinterpret_cast<const uint4*>(ws + MT * 64 + lr * 16);
        int sc0, m0, sc1, m1;
        detail::q4k_scale_min(h.y, h.z, h.w, 2 * (kt & 1) + (t >> 1), sc0, m0, sc1, m1);
        const float d = detail::half_bits_to_float(h.x), dmin = detail::half_bits_to_float(h.x >> 16);
        r.dl[0] = __fmul_rn(d, static_cast<float>(sc0));
        r.dl[1] = __fmul_rn(d, static_cast<float>(sc1));
        r.ml[0] = __fmul_rn(dmin, static_cast<float>(m0));
        r.ml[1] = __fmul_rn(dmin, static_cast<float>(m1));
        return r;
    }
    // d sc q - dmin m: d sc q is exact in fp32 (11 + 6 + 4 bits), so the fma rounds exactly once, as
    // dequantize_matrix's separate multiply and subtract do.
    __device__ static float val(uint32_t nib4, int i, float dl, float ml) {
        return __fmaf_rn(dl, byte_float(nib4, i, 8388608.0f), -ml);
    }
    __device__ static void frag(const Row& a, const Row& b, int s, uint32_t (&f)[4]) {
        const int hi = s >= 4 ? 1 : 0;
        const uint32_t na = (word(a.q, s & 3) >> (4 * hi)) & 0x0f0f0f0fu;
        const uint32_t nb = (word(b.q, s & 3) >> (4 * hi)) & 0x0f0f0f0fu;
        const float dla = a.dl[hi], mla = a.ml[hi], dlb = b.dl[hi], mlb = b.ml[hi];
        f[0] = pack_h2(val(na, 0, dla, mla), val(na, 2, dla, mla));
        f[1] = pack_h2(val(nb, 0, dlb, mlb), val(nb, 2, dlb, mlb));
        f[2] = pack_h2(val(na, 1, dla, mla), val(na, 3, dla, mla));
        f[3] = pack_h2(val(nb, 1, dlb, mlb), val(nb, 3, dlb, mlb));
    }
};

struct TQ6_K {
    static constexpr DType kType = DType::Q6_K;
    static constexpr int kRowBytes = row_bytes(kType);
    static constexpr bool kGlobalD = true;
    struct Row {
        uint4 q;       // low nibbles
        uint2 hb;      // high-bit words of values 0..15, 16..31
        float dsc[2];  // d sc of values 0..15, 16..31
    };
    template <int MT, int NTHR>
    __device__ static void issue(const Params& p, uint32_t ws, int row0, int kt, uint64_t pol) {
        for (int c = static_cast<int>(threadIdx.x); c < MT * 4; c += NTHR) {
            const int r = c >> 2, j = c & 3, row = row0 + r;
            const bool ok = row < p.n_out;
            cp16w(ws + r * 64 + 16 * j, ok ? plane_row(p, 0, row) + kt * 64 + 16 * j : p.w, ok, pol);
        }
        for (int c = static_cast<int>(threadIdx.x); c < MT * 2; c += NTHR) {
            const int r = c >> 1, j = c & 1, row = row0 + r;
            const bool ok = row < p.n_out;
            cp16w(ws + MT * 64 + r * 32 + 16 * j, ok ? plane_row(p, 1, row) + kt * 32 + 16 * j : p.w, ok,
                  pol);
        }
        for (int r = static_cast<int>(threadIdx.x); r < MT; r += NTHR) {
            const int row = row0 + r;
            const bool ok = row < p.n_out;
            cp8w(ws + MT * 96 + r * 8, ok ? plane_row(p, 2, row) + kt * 8 : p.w, ok, pol);
        }
    }
    // The fp32 d of row (global) at k tile kt; 0 past n_out.
    __device__ static float load_d(const Params& p, int row, int kt) {
        if (row >= p.n_out) return 0.0f;
        return detail::half_bits_to_float(
            __ldg(reinterpret_cast<const unsigned short*>(plane_row(p, 3, row)) + (kt >> 1)));
    }
    template <int MT>
    __device__ static Row load(const uint8_t* ws, int lr, int t, int /*kt*/, float d) {
        Row r;
        r.q = *reinterpret_cast<const uint4*>(ws + lr * 64 + 16 * t);
        r.hb = *reinterpret_cast<const uint2*>(ws + MT * 64 + lr * 32 + 8 * t);
        const uint32_t sc = *reinterpret_cast<const unsigned short*>(ws + MT * 96 + lr * 8 + 2 * t);
        r.dsc[0] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc & 0xffu)));
        r.dsc[1] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(sc >> 8)));
        return r;
    }
    // (d sc) (q - 32) with q - 32 exact: the fp32 value of dequantize_matrix.
    __device__ static float val(uint32_t q4, int i, float dsc) {
        return __fmul_rn(dsc, byte_float(q4, i, 8388640.0f));
    }
    __device__ static uint32_t codes(const Row& r, int s) {
        const uint32_t nib = (word(r.q, s & 3) >> (s >= 4 ? 4 : 0)) & 0x0f0f0f0fu;
        const uint32_t hw = s < 4 ? r.hb.x : r.hb.y;  // word h = s / 4: byte i, bits 2g = value 16h + 4g + i
        return nib | (((hw >> (2 * (s & 3))) & 0x03030303u) << 4);
    }
    __device__ static void frag(const Row& a, const Row& b, int s, uint32_t (&f)[4]) {
        const uint32_t qa = codes(a, s), qb = codes(b, s);
        const float da = a.dsc[s >> 2], db = b.dsc[s >> 2];
        f[0] = pack_h2(val(qa, 0, da), val(qa, 2, da));
        f[1] = pack_h2(val(qb, 0, db), val(qb, 2, db));
        f[2] = pack_h2(val(qa, 1, da), val(qa, 3, da));
        f[3] = pack_h2(val(qb, 1, db), val(qb, 3, db));
    }
};

// ---- the kernel --------------------------------------------------------------------------------------

template <class T, int WM, int WN, int WTOK, int MI>
__global__ void __launch_bounds__(32 * WM * WN, cfg_min_blocks(Config{WM, WN, WTOK, MI}))
    qmm_kernel(const Params p) {
    constexpr int MT = 16 * MI * WM, WR = 16 * MI, NT = WN * WTOK, NTHR = 32 * WM * WN;
    constexpr int NPL = NT / 16, WPL = WTOK / 16, NTW = WTOK / 8;
    constexpr int WB = MT * T::kRowBytes, SB = WB + NT * 256;
    static_assert(WTOK % 16 == 0 && WB % 16 == 0, "tile shapes");
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ unsigned s_last;

    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WM, wn = warp / WM, g = lane >> 2, t = lane & 3;
    const int tok_tile = static_cast<int>(blockIdx.x), row_tile = static_cast<int>(blockIdx.y);
    const int split = static_cast<int>(blockIdx.z);
    const int row0 = row_tile * MT;
    const int kt0 = static_cast<int>(static_cast<int64_t>(p.n_kt) * split / p.split);
    const int kt1 = static_cast<int>(static_cast<int64_t>(p.n_kt) * (split + 1) / p.split);
    const int n_k = kt1 - kt0;  // >= 1: split <= n_kt
    const uint32_t sbase = smem_addr(smem);
    const uint64_t pol = evict_first_policy();

    auto issue_x = [&](int slot, int kt) {
        const uint32_t xs = sbase + slot * SB + WB;
        const uint8_t* xg = reinterpret_cast<const uint8_t*>(p.xh);
        for (int c = tid; c < NT * 16; c += NTHR) {  // 16-byte chunks: (step, pair, lane entry)
            const int s = c / (NPL * 32), rem = c % (NPL * 32);
            const int64_t rec =
                (static_cast<int64_t>(kt) * 8 + s) * p.n_pairs + static_cast<int64_t>(tok_tile) * NPL;
            cp16x(xs + c * 16, xg + rec * 512 + rem * 16);
        }
    };

    // Q6_K: the fp32 d of this lane's rows (m tile mi, half hh: local row WR wm + 16 mi + 8 hh + g).
    float dcur[MI][2], dnext[MI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
        dcur[mi][0] = dcur[mi][1] = 0.0f;
        dnext[mi][0] = dnext[mi][1] = 0.0f;
    }

    // Prologue: weights of the first stages (no earlier kernel writes them), then the PDL wait, then x.
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st)
        if (st < n_k) T::template issue<MT, NTHR>(p, sbase + st * SB, row0, kt0 + st, pol);
    if constexpr (T::kGlobalD) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
                dcur[mi][hh] = T::load_d(p, row0 + WR * wm + 16 * mi + 8 * hh + g, kt0);
    }
    pdl_wait();
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < n_k) issue_x(st, kt0 + st);
        cp_commit();  // one group per stage (empty ones too: uniform counting)
    }

    float acc[MI][NTW][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int n = 0; n < NTW; ++n)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mi][n][c] = 0.0f;

    for (int i = 0; i < n_k; ++i) {
        cp_wait<kStages - 2>();  // stage i has landed (this thread's copies) ...
        __syncthreads();         // ... everyone's; and stage i - 1 is no longer read
        {
            const int nx = i + kStages - 1;
            if (nx < n_k) {
                const int slot = nx % kStages;
                T::template issue<MT, NTHR>(p, sbase + slot * SB, row0, kt0 + nx, pol);
                issue_x(slot, kt0 + nx);
            }
            cp_commit();
        }
        const int kt = kt0 + i;
        if constexpr (T::kGlobalD) {
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
                    dnext[mi][hh] = i + 1 < n_k ? T::load_d(p, row0 + WR * wm + 16 * mi + 8 * hh + g, kt + 1)
                                                : dcur[mi][hh];
        }
        const uint8_t* ws = smem + (i % kStages) * SB;
        const uint8_t* xs = ws + WB;
        typename T::Row ra[MI], rb[MI];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const int lr = WR * wm + 16 * mi + g;
            ra[mi] = T::template load<MT>(ws, lr, t, kt, dcur[mi][0]);
            rb[mi] = T::template load<MT>(ws, lr + 8, t, kt, dcur[mi][1]);
        }
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            uint32_t a[MI][4];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) T::frag(ra[mi], rb[mi], s, a[mi]);
#pragma unroll
            for (int j = 0; j < WPL; ++j) {
                const uint4 b =
                    *reinterpret_cast<const uint4*>(xs + ((s * NPL + wn * WPL + j) * 32 + lane) * 16);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    mma16816(acc[mi][2 * j], a[mi], b.x, b.y);
                    mma16816(acc[mi][2 * j + 1], a[mi], b.z, b.w);
                }
            }
        }
        if constexpr (T::kGlobalD) {
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) dcur[mi][hh] = dnext[mi][hh];
        }
    }
    cp_wait<0>();   // only empty groups remain; nothing is left in flight at exit
    pdl_trigger();  // every input but the split partials has been read

    // C fragment of (mi, n): c0, c1 = row g, tokens 2t, 2t + 1; c2, c3 = row g + 8.
    const int tok_w = tok_tile * NT + wn * WTOK;
    auto store = [&](int mi, int n, const float(&v)[4]) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int row = row0 + WR * wm + 16 * mi + g + (c >= 2 ? 8 : 0);
            const int tok = tok_w + 8 * n + 2 * t + (c & 1);
            if (row < p.n_out && tok < p.n_tok) p.y[static_cast<int64_t>(tok) * p.y_stride + row] = v[c];
        }
    };
    if (p.split == 1) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int n = 0; n < NTW; ++n) store(mi, n, acc[mi][n]);
        return;
    }
    const int tile = row_tile * p.tok_tiles + tok_tile;
    float4* slices = reinterpret_cast<float4*>(p.part + static_cast<int64_t>(tile) * p.split * (MT * NT));
    constexpr int kSlice4 = MT * NT / 4;  // float4 per slice
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int n = 0; n < NTW; ++n)
            slices[static_cast<int64_t>(split) * kSlice4 + (mi * NTW + n) * NTHR + tid] =
                make_float4(acc[mi][n][0], acc[mi][n][1], acc[mi][n][2], acc[mi][n][3]);
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(p.ctr + tile, 1u) == static_cast<unsigned>(p.split - 1) ? 1u : 0u;
    __syncthreads();
    if (s_last == 0) return;  // uniform over the CTA
    __threadfence();
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int n = 0; n < NTW; ++n) {
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int sp = 0; sp < p.split; ++sp) {  // fixed order: the result does not depend on arrival
                float4 q;
                if (sp == split)
                    q = make_float4(acc[mi][n][0], acc[mi][n][1], acc[mi][n][2], acc[mi][n][3]);
                else
                    q = __ldcg(slices + static_cast<int64_t>(sp) * kSlice4 + (mi * NTW + n) * NTHR + tid);
                if (sp == 0) {
                    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
                } else {
                    v[0] += q.x, v[1] += q.y, v[2] += q.z, v[3] += q.w;
                }
            }
            store(mi, n, v);
        }
}

// Sets the kernel's shared-memory attribute once per device (ids < 32; others every call) and launches
// it with PDL.
template <class T, int CFG>
void launch_cfg(const Params& p, dim3 grid, cudaStream_t stream) {
    constexpr Config c = kConfigTable[CFG];
    constexpr size_t smem = smem_bytes(T::kRowBytes, c);
    auto* kernel = qmm_kernel<T, c.wm, c.wn, c.wtok, c.mi>;
    static unsigned configured = 0;  // bit per device id
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 32 || !(__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
        if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
    }
    launch_pdl(kernel, grid, dim3(cfg_threads(c)), smem, stream, p);
}

template <class T, int... I>
void launch_any(const Params& p, int cfg, dim3 grid, cudaStream_t stream, std::integer_sequence<int, I...>) {
    ((cfg == I ? launch_cfg<T, I>(p, grid, stream) : void()), ...);
}

template <class T>
void launch_type(const Params& p, int cfg, dim3 grid, cudaStream_t stream) {
    launch_any<T>(p, cfg, grid, stream, std::make_integer_sequence<int, kConfigs>{});
}

}  // namespace pelican::cuda::qmm
