// Private to the GEMV translation units (through gemv_impl.cuh): device helpers (streaming loads,
// reductions) and the per-weight-type traits of the GEMV kernel: how a lane loads,
// unpacks and dots one unit of each layout (the layouts are described in gemv_params.cuh). CUDA only.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/gemv_params.cuh"

namespace pelican::cuda::detail {

// ---- device helpers ----------------------------------------------------------------------------

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

__device__ __forceinline__ float half_bits_to_float(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffffu)));
}

// The glu epilogue: silu(g) * u, rounded as every GEMV-family kernel rounds it.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over aligned segments of L lanes (L a power of two <= 32; L = 32 is warp_sum).
template <int L>
__device__ __forceinline__ float seg_sum(float v) {
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
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

}  // namespace pelican::cuda::detail
