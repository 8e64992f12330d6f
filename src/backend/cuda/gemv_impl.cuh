// Private to the GEMV translation units (gemv*.cu, gpu_matrix.cu): the device layout of a
// GpuMatrix, the kernel template and its launcher. Not for other callers.
//
// Device layout (all planes start 256-byte aligned inside GpuMatrix::data; off[k] = plane k's
// byte offset, stride[k] = its bytes per row). A "unit" is what one lane handles per step.
//   F32        plane 0: rows of n_in_pad = roundup(n_in, 4) floats (zero padded); unit = 4 elements
//   F16, BF16  plane 0: rows of n_in_pad = roundup(n_in, 8) halves (zero padded); unit = 8 elements
//   Q4_0       plane 0: 16 nibble bytes per 32-block exactly as GGUF (byte j: lo = element j,
//              hi = element j + 16); plane 1: fp16 d per block.                  unit = 1 block
//   Q8_0       plane 0: int8 elements 0..15 of each block; plane 1: elements 16..31; plane 2: d
//   Q4_K       plane 0: qs bytes 0..15 of each 64-element chunk c (GGUF qs[32c .. 32c+16));
//              plane 1: qs bytes 16..31; plane 2: the 16-byte super-block header (d, dmin,
//              packed 6-bit scales/mins, as GGUF).                       unit = 1 chunk (64)
//   Q6_K       plane 0: per 32-block 16 nibble bytes (byte j: lo = low 4 bits of element j,
//              hi = of element j + 16); plane 1: per 32-block two u32 of high 2-bit pairs
//              (word h covers elements 16h .. 16h+15: byte i, bits 2g..2g+1 = element
//              16h + 4g + i); plane 2: the 16 int8 sub-block scales per super-block (element e
//              uses scale e / 16); plane 3: fp16 d per super-block.          unit = 1 block
// Every plane's row stride is a multiple of 16 bytes where the unit load is 16 bytes, so each
// lane issues aligned 128-bit loads and a warp reads 512 contiguous bytes per plane-0 load.
//
// Activations (shared memory, one area per token, tok_bytes apart):
//   quantized weights: int8 blocks of 32 (act_quant.h's 32-block rule: d = amax / 127,
//     q = rint(x * (127 / amax))), split into planes of 16-byte halves so that lane-consecutive
//     units read consecutive 16 bytes (no bank conflicts): kNP = 2 planes (half h of block b at
//     plane h, offset 16 b) or, for Q4_K, kNP = 4 (plane (b & 1) + 2 h, offset 16 (b >> 1)).
//     Then per block 8 bytes of meta at meta_off + 8 b: fp32 d, int16 sum of the first 16 q,
//     int16 sum of the last 16 q.
//   float weights: fp32 x' (normed), zero padded to n_in_pad; F16/BF16 split into two planes of
//     4-float halves of each 8-element unit (again conflict-free 128-bit reads).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/pdl.cuh"
#include "core/dtype.h"

namespace pelican::cuda::detail {

// Threads per CTA. Every CTA reads the whole input vector (and the norm weights) from L2 in its
// prologue, so the prologue's L2 traffic is CTAs x input bytes: 512-thread CTAs (one per SM at
// ~100 registers per thread, 16 warps) read it half as often as 256-thread ones (two per SM).
// Measured on the H200 (docs/performance.md): the prologue was ~6 of 15 us of the 4096x14336
// Q4_0 call with 256 threads. PELICAN_GEMV_THREADS overrides it at build time for comparisons.
#ifndef PELICAN_GEMV_THREADS
#define PELICAN_GEMV_THREADS 512
#endif
inline constexpr int kGemvThreads = PELICAN_GEMV_THREADS;
inline constexpr int kGemvWarps = kGemvThreads / 32;
// Dynamic shared memory one GEMV CTA may use (activations of its token group).
inline constexpr int kGemvMaxSmem = 200 * 1024;

// ---- layout (host and device) -------------------------------------------------------------------

struct GemvLayout {
    int n_planes = 0;
    int64_t stride[4] = {0, 0, 0, 0};  // bytes per row of each plane
    int64_t n_in_pad = 0;              // elements per row the kernels iterate over
    int unit_elems = 0;                // elements per lane unit
    int block_elems = 1;               // n_in must be a multiple of this
};

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// False for unsupported types. Shape validity (n_in % block_elems) is checked by the caller.
inline bool gemv_layout(DType t, int64_t n_in, GemvLayout* l) {
    *l = GemvLayout{};
    switch (t) {
        case DType::F32:
            l->n_planes = 1;
            l->n_in_pad = round_up(n_in, 4);
            l->stride[0] = l->n_in_pad * 4;
            l->unit_elems = 4;
            return true;
        case DType::F16:
        case DType::BF16:
            l->n_planes = 1;
            l->n_in_pad = round_up(n_in, 8);
            l->stride[0] = l->n_in_pad * 2;
            l->unit_elems = 8;
            return true;
        case DType::Q4_0:
            l->n_planes = 2;
            l->stride[0] = n_in / 2;
            l->stride[1] = n_in / 32 * 2;
            l->unit_elems = 32;
            l->block_elems = 32;
            break;
        case DType::Q8_0:
            l->n_planes = 3;
            l->stride[0] = n_in / 2;
            l->stride[1] = n_in / 2;
            l->stride[2] = n_in / 32 * 2;
            l->unit_elems = 32;
            l->block_elems = 32;
            break;
        case DType::Q4_K:
            l->n_planes = 3;
            l->stride[0] = n_in / 4;
            l->stride[1] = n_in / 4;
            l->stride[2] = n_in / 256 * 16;
            l->unit_elems = 64;
            l->block_elems = 256;
            break;
        case DType::Q6_K:
            l->n_planes = 4;
            l->stride[0] = n_in / 2;
            l->stride[1] = n_in / 4;
            l->stride[2] = n_in / 16;
            l->stride[3] = n_in / 256 * 2;
            l->unit_elems = 32;
            l->block_elems = 256;
            break;
        default:
            return false;
    }
    l->n_in_pad = n_in;
    return true;
}

inline bool gemv_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

// Shared-memory bytes of one token's activations (see the header comment).
inline int64_t gemv_token_smem(DType t, int64_t n_in) {
    if (gemv_quantized(t)) return round_up(n_in + n_in / 4, 16);
    GemvLayout l;
    gemv_layout(t, n_in, &l);
    return l.n_in_pad * 4;
}

// ---- kernel parameters --------------------------------------------------------------------------

struct GemvParams {
    const uint8_t* w = nullptr;  // GpuMatrix::data
    size_t off[4] = {0, 0, 0, 0};
    int64_t stride[4] = {0, 0, 0, 0};
    int n_in = 0;      // real elements per row
    int n_in_pad = 0;  // elements the prologue writes (float: padded; zeros past n_in)
    int n_units = 0;   // lane units per row
    int n_slots = 0;   // output rows (n_out) or gate rows (n_half) with glu
    int n_half = 0;    // glu: offset of the up rows; 0 otherwise
    bool glu = false;
    int n_groups = 0;  // CTA work groups (kGemvWarps warps x rows per warp)
    int n_tok = 1;     // tokens of this launch (<= the kernel's NT)
    const float* x = nullptr;
    int64_t x_stride = 0;
    bool x_vec = false;  // x and x_stride allow float4 loads
    const float* norm_w = nullptr;
    bool norm_vec = false;
    float norm_eps = 0.0f;
    bool norm_one_plus = false;
    const float* bias = nullptr;
    float scale = 1.0f;
    const float* residual = nullptr;
    float* y = nullptr;
    int64_t y_stride = 0;  // also the residual's row stride
    int tok_bytes = 0;     // shared-memory bytes per token
    int plane_bytes = 0;   // bytes per activation plane
    int meta_off = 0;      // quantized: byte offset of the block meta inside a token area
    // L2 prefetch hints (prefetch variants; pf_np = 0: none). Set by gemv_set_prefetch. The kernel
    // hints the first pf_len[k] bytes of every weight row of plane k < pf_np for pf_slots slots
    // (output or gate rows; glu: with their up rows) of each group it will compute, pf_groups of
    // its groups ahead (the current one included), clamped to [w, w + w_bytes).
    size_t w_bytes = 0;  // bytes of the weight allocation (GpuMatrix::bytes)
    int64_t pf_len[4] = {0, 0, 0, 0};
    int pf_np = 0;
    int pf_slots = 0;      // slots per group (the launch's rows per group)
    int pf_groups = 0;     // window of groups (>= 1), starting at the CTA's current group
    bool pf_line = false;  // prefetch.global.L2 per 128-byte line, else cp.async.bulk.prefetch.L2
    bool pf_roll = false;  // on entering each later group, hint the group that ends the window
    // Expert slots (GemvArgs::n_expert_slots; 0 = off). The CTAs of blockIdx.y = slot compute
    // slot's rows: weight rows from expert_ids[slot] * expert_rows (the ids are read after the
    // PDL wait; ids outside [0, n_experts) read expert 0), activations from
    // x + (slot / x_slot_div) * x_slot_stride, outputs (and residual) at + slot * y_slot_stride.
    // n_slots / n_half above are per expert. No L2 prefetch in this mode (pf_np = 0).
    const int32_t* expert_ids = nullptr;
    int n_expert_slots = 0;
    int n_experts = 0;
    int64_t expert_rows = 0;
    int64_t x_slot_stride = 0;
    int x_slot_div = 1;
    int64_t y_slot_stride = 0;
    // Benchmarks only (gemv_set_debug_mode): 0 normal; 1 skip the activation prologue; 2 skip the
    // weight loop (prologue only); 3 empty kernel (PDL wait and trigger). Modes 1-3 give wrong y.
    int debug = 0;
};

// ---- device helpers ----------------------------------------------------------------------------

#ifdef __CUDACC__

// Streaming weight loads: read-only path, not allocated in L1 (each byte is used once).
__device__ __forceinline__ uint4 ld_stream16(const uint8_t* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}
__device__ __forceinline__ uint2 ld_stream8(const uint8_t* p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}
__device__ __forceinline__ uint32_t ld_stream2(const uint8_t* p) {
    unsigned short h;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(h) : "l"(p));
    return h;
}

// L2 prefetch hints (no data returned, nothing waits for them; they never change results).
// Bulk: 16-byte aligned address, bytes a multiple of 16 (sm_90 TMA prefetch; a no-op before).
__device__ __forceinline__ void prefetch_l2_bulk(uintptr_t addr, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;"
                 :
                 : "l"(__cvta_generic_to_global(reinterpret_cast<const void*>(addr))), "r"(bytes));
#else
    (void)addr;
    (void)bytes;
#endif
}
// The 128-byte line holding addr.
__device__ __forceinline__ void prefetch_l2_line(uintptr_t addr) {
    asm volatile("prefetch.global.L2 [%0];"
                 :
                 : "l"(__cvta_generic_to_global(reinterpret_cast<const void*>(addr))));
}

__device__ __forceinline__ float half_bits_to_float(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffffu)));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ const uint8_t* plane_row(const GemvParams& p, int k, int64_t row) {
    return p.w + p.off[k] + row * p.stride[k];
}

// Four consecutive activations x[t][4f .. 4f+3] (zeros past n_in).
__device__ __forceinline__ float4 load_x4(const float* row, int f, int n, bool vec) {
    const int e = 4 * f;
    if (vec && e + 3 < n) return __ldg(reinterpret_cast<const float4*>(row) + f);
    float4 v;
    v.x = e < n ? __ldg(row + e) : 0.0f;
    v.y = e + 1 < n ? __ldg(row + e + 1) : 0.0f;
    v.z = e + 2 < n ? __ldg(row + e + 2) : 0.0f;
    v.w = e + 3 < n ? __ldg(row + e + 3) : 0.0f;
    return v;
}

// ---- weight-type traits ------------------------------------------------------------------------
// Each trait: W (raw registers of one unit), load(), Up (unpacked registers), unpack(), X (one
// token's activations for a unit), load_x(), dot() (acc += unit . x).

struct TraitF32 {
    static constexpr bool kQuant = false;
    static constexpr int kNP = 1;
    static constexpr int kBatch = 4;  // units in flight per lane (over the warp's rows)
    struct W {
        uint4 q;
    };
    using Up = float4;
    using X = float4;
    __device__ static void load(W& w, const GemvParams& p, int64_t row, int u) {
        w.q = ld_stream16(plane_row(p, 0, row) + 16 * u);
    }
    __device__ static Up unpack(const W& w, int) {
        return make_float4(__uint_as_float(w.q.x), __uint_as_float(w.q.y), __uint_as_float(w.q.z),
                           __uint_as_float(w.q.w));
    }
    __device__ static X load_x(const uint8_t* xt, const GemvParams&, int u) {
        return reinterpret_cast<const float4*>(xt)[u];
    }
    __device__ static float dot(const Up& w, const X& x, float acc) {
        acc = fmaf(w.x, x.x, acc);
        acc = fmaf(w.y, x.y, acc);
        acc = fmaf(w.z, x.z, acc);
        return fmaf(w.w, x.w, acc);
    }
};

template <bool kBf16>
struct TraitHalf {
    static constexpr bool kQuant = false;
    static constexpr int kNP = 2;
    static constexpr int kBatch = 4;
    struct W {
        uint4 q;
    };
    struct Up {
        float v[8];
    };
    struct X {
        float4 a, b;
    };
    __device__ static void load(W& w, const GemvParams& p, int64_t row, int u) {
        w.q = ld_stream16(plane_row(p, 0, row) + 16 * u);
    }
    __device__ static void pair(uint32_t bits, float& lo, float& hi) {
        if constexpr (kBf16) {
            lo = __uint_as_float(bits << 16);
            hi = __uint_as_float(bits & 0xffff0000u);
        } else {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&bits));
            lo = f.x;
            hi = f.y;
        }
    }
    __device__ static Up unpack(const W& w, int) {
        Up r;
        pair(w.q.x, r.v[0], r.v[1]);
        pair(w.q.y, r.v[2], r.v[3]);
        pair(w.q.z, r.v[4], r.v[5]);
        pair(w.q.w, r.v[6], r.v[7]);
        return r;
    }
    __device__ static X load_x(const uint8_t* xt, const GemvParams& p, int u) {
        return X{*reinterpret_cast<const float4*>(xt + 16 * u),
                 *reinterpret_cast<const float4*>(xt + p.plane_bytes + 16 * u)};
    }
    __device__ static float dot(const Up& w, const X& x, float acc) {
        acc = fmaf(w.v[0], x.a.x, acc);
        acc = fmaf(w.v[1], x.a.y, acc);
        acc = fmaf(w.v[2], x.a.z, acc);
        acc = fmaf(w.v[3], x.a.w, acc);
        acc = fmaf(w.v[4], x.b.x, acc);
        acc = fmaf(w.v[5], x.b.y, acc);
        acc = fmaf(w.v[6], x.b.z, acc);
        return fmaf(w.v[7], x.b.w, acc);
    }
};

// Quantized activations of one 32-block (kNP = 2 planes): halves a (elements 0..15), b (16..31).
struct XBlock {
    int4 a, b;
    float d;
    int sum_lo, sum_hi;
};
__device__ __forceinline__ XBlock load_xblock(const uint8_t* xt, const GemvParams& p, int blk) {
    XBlock x;
    x.a = *reinterpret_cast<const int4*>(xt + 16 * blk);
    x.b = *reinterpret_cast<const int4*>(xt + p.plane_bytes + 16 * blk);
    const uint2 m = *reinterpret_cast<const uint2*>(xt + p.meta_off + 8 * blk);
    x.d = __uint_as_float(m.x);
    x.sum_lo = static_cast<int>(static_cast<short>(m.y & 0xffffu));
    x.sum_hi = static_cast<int>(static_cast<short>(m.y >> 16));
    return x;
}

__device__ __forceinline__ int dot16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, const int4& x,
                                     int acc) {
    acc = __dp4a(static_cast<int>(w0), x.x, acc);
    acc = __dp4a(static_cast<int>(w1), x.y, acc);
    acc = __dp4a(static_cast<int>(w2), x.z, acc);
    return __dp4a(static_cast<int>(w3), x.w, acc);
}

struct TraitQ4_0 {
    static constexpr bool kQuant = true;
    static constexpr int kNP = 2;
    static constexpr int kBatch = 4;
    struct W {
        uint4 q;
        uint32_t d;
    };
    struct Up {
        uint32_t lo[4], hi[4];
        float d;
    };
    using X = XBlock;
    __device__ static void load(W& w, const GemvParams& p, int64_t row, int u) {
        w.q = ld_stream16(plane_row(p, 0, row) + 16 * u);
        w.d = ld_stream2(plane_row(p, 1, row) + 2 * u);
    }
    __device__ static Up unpack(const W& w, int) {
        Up r;
        const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            r.lo[k] = q[k] & 0x0f0f0f0fu;
            r.hi[k] = (q[k] >> 4) & 0x0f0f0f0fu;
        }
        r.d = half_bits_to_float(w.d);
        return r;
    }
    __device__ static X load_x(const uint8_t* xt, const GemvParams& p, int u) {
        return load_xblock(xt, p, u);
    }
    __device__ static float dot(const Up& w, const X& x, float acc) {
        int s = dot16(w.lo[0], w.lo[1], w.lo[2], w.lo[3], x.a, 0);
        s = dot16(w.hi[0], w.hi[1], w.hi[2], w.hi[3], x.b, s);
        s -= 8 * (x.sum_lo + x.sum_hi);  // codes are stored +8
        return fmaf(w.d * x.d, static_cast<float>(s), acc);
    }
};

struct TraitQ8_0 {
    static constexpr bool kQuant = true;
    static constexpr int kNP = 2;
    static constexpr int kBatch = 2;
    struct W {
        uint4 a, b;
        uint32_t d;
    };
    struct Up {
        uint4 a, b;
        float d;
    };
    using X = XBlock;
    __device__ static void load(W& w, const GemvParams& p, int64_t row, int u) {
        w.a = ld_stream16(plane_row(p, 0, row) + 16 * u);
        w.b = ld_stream16(plane_row(p, 1, row) + 16 * u);
        w.d = ld_stream2(plane_row(p, 2, row) + 2 * u);
    }
    __device__ static Up unpack(const W& w, int) { return Up{w.a, w.b, half_bits_to_float(w.d)}; }
    __device__ static X load_x(const uint8_t* xt, const GemvParams& p, int u) {
        return load_xblock(xt, p, u);
    }
    __device__ static float dot(const Up& w, const X& x, float acc) {
        int s = dot16(w.a.x, w.a.y, w.a.z, w.a.w, x.a, 0);
        s = dot16(w.b.x, w.b.y, w.b.z, w.b.w, x.b, s);
        return fmaf(w.d * x.d, static_cast<float>(s), acc);
    }
};

// Q4_K sub-block pair (2c, 2c+1) 6-bit scales and mins from the header words s0 = scales[0..3],
// s1 = scales[4..7], s2 = scales[8..11] (blocks.h's unpack rule).
__device__ __forceinline__ void q4k_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int c, int& sc0, int& m0,
                                              int& sc1, int& m1) {
    const int sh = 16 * (c & 1);
    const uint32_t a = s0 >> sh, b = s1 >> sh, e = s2 >> sh;
    if (c < 2) {
        sc0 = a & 63;
        sc1 = (a >> 8) & 63;
        m0 = b & 63;
        m1 = (b >> 8) & 63;
    } else {
        sc0 = (e & 15) | ((a >> 6) & 3) << 4;
        sc1 = ((e >> 8) & 15) | ((a >> 14) & 3) << 4;
        m0 = ((e >> 4) & 15) | ((b >> 6) & 3) << 4;
        m1 = ((e >> 12) & 15) | ((b >> 14) & 3) << 4;
    }
}

struct TraitQ4_K {
    static constexpr bool kQuant = true;
    static constexpr int kNP = 4;
    static constexpr int kBatch = 2;
    struct W {
        uint4 a, b, h;
    };
    struct Up {
        uint32_t lo_a[4], hi_a[4], lo_b[4], hi_b[4];
        int sc0, sc1;
        float d, dm0, dm1;  // d, dmin * m0, dmin * m1
    };
    struct X {
        int4 p0, p1, p2, p3;  // (block 2u, half 0), (2u+1, half 0), (2u, half 1), (2u+1, half 1)
        float d0, d1;
        int s0, s1;
    };
    __device__ static void load(W& w, const GemvParams& p, int64_t row, int u) {
        w.a = ld_stream16(plane_row(p, 0, row) + 16 * u);
        w.b = ld_stream16(plane_row(p, 1, row) + 16 * u);
        w.h = ld_stream16(plane_row(p, 2, row) + 16 * (u >> 2));
    }
    __device__ static Up unpack(const W& w, int u) {
        Up r;
        const uint32_t a[4] = {w.a.x, w.a.y, w.a.z, w.a.w}, b[4] = {w.b.x, w.b.y, w.b.z, w.b.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            r.lo_a[k] = a[k] & 0x0f0f0f0fu;
            r.hi_a[k] = (a[k] >> 4) & 0x0f0f0f0fu;
            r.lo_b[k] = b[k] & 0x0f0f0f0fu;
            r.hi_b[k] = (b[k] >> 4) & 0x0f0f0f0fu;
        }
        int m0, m1;
        q4k_scale_min(w.h.y, w.h.z, w.h.w, u & 3, r.sc0, m0, r.sc1, m1);
        r.d = half_bits_to_float(w.h.x);
        const float dmin = half_bits_to_float(w.h.x >> 16);
        r.dm0 = dmin * static_cast<float>(m0);
        r.dm1 = dmin * static_cast<float>(m1);
        return r;
    }
    __device__ static X load_x(const uint8_t* xt, const GemvParams& p, int u) {
        X x;
        x.p0 = *reinterpret_cast<const int4*>(xt + 16 * u);
        x.p1 = *reinterpret_cast<const int4*>(xt + p.plane_bytes + 16 * u);
        x.p2 = *reinterpret_cast<const int4*>(xt + 2 * p.plane_bytes + 16 * u);
        x.p3 = *reinterpret_cast<const int4*>(xt + 3 * p.plane_bytes + 16 * u);
        const uint4 m = *reinterpret_cast<const uint4*>(xt + p.meta_off + 16 * u);
        x.d0 = __uint_as_float(m.x);
        x.s0 = static_cast<int>(static_cast<short>(m.y & 0xffffu)) +
               static_cast<int>(static_cast<short>(m.y >> 16));
        x.d1 = __uint_as_float(m.z);
        x.s1 = static_cast<int>(static_cast<short>(m.w & 0xffffu)) +
               static_cast<int>(static_cast<short>(m.w >> 16));
        return x;
    }
    __device__ static float dot(const Up& w, const X& x, float acc) {
        int q0 = dot16(w.lo_a[0], w.lo_a[1], w.lo_a[2], w.lo_a[3], x.p0, 0);
        q0 = dot16(w.lo_b[0], w.lo_b[1], w.lo_b[2], w.lo_b[3], x.p2, q0);
        int q1 = dot16(w.hi_a[0], w.hi_a[1], w.hi_a[2], w.hi_a[3], x.p1, 0);
        q1 = dot16(w.hi_b[0], w.hi_b[1], w.hi_b[2], w.hi_b[3], x.p3, q1);
        // sum_j (d sc q_j - dmin m) xq_j dx = dx (d (sc dot) - dmin m sum): integer parts exact.
        const float v0 = fmaf(w.d, static_cast<float>(w.sc0 * q0), -w.dm0 * static_cast<float>(x.s0));
        const float v1 = fmaf(w.d, static_cast<float>(w.sc1 * q1), -w.dm1 * static_cast<float>(x.s1));
        return fmaf(x.d1, v1, fmaf(x.d0, v0, acc));
    }
};

struct TraitQ6_K {
    static constexpr bool kQuant = true;
    static constexpr int kNP = 2;
    static constexpr int kBatch = 4;
    struct W {
        uint4 q;
        uint2 h;
        uint32_t sc, d;
    };
    struct Up {
        uint32_t lo[4], hi[4];  // 6-bit codes (0..63) of elements 0..15 and 16..31
        int sc0, sc1;
        float d;
    };
    using X = XBlock;
    __device__ static void load(W& w, const GemvParams& p, int64_t row, int u) {
        w.q = ld_stream16(plane_row(p, 0, row) + 16 * u);
        w.h = ld_stream8(plane_row(p, 1, row) + 8 * u);
        w.sc = ld_stream2(plane_row(p, 2, row) + 2 * u);
        w.d = ld_stream2(plane_row(p, 3, row) + 2 * (u >> 3));
    }
    __device__ static Up unpack(const W& w, int) {
        Up r;
        const uint32_t q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            r.lo[g] = (q[g] & 0x0f0f0f0fu) | (((w.h.x >> (2 * g)) & 0x03030303u) << 4);
            r.hi[g] = ((q[g] >> 4) & 0x0f0f0f0fu) | (((w.h.y >> (2 * g)) & 0x03030303u) << 4);
        }
        r.sc0 = static_cast<int>(static_cast<int8_t>(w.sc & 0xffu));
        r.sc1 = static_cast<int>(static_cast<int8_t>((w.sc >> 8) & 0xffu));
        r.d = half_bits_to_float(w.d);
        return r;
    }
    __device__ static X load_x(const uint8_t* xt, const GemvParams& p, int u) {
        return load_xblock(xt, p, u);
    }
    __device__ static float dot(const Up& w, const X& x, float acc) {
        const int dl = dot16(w.lo[0], w.lo[1], w.lo[2], w.lo[3], x.a, 0) - 32 * x.sum_lo;  // codes stored +32
        const int dh = dot16(w.hi[0], w.hi[1], w.hi[2], w.hi[3], x.b, 0) - 32 * x.sum_hi;
        return fmaf(w.d * x.d, static_cast<float>(w.sc0 * dl + w.sc1 * dh), acc);
    }
};

// ---- prologue ----------------------------------------------------------------------------------

// rstd[t] = 1 / sqrt(mean(x_t^2) + eps) for t < n_tok (1 when there is no norm). x: the CTA's
// activations (p.x, or its expert slot's rows).
template <int NT>
__device__ void gemv_rstd(const GemvParams& p, const float* x, float (&rstd)[NT]) {
    __shared__ float part[kGemvWarps][NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) rstd[t] = 1.0f;
    if (p.norm_w == nullptr) return;
    const int nf = (p.n_in + 3) / 4;
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        ss[t] = 0.0f;
        if (t < p.n_tok) {
            const float* row = x + t * p.x_stride;
            for (int f0 = threadIdx.x; f0 < nf; f0 += 4 * kGemvThreads) {
                float4 v[4];  // four loads in flight per thread
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int f = f0 + k * kGemvThreads;
                    v[k] = f < nf ? load_x4(row, f, p.n_in, p.x_vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    ss[t] = fmaf(v[k].x, v[k].x,
                                 fmaf(v[k].y, v[k].y, fmaf(v[k].z, v[k].z, fmaf(v[k].w, v[k].w, ss[t]))));
            }
        }
        ss[t] = warp_sum(ss[t]);
    }
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int t = 0; t < NT; ++t) part[threadIdx.x >> 5][t] = ss[t];
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kGemvWarps; ++k) s += part[k][t];
        rstd[t] =
            __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, static_cast<float>(p.n_in)), p.norm_eps)));
    }
}

// x'[t][4f .. 4f+3] (normed), zeros past n_in and for t >= n_tok.
template <int NT>
__device__ __forceinline__ float4 gemv_x4(const GemvParams& p, const float* x, const float (&rstd)[NT], int t,
                                          int f) {
    if (t >= p.n_tok) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 v = load_x4(x + t * p.x_stride, f, p.n_in, p.x_vec);
    if (p.norm_w != nullptr) {
        float4 w = load_x4(p.norm_w, f, p.n_in, p.norm_vec);
        if (p.norm_one_plus) {
            w.x = __fadd_rn(1.0f, w.x);
            w.y = __fadd_rn(1.0f, w.y);
            w.z = __fadd_rn(1.0f, w.z);
            w.w = __fadd_rn(1.0f, w.w);
        }
        const float r = rstd[t];
        v.x = __fmul_rn(__fmul_rn(v.x, r), w.x);
        v.y = __fmul_rn(__fmul_rn(v.y, r), w.y);
        v.z = __fmul_rn(__fmul_rn(v.z, r), w.z);
        v.w = __fmul_rn(__fmul_rn(v.w, r), w.w);
    }
    return v;
}

// Float weights: fp32 x' into shared memory (planes per the header comment).
template <int NT, int kNP>
__device__ void gemv_prologue_float(const GemvParams& p, const float* x, uint8_t* smem) {
    float rstd[NT];
    gemv_rstd<NT>(p, x, rstd);
    const int nf = p.n_in_pad / 4;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        uint8_t* xt = smem + t * p.tok_bytes;
        for (int f0 = threadIdx.x; f0 < nf; f0 += 4 * kGemvThreads) {
            float4 v[4];  // four loads in flight per thread
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int f = f0 + k * kGemvThreads;
                v[k] = f < nf ? gemv_x4<NT>(p, x, rstd, t, f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int f = f0 + k * kGemvThreads;
                const int off = kNP == 1 ? 16 * f : (f & 1) * p.plane_bytes + 16 * (f >> 1);
                if (f < nf) *reinterpret_cast<float4*>(xt + off) = v[k];
            }
        }
    }
}

// Quantizes x[4f .. 4f+3] (one lane's quarter of a half-block) with the other 7 lanes of its
// 32-block (consecutive lanes; all 32 lanes of the warp must call it) into the token area xt.
template <int kNP>
__device__ __forceinline__ void quantize4(const GemvParams& p, uint8_t* xt, float4 v, int f, bool active) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    const float d = __fdiv_rn(amax, 127.0f);
    const float is = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int q0 = __float2int_rn(__fmul_rn(v.x, is));
    const int q1 = __float2int_rn(__fmul_rn(v.y, is));
    const int q2 = __float2int_rn(__fmul_rn(v.z, is));
    const int q3 = __float2int_rn(__fmul_rn(v.w, is));
    const uint32_t word = (static_cast<uint32_t>(q0) & 0xffu) | (static_cast<uint32_t>(q1) & 0xffu) << 8 |
                          (static_cast<uint32_t>(q2) & 0xffu) << 16 | (static_cast<uint32_t>(q3) << 24);
    int s = q0 + q1 + q2 + q3;
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    const int s_hi = __shfl_xor_sync(0xffffffffu, s, 4);
    if (active) {
        const int blk = f >> 3, sub = f & 7, half = sub >> 2;
        const int plane = kNP == 2 ? half : (blk & 1) + 2 * half;
        const int idx = kNP == 2 ? blk : blk >> 1;
        *reinterpret_cast<uint32_t*>(xt + plane * p.plane_bytes + 16 * idx + 4 * (sub & 3)) = word;
        if (sub == 0) {
            const uint32_t sums = (static_cast<uint32_t>(s) & 0xffffu) | (static_cast<uint32_t>(s_hi) << 16);
            *reinterpret_cast<uint2*>(xt + p.meta_off + 8 * blk) = make_uint2(__float_as_uint(d), sums);
        }
    }
}

// Quantized weights: int8 32-blocks (act_quant.h rule) + meta into shared memory. Each block is
// handled by 8 consecutive lanes (4 elements each).
// One token whose row fits in 4 float4 per thread (n_in <= 4096): x and the norm weights are
// loaded once into registers, the sum of squares reduced, then normalised and quantized from the
// registers (one global round trip instead of two). Same arithmetic as gemv_rstd + gemv_x4.
template <int kNP>
__device__ void gemv_prologue_quant_short(const GemvParams& p, const float* x, uint8_t* smem) {
    __shared__ float part[kGemvWarps];
    const int nf = p.n_in / 4;
    float4 v[4], nw[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int f = k * kGemvThreads + static_cast<int>(threadIdx.x);
        const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        v[k] = f < nf ? load_x4(x, f, p.n_in, p.x_vec) : z;
        nw[k] = (p.norm_w != nullptr && f < nf) ? load_x4(p.norm_w, f, p.n_in, p.norm_vec) : z;
    }
    if (p.norm_w != nullptr) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k)
            ss = fmaf(v[k].x, v[k].x, fmaf(v[k].y, v[k].y, fmaf(v[k].z, v[k].z, fmaf(v[k].w, v[k].w, ss))));
        ss = warp_sum(ss);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
        __syncthreads();
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kGemvWarps; ++k) s += part[k];
        const float r =
            __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, static_cast<float>(p.n_in)), p.norm_eps)));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float4 w = nw[k];
            if (p.norm_one_plus) {
                w.x = __fadd_rn(1.0f, w.x);
                w.y = __fadd_rn(1.0f, w.y);
                w.z = __fadd_rn(1.0f, w.z);
                w.w = __fadd_rn(1.0f, w.w);
            }
            v[k].x = __fmul_rn(__fmul_rn(v[k].x, r), w.x);
            v[k].y = __fmul_rn(__fmul_rn(v[k].y, r), w.y);
            v[k].z = __fmul_rn(__fmul_rn(v[k].z, r), w.z);
            v[k].w = __fmul_rn(__fmul_rn(v[k].w, r), w.w);
        }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int f = k * kGemvThreads + static_cast<int>(threadIdx.x);
        quantize4<kNP>(p, smem, v[k], f, f < nf);  // whole 8-lane groups are active or not
    }
}

template <int NT, int kNP>
__device__ void gemv_prologue_quant(const GemvParams& p, const float* x, uint8_t* smem) {
    const int nf = p.n_in / 4;  // a multiple of 8
    if constexpr (NT == 1) {
        if (nf <= 4 * kGemvThreads) {
            gemv_prologue_quant_short<kNP>(p, x, smem);
            return;
        }
    }
    float rstd[NT];
    gemv_rstd<NT>(p, x, rstd);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        uint8_t* xt = smem + t * p.tok_bytes;
        for (int f0 = 0; f0 < nf; f0 += 8 * kGemvThreads) {
            float4 v[8];  // eight loads in flight per thread
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int f = f0 + k * kGemvThreads + static_cast<int>(threadIdx.x);
                v[k] = f < nf ? gemv_x4<NT>(p, x, rstd, t, f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int f = f0 + k * kGemvThreads + static_cast<int>(threadIdx.x);
                quantize4<kNP>(p, xt, v[k], f, f < nf);  // whole 8-lane groups are active or not
            }
        }
    }
}

// ---- kernel ------------------------------------------------------------------------------------
// Decode variants (n_tok = 1 kernels; larger token counts use NT > 1 kernels with KS = 1):
//   R  output rows per warp (glu: R gate rows and their R up rows, 2R weight rows),
//   U  units per row per lane per batch, counted for 16-byte units of kBatch = 4 types (halved
//      for kBatch = 2 types: Q8_0, Q4_K read 2-3 x 16 bytes per unit) -> R * U loads in flight,
//   KS warps of a CTA splitting each row (split-K, reduced through shared memory).
// A warp's batch b covers 32-unit chunks c = (b * U + j) * KS + ks, j < U (ks: its split index),
// so the KS warps of a row interleave at 512-byte granularity and share the tail evenly.

// L2 prefetch of the weights of n_g groups of this CTA: g0, g0 + gridDim.x, ... (those below
// n_groups), all planes k < pf_np, the first pf_len[k] bytes of each of their weight rows (glu:
// the gate and the up rows of each slot). A hint only: each range is widened to 16-byte bounds
// and then clamped to the 16-byte aligned inside of [w, w + w_bytes), so no address outside the
// allocation is named. Bulk mode: one cp.async.bulk.prefetch per (row, plane), spread over the
// threads; line mode: one prefetch.global.L2 per 128-byte line, (row, plane) items over the
// warps and their lines over the lanes. Must be called by the whole CTA (no barrier inside).
__device__ __forceinline__ void gemv_prefetch(const GemvParams& p, int g0, int n_g) {
    const int halves = p.glu ? 2 : 1;
    const int rows_per_group = p.pf_slots * halves;
    const int items = n_g * rows_per_group * p.pf_np;
    const uintptr_t base = reinterpret_cast<uintptr_t>(p.w);
    const uintptr_t lim_lo = (base + 15) & ~uintptr_t{15}, lim_hi = (base + p.w_bytes) & ~uintptr_t{15};
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
    const bool line = p.pf_line;
    for (int it = line ? tid >> 5 : tid; it < items; it += line ? kGemvWarps : kGemvThreads) {
        const int k = it % p.pf_np, r = it / p.pf_np;
        const int j = r / rows_per_group, rr = r % rows_per_group;
        const int64_t g = g0 + static_cast<int64_t>(j) * gridDim.x;
        if (g >= p.n_groups) break;  // j only grows with it
        const int64_t slot = g * p.pf_slots + rr % p.pf_slots;
        if (slot >= p.n_slots) continue;
        const int64_t row = slot + (rr / p.pf_slots) * static_cast<int64_t>(p.n_half);
        const uintptr_t a = base + p.off[k] + static_cast<uintptr_t>(row * p.stride[k]);
        uintptr_t lo = a & ~uintptr_t{15},
                  hi = (a + static_cast<uintptr_t>(p.pf_len[k]) + 15) & ~uintptr_t{15};
        lo = lo > lim_lo ? lo : lim_lo;
        hi = hi < lim_hi ? hi : lim_hi;
        if (hi <= lo) continue;
        if (line) {
            for (uintptr_t l = (lo & ~uintptr_t{127}) + 128u * static_cast<unsigned>(lane); l < hi;
                 l += 32u * 128u)
                prefetch_l2_line(l > lo ? l : lo);
        } else {
            prefetch_l2_bulk(lo, static_cast<uint32_t>(hi - lo));
        }
    }
}

template <class T, int U4>
struct GemvUnits {
    static constexpr int v = U4 * T::kBatch / 4 > 0 ? U4* T::kBatch / 4 : 1;
};

// R: weight rows per warp (glu: R/2 gate + R/2 up). NT: token capacity (>= p.n_tok). E: the
// expert-slot kernel (NT = 1; p.n_expert_slots > 0), a separate instantiation so that the plain
// kernels carry none of its state.
template <class T, int NT, int R, int U, int KS, bool E>
__global__ void __launch_bounds__(kGemvThreads, kGemvThreads <= 256 && NT * R * U <= 4 ? 2 : 1)
    gemv_kernel(const GemvParams p) {
    extern __shared__ __align__(16) uint8_t smem[];
    static_assert(kGemvWarps % KS == 0, "KS must divide the warps of a CTA");
    constexpr int kRowWarps = kGemvWarps / KS;
    constexpr int H = R / 2;  // glu: gate rows per warp
    __shared__ float red[KS > 1 ? kGemvWarps : 1][R][NT];
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
    const int rw = warp / KS, ks = warp % KS;
    const int n_chunks = (p.n_units + 31) / 32;
    const int n_batches = (n_chunks + U * KS - 1) / (U * KS);

    // Expert slots (E): the weight rows of this CTA's expert start at row_base (set after the PDL
    // wait); x_e, y_e and res_e are this slot's x, y and residual. Otherwise row_base = 0 and the
    // kernel uses p's pointers.
    static_assert(!E || NT == 1, "expert slots take one token");
    int64_t row_base = 0;
    const float* x_e = nullptr;
    float* y_e = nullptr;
    const float* res_e = nullptr;
    int64_t rows[R];  // weight rows (row_base included)
    bool valid[R];
    auto set_rows = [&](int group) {
        const int wg = group * kRowWarps + rw;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int i = wg * R + s;
            int64_t row = i;
            if constexpr (H > 0) {
                if (p.glu) {
                    i = wg * H + s % H;
                    row = static_cast<int64_t>(i) + (s / H) * static_cast<int64_t>(p.n_half);
                }
            }
            valid[s] = i < p.n_slots;
            rows[s] = row + row_base;
        }
    };
    auto unit_of = [&](int batch, int j) { return ((batch * U + j) * KS + ks) * 32 + lane; };
    typename T::W w[U][R];
    auto load_batch = [&](int batch) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = unit_of(batch, j);
#pragma unroll
            for (int s = 0; s < R; ++s) {
                if (valid[s] && u < p.n_units)
                    T::load(w[j][s], p, rows[s], u);
                else
                    w[j][s] = typename T::W{};
            }
        }
    };

    if (p.debug == 3) {
        pdl_wait();
        pdl_trigger();
        return;
    }
    int group = static_cast<int>(blockIdx.x), batch = 0;
    if constexpr (E) {
        // The expert ids come from the router kernel: wait before reading them, so here the
        // weight rows (and their loads) follow the wait.
        pdl_wait();
        const int slot = static_cast<int>(blockIdx.y);
        int e = p.expert_ids[slot];
        if (e < 0 || e >= p.n_experts) e = 0;
        row_base = static_cast<int64_t>(e) * p.expert_rows;
        x_e = p.x + static_cast<int64_t>(slot / p.x_slot_div) * p.x_slot_stride;
        y_e = p.y + static_cast<int64_t>(slot) * p.y_slot_stride;
        res_e = p.residual ? p.residual + static_cast<int64_t>(slot) * p.y_slot_stride : nullptr;
    }
    set_rows(group);
    load_batch(0);  // weights never depend on earlier kernels: in flight before the PDL wait (not
                    // in expert mode, where the rows depend on the ids)
    // Prefetch variants: the CTA's next weights into L2 while it waits and runs the prologue.
    if constexpr (!E) {
        if (p.pf_np > 0) gemv_prefetch(p, group, p.pf_groups);
        pdl_wait();  // x, norm inputs, residual and y are written/read by neighbouring kernels
    }
    if (p.debug != 1) {
        if constexpr (T::kQuant)
            gemv_prologue_quant<NT, T::kNP>(p, E ? x_e : p.x, smem);
        else
            gemv_prologue_float<NT, T::kNP>(p, E ? x_e : p.x, smem);
    }
    __syncthreads();
    pdl_trigger();  // this CTA has read x: the next kernel's CTAs may be scheduled
    if (p.debug == 2) return;

    float acc[R][NT];
#pragma unroll
    for (int s = 0; s < R; ++s)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[s][t] = 0.0f;

    for (;;) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = unit_of(batch, j);
            if (u < p.n_units) {
                typename T::Up up[R];
#pragma unroll
                for (int s = 0; s < R; ++s) up[s] = T::unpack(w[j][s], u);
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    const typename T::X x = T::load_x(smem + t * p.tok_bytes, p, u);
#pragma unroll
                    for (int s = 0; s < R; ++s) acc[s][t] = T::dot(up[s], x, acc[s][t]);
                }
            }
        }
        // Next batch: issue its loads before this group's reduction and epilogue.
        int next_batch = batch + 1, next_group = group;
        if (next_batch == n_batches) {
            next_batch = 0;
            next_group += static_cast<int>(gridDim.x);
        }
        const bool more = next_group < p.n_groups;  // uniform over the CTA
        int64_t keep_rows[R];
        bool keep_valid[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            keep_rows[s] = rows[s];
            keep_valid[s] = valid[s];
        }
        if (more) {
            if (next_group != group) set_rows(next_group);
            load_batch(next_batch);
            // Rolling prefetch: entering a new group, hint the last group of the window.
            if (!E && p.pf_roll && next_group != group)
                gemv_prefetch(p, next_group + (p.pf_groups - 1) * static_cast<int>(gridDim.x), 1);
        }
        if (next_batch == 0) {  // the group is complete: reduce over lanes (and warps), epilogue
#pragma unroll
            for (int s = 0; s < R; ++s)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[s][t] = warp_sum(acc[s][t]);
            bool out_warp = true;
            if constexpr (KS > 1) {
                if (lane == 0) {
#pragma unroll
                    for (int s = 0; s < R; ++s)
#pragma unroll
                        for (int t = 0; t < NT; ++t) red[warp][s][t] = acc[s][t];
                }
                __syncthreads();
                out_warp = ks == 0;
                if (out_warp) {
#pragma unroll
                    for (int s = 0; s < R; ++s)
#pragma unroll
                        for (int t = 0; t < NT; ++t) {
                            float v = red[warp][s][t];
#pragma unroll
                            for (int k = 1; k < KS; ++k) v += red[warp + k][s][t];
                            acc[s][t] = v;
                        }
                }
            }
            if (out_warp && !p.glu) {
#pragma unroll
                for (int s = 0; s < R; ++s)
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        if (lane == ((s * NT + t) & 31) && keep_valid[s] && t < p.n_tok) {
                            float* const y = E ? y_e : p.y;
                            const float* const residual = E ? res_e : p.residual;
                            const int64_t o = keep_rows[s] - row_base;
                            float v = acc[s][t];
                            if (p.bias) v += __ldg(p.bias + o);
                            v *= p.scale;
                            if (residual) v += residual[t * p.y_stride + o];
                            y[t * p.y_stride + o] = v;
                        }
                    }
            } else if constexpr (H > 0) {
                if (out_warp) {
#pragma unroll
                    for (int s = 0; s < H; ++s)
#pragma unroll
                        for (int t = 0; t < NT; ++t) {
                            if (lane == ((s * NT + t) & 31) && keep_valid[s] && t < p.n_tok) {
                                float* const y = E ? y_e : p.y;
                                const float* const residual = E ? res_e : p.residual;
                                const int64_t og = keep_rows[s] - row_base, ou = keep_rows[s + H] - row_base;
                                float g = acc[s][t], v = acc[s + H][t];
                                if (p.bias) {
                                    g += __ldg(p.bias + og);
                                    v += __ldg(p.bias + ou);
                                }
                                g *= p.scale;
                                v *= p.scale;
                                float out = g / (1.0f + expf(-g)) * v;
                                if (residual) out += residual[t * p.y_stride + og];
                                y[t * p.y_stride + og] = out;
                            }
                        }
                }
            }
            if constexpr (KS > 1) __syncthreads();  // red is reused by the next group
#pragma unroll
            for (int s = 0; s < R; ++s)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[s][t] = 0.0f;
        }
        if (!more) break;
        group = next_group;
        batch = next_batch;
    }
}

// ---- launcher ----------------------------------------------------------------------------------

// CTAs per SM the grid is sized for: 0 = as many as fit (occupancy); see gemv_set_grid_policy.
int gemv_grid_ctas_per_sm();
// GemvParams::debug for every launch (gemv_set_debug_mode).
int gemv_debug_mode();
// SMs of the current device (cached per device).
int gemv_sm_count();
// L2 bytes of the current device (cached per device).
int64_t gemv_l2_bytes();
// CTAs of kGemvThreads threads that fit on one SM of the current device, computed from the
// device limits (cached; no CUDA call, so it is safe inside a graph capture).
int gemv_occupancy(int regs_per_thread, int static_smem, size_t dyn_smem);

// Decode kernel configurations (n_tok = 1): rows per warp R, units in flight per row U4 (for
// kBatch = 4 types), split-K warps KS. A variant (gemv.h) is a configuration, a grid policy and
// an L2 prefetch mode: variant = (mode * kGemvConfigs + configuration) * kGemvPolicies + policy,
// so variants 0 .. kGemvBaseVariants - 1 are the plain (no prefetch) ones.
struct GemvConfig {
    int r, u4, ks;
};
inline constexpr int kGemvConfigs = 8;
inline constexpr GemvConfig kGemvConfigTable[kGemvConfigs] = {
    {1, 4, 1}, {1, 8, 1}, {2, 4, 1}, {1, 4, 2}, {1, 8, 2}, {2, 2, 4}, {4, 1, 4}, {2, 4, 2},
};
inline constexpr int kGemvPolicies = 3;  // CTAs per SM: 0 (occupancy), 1, 2
inline constexpr int kGemvPolicyTable[kGemvPolicies] = {0, 1, 2};
inline constexpr int kGemvBaseVariants = kGemvConfigs * kGemvPolicies;
// L2 prefetch modes (gemv_prefetch): KiB per CTA of its upcoming weights hinted before the PDL
// wait and the prologue (0 = none), line (prefetch.global.L2 per 128 bytes) or bulk
// (cp.async.bulk.prefetch.L2), roll (a window of >= 2 groups kept ahead in the grid-stride loop).
struct GemvPrefetchMode {
    int kib;
    bool line, roll;
    const char* tag;  // variant name suffix
};
inline constexpr int kGemvPrefetchModes = 5;
inline constexpr GemvPrefetchMode kGemvPrefetchTable[kGemvPrefetchModes] = {
    {0, false, false, ""},      {32, false, false, "+b32"}, {128, false, false, "+b128"},
    {64, false, true, "+b64r"}, {64, true, false, "+l64"},
};
inline constexpr int kGemvVariants = kGemvBaseVariants * kGemvPrefetchModes;

// The prefetch fields of p for a launch of grid CTAs over p.n_groups groups of slots_per_group
// slots. Per CTA at most the mode's KiB and 3/4 of the L2 over the grid (so the hinted lines
// of all CTAs fit together); whole groups when they fit (window = that many groups, at least 2
// when rolling, at most the CTA's share), else the same leading fraction of every row.
inline void gemv_set_prefetch(GemvParams& p, int mode, int slots_per_group, int grid) {
    p.pf_np = 0;
    p.pf_line = p.pf_roll = false;
    const GemvPrefetchMode& f = kGemvPrefetchTable[mode];
    if (f.kib <= 0 || grid <= 0 || slots_per_group <= 0 || p.n_groups <= 0 || p.w_bytes == 0) return;
    int np = 0;
    int64_t row_bytes = 0;
    for (int k = 0; k < 4; ++k)
        if (p.stride[k] > 0) {
            np = k + 1;
            row_bytes += p.stride[k];
        }
    if (np == 0) return;
    const int64_t group_bytes = row_bytes * (p.glu ? 2 : 1) * slots_per_group;
    int64_t per_cta = int64_t{f.kib} << 10;
    const int64_t l2_share = gemv_l2_bytes() / 4 * 3 / grid;
    if (l2_share < per_cta) per_cta = l2_share;
    if (per_cta < 16) return;
    const int64_t own = (p.n_groups + grid - 1) / grid;  // groups of the busiest CTA
    int64_t win = per_cta / group_bytes;
    if (f.roll && win < 2) win = 2;
    if (win > own) win = own;
    if (win < 1) win = 1;
    for (int k = 0; k < np; ++k) {
        int64_t len = p.stride[k];
        if (per_cta < win * group_bytes) len = round_up(p.stride[k] * per_cta / (win * group_bytes), 16);
        p.pf_len[k] = len < p.stride[k] ? len : p.stride[k];
    }
    p.pf_np = np;
    p.pf_slots = slots_per_group;
    p.pf_groups = static_cast<int>(win);
    p.pf_line = f.line;
    p.pf_roll = f.roll && own > 1;
}

// Register count and static shared memory of one kernel instantiation.
template <class T, int NT, int R, int U, int KS, bool E>
struct GemvKernelInfo {
    static inline int regs = 0, static_smem = 0;
};

// Raises the kernel's dynamic shared-memory limit on the current device (once per device; a race
// only repeats the idempotent call) and records its resource use. upload_matrix calls it through
// gemv_prepare_*, so that gemv inside a graph capture makes no attribute call.
template <class T, int NT, int R, int U, int KS, bool E>
void gemv_kernel_attr(int dev) {
    static uint64_t done = 0;  // bit per device
    if (dev >= 64 || !(__atomic_load_n(&done, __ATOMIC_ACQUIRE) >> dev & 1u)) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<T, NT, R, U, KS, E>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, kGemvMaxSmem));
        cudaFuncAttributes fa{};
        PELICAN_CUDA_CHECK(cudaFuncGetAttributes(&fa, gemv_kernel<T, NT, R, U, KS, E>));
        __atomic_store_n(&GemvKernelInfo<T, NT, R, U, KS, E>::static_smem,
                         static_cast<int>(fa.sharedSizeBytes), __ATOMIC_RELAXED);
        __atomic_store_n(&GemvKernelInfo<T, NT, R, U, KS, E>::regs, fa.numRegs, __ATOMIC_RELEASE);
        if (dev < 64) __atomic_fetch_or(&done, uint64_t{1} << dev, __ATOMIC_RELEASE);
    }
}

// rows_per_warp: output rows (glu: gate rows) per warp; policy: CTAs per SM (0 = occupancy),
// overridden by gemv_set_grid_policy when that is set. Expert slots: gridDim.y = the slots, and
// gridDim.x = min(the slot's row groups, max(1, floor(resident CTAs / slots))); no L2 prefetch.
template <class T, int NT, int R, int U, int KS, bool E = false>
void gemv_launch(GemvParams p, int out_rows_per_warp, int policy, int pf_mode, size_t smem,
                 cudaStream_t stream) {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    gemv_kernel_attr<T, NT, R, U, KS, E>(dev);
    const int rows_per_group = (kGemvWarps / KS) * out_rows_per_warp;
    p.n_groups = (p.n_slots + rows_per_group - 1) / rows_per_group;
    const int forced = gemv_grid_ctas_per_sm();
    const int pol = forced > 0 ? forced : policy;
    const int64_t per_sm =
        pol > 0
            ? pol
            : gemv_occupancy(
                  __atomic_load_n(&GemvKernelInfo<T, NT, R, U, KS, E>::regs, __ATOMIC_ACQUIRE),
                  __atomic_load_n(&GemvKernelInfo<T, NT, R, U, KS, E>::static_smem, __ATOMIC_RELAXED), smem);
    const int n_y = E ? p.n_expert_slots : 1;
    // Expert slots: the slots share the resident CTAs (rounded down, so that the whole grid is
    // resident at once: a second wave of a few CTAs would double the time of their groups).
    int64_t cap = per_sm * gemv_sm_count() / n_y;
    if (cap < 1) cap = 1;
    const int grid = static_cast<int>(p.n_groups < cap ? p.n_groups : cap);
    if (E)
        p.pf_np = 0;  // the prefetch would name rows before the ids are known
    else
        gemv_set_prefetch(p, pf_mode, rows_per_group, grid);
    p.debug = gemv_debug_mode();
    launch_pdl(gemv_kernel<T, NT, R, U, KS, E>, dim3(grid, n_y), dim3(kGemvThreads), smem, stream, p);
}

// Rows per warp for a token capacity > 1: enough rows to amortise the shared-memory reads of x.
constexpr int gemv_rows_per_warp(int nt, bool glu) {
    const int r = nt <= 2 ? 1 : 2;
    return glu && r < 2 ? 2 : r;
}

template <class T, int NT>
void gemv_launch_nt(const GemvParams& p, int policy, int pf_mode, size_t smem, cudaStream_t stream) {
    constexpr int R1 = gemv_rows_per_warp(NT, false), R2 = gemv_rows_per_warp(NT, true);
    constexpr int U1 = T::kBatch / R1 > 0 ? T::kBatch / R1 : 1, U2 = T::kBatch / R2 > 0 ? T::kBatch / R2 : 1;
    if (p.glu)
        gemv_launch<T, NT, R2, U2, 1>(p, R2 / 2, policy, pf_mode, smem, stream);
    else
        gemv_launch<T, NT, R1, U1, 1>(p, R1, policy, pf_mode, smem, stream);
}

template <class T, int C>
void gemv_launch_cfg(const GemvParams& p, int policy, int pf_mode, size_t smem, cudaStream_t stream) {
    constexpr GemvConfig c = kGemvConfigTable[C];
    constexpr int U = GemvUnits<T, c.u4>::v;
    if (p.n_expert_slots > 0) {
        if (p.glu)
            gemv_launch<T, 1, 2 * c.r, U, c.ks, true>(p, c.r, policy, pf_mode, smem, stream);
        else
            gemv_launch<T, 1, c.r, U, c.ks, true>(p, c.r, policy, pf_mode, smem, stream);
    } else if (p.glu) {
        gemv_launch<T, 1, 2 * c.r, U, c.ks>(p, c.r, policy, pf_mode, smem, stream);
    } else {
        gemv_launch<T, 1, c.r, U, c.ks>(p, c.r, policy, pf_mode, smem, stream);
    }
}

template <class T, int C>
void gemv_prepare_cfg(int dev) {
    constexpr GemvConfig c = kGemvConfigTable[C];
    constexpr int U = GemvUnits<T, c.u4>::v;
    gemv_kernel_attr<T, 1, c.r, U, c.ks, false>(dev);
    gemv_kernel_attr<T, 1, 2 * c.r, U, c.ks, false>(dev);
    gemv_kernel_attr<T, 1, c.r, U, c.ks, true>(dev);
    gemv_kernel_attr<T, 1, 2 * c.r, U, c.ks, true>(dev);
}

template <class T, int NT>
void gemv_prepare_nt(int dev) {
    constexpr int R1 = gemv_rows_per_warp(NT, false), R2 = gemv_rows_per_warp(NT, true);
    constexpr int U1 = T::kBatch / R1 > 0 ? T::kBatch / R1 : 1, U2 = T::kBatch / R2 > 0 ? T::kBatch / R2 : 1;
    gemv_kernel_attr<T, NT, R1, U1, 1, false>(dev);
    gemv_kernel_attr<T, NT, R2, U2, 1, false>(dev);
}

// Sets the attributes of every kernel of the type on the current device.
template <class T>
void gemv_prepare_type() {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    gemv_prepare_cfg<T, 0>(dev);
    gemv_prepare_cfg<T, 1>(dev);
    gemv_prepare_cfg<T, 2>(dev);
    gemv_prepare_cfg<T, 3>(dev);
    gemv_prepare_cfg<T, 4>(dev);
    gemv_prepare_cfg<T, 5>(dev);
    gemv_prepare_cfg<T, 6>(dev);
    gemv_prepare_cfg<T, 7>(dev);
    gemv_prepare_nt<T, 2>(dev);
    gemv_prepare_nt<T, 3>(dev);
    gemv_prepare_nt<T, 4>(dev);
    gemv_prepare_nt<T, 8>(dev);
}

// nt: the kernel's token capacity, one of 1, 2, 3, 4, 8. variant: 0 .. kGemvVariants - 1 (its
// configuration applies to nt = 1; its grid policy and prefetch mode to all).
template <class T>
void gemv_launch_type(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    const int policy = kGemvPolicyTable[variant % kGemvPolicies];
    const int pf = variant / kGemvBaseVariants;
    switch (nt) {
        case 1:
            switch (variant / kGemvPolicies % kGemvConfigs) {
                case 0:
                    gemv_launch_cfg<T, 0>(p, policy, pf, smem, stream);
                    break;
                case 1:
                    gemv_launch_cfg<T, 1>(p, policy, pf, smem, stream);
                    break;
                case 2:
                    gemv_launch_cfg<T, 2>(p, policy, pf, smem, stream);
                    break;
                case 3:
                    gemv_launch_cfg<T, 3>(p, policy, pf, smem, stream);
                    break;
                case 4:
                    gemv_launch_cfg<T, 4>(p, policy, pf, smem, stream);
                    break;
                case 5:
                    gemv_launch_cfg<T, 5>(p, policy, pf, smem, stream);
                    break;
                case 6:
                    gemv_launch_cfg<T, 6>(p, policy, pf, smem, stream);
                    break;
                default:
                    gemv_launch_cfg<T, 7>(p, policy, pf, smem, stream);
                    break;
            }
            break;
        case 2:
            gemv_launch_nt<T, 2>(p, policy, pf, smem, stream);
            break;
        case 3:
            gemv_launch_nt<T, 3>(p, policy, pf, smem, stream);
            break;
        case 4:
            gemv_launch_nt<T, 4>(p, policy, pf, smem, stream);
            break;
        default:
            gemv_launch_nt<T, 8>(p, policy, pf, smem, stream);
            break;
    }
}

#endif  // __CUDACC__

// One per family translation unit. gemv_prepare: kernel attributes for the type on the current
// device (called by upload_matrix).
void gemv_launch_float(DType t, const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q4_0(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q8_0(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q4_k(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q6_k(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_f32(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_f16(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_bf16(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_prepare_float(DType t);
void gemv_prepare_f32();
void gemv_prepare_f16();
void gemv_prepare_bf16();
void gemv_prepare_q4_0();
void gemv_prepare_q8_0();
void gemv_prepare_q4_k();
void gemv_prepare_q6_k();
void gemv_prepare(DType t);  // dispatches to the above (gemv.cu)

}  // namespace pelican::cuda::detail
