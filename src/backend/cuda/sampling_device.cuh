// Device helpers of the sampling kernels (sampling_batch.cu): order keys and packed candidates,
// warp and block scans, the bitonic sort, the histogram threshold, online log-sum-exp.
//
// Order keys: a finite float maps to a uint32 whose unsigned order is the float order (-0 is
// folded to +0 first so that equal logits tie). A candidate is packed as
// (key << 32) | (0xffffffff - id): unsigned order of packed keys is sampler.cpp's order (logit
// descending, then id ascending), every packed key is unique and 0 means "none".
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace pelican::cuda::sampling {

constexpr int kHistBits = 12;  // the histogram of a row: the top 12 bits of each order key
constexpr int kHistBins = 1 << kHistBits;
constexpr int kThreads = 256;  // CTA size of the prep, scan and filter kernels
static_assert(kHistBins % kThreads == 0 && kHistBins / kThreads == 16, "threshold_bin: 16 bins per thread");

__device__ __forceinline__ uint32_t order_key(float f) {  // f finite
    if (f == 0.0f) f = 0.0f;                              // -0 -> +0: equal logits tie
    const uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ uint64_t pack(uint32_t key, int64_t id) {
    return (static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int32_t packed_id(uint64_t c) {
    return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(c));
}
__device__ __forceinline__ float packed_logit(uint64_t c) {
    return key_float(static_cast<uint32_t>(c >> 32));
}

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    return v;
}

// Online log-sum-exp: (m, s) with s = sum of exp(l - m) over the logits seen, m their maximum
// (s == 0: none seen). Merging is commutative, so every lane of a butterfly ends with one value.
__device__ __forceinline__ void lse_add(float& m, float& s, float l) {
    if (l > m) {
        s = s * expf(m - l) + 1.0f;  // m = -inf at first: exp(-inf) = 0
        m = l;
    } else {
        s += expf(l - m);
    }
}
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    if (s2 == 0.0f) return;
    if (s == 0.0f) {
        m = m2;
        s = s2;
        return;
    }
    const float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}
__device__ __forceinline__ void warp_lse(float& m, float& s) {
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
}

// Block-wide inclusive scan over kThreads threads (uint32).
__device__ inline uint32_t block_scan_u32(uint32_t v, uint32_t* s_warp) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) s_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = lane < static_cast<int>(blockDim.x / 32) ? s_warp[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t t = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += t;
        }
        s_warp[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += s_warp[warp - 1];
    __syncthreads();
    return v;
}

// The smallest bin b such that at least min(k, total) finite logits have bin >= b. Every thread
// of the (kThreads-thread) block returns it; *total_out = number of finite logits.
__device__ inline uint32_t threshold_bin(const uint32_t* hist, int k, uint32_t* total_out) {
    __shared__ uint32_t s_warp[32];
    __shared__ uint32_t s_bin, s_total;
    constexpr int kPer = kHistBins / kThreads;  // 16 bins per thread
    // Thread t owns bins from the top: r = kThreads - 1 - t covers [kPer r, kPer r + kPer).
    const int r = kThreads - 1 - static_cast<int>(threadIdx.x);
    uint32_t h[kPer], sum = 0;
    for (int j = 0; j < kPer; ++j) sum += h[j] = hist[kPer * r + j];
    const uint32_t incl = block_scan_u32(sum, s_warp);  // count in bins above and including mine
    if (threadIdx.x == kThreads - 1) {
        s_total = incl;
        s_bin = 0;
    }
    __syncthreads();
    const uint32_t total = s_total;
    const uint32_t need = total < static_cast<uint32_t>(k) ? total : static_cast<uint32_t>(k);
    const uint32_t above = incl - sum;
    if (need > 0 && above < need && incl >= need) {
        uint32_t acc = above;
        for (int j = kPer - 1; j >= 0; --j) {
            acc += h[j];
            if (acc >= need) {
                s_bin = static_cast<uint32_t>(kPer * r + j);
                break;
            }
        }
    }
    __syncthreads();
    *total_out = total;
    return s_bin;
}

// Inclusive scan over the 1024 threads (double).
__device__ inline double block_scan_f64(double v, double* s_warp) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 1; o < 32; o <<= 1) {
        const double t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) s_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = s_warp[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const double t = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += t;
        }
        s_warp[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += s_warp[warp - 1];
    __syncthreads();
    return v;
}

// Sorts s[0, p) descending (p a power of two <= blockDim.x); all threads call it.
__device__ inline void bitonic_desc(uint64_t* s, int p) {
    const int i = threadIdx.x;
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            const int partner = i ^ stride;
            if (i < p && partner > i) {
                const uint64_t x = s[i], y = s[partner];
                const bool desc = (i & size) == 0;
                if (desc ? x < y : x > y) {
                    s[i] = y;
                    s[partner] = x;
                }
            }
            __syncthreads();
        }
    }
}

}  // namespace pelican::cuda::sampling
