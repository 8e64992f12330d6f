// Private to the MoE kernels (moe.cu, moe_router.cu): the router's top-k as one warp's device
// function (ref::moe_route for one token). CUDA only.
#pragma once

#include <climits>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/moe.h"

namespace pelican::cuda::detail {

static_assert(kMoeMaxUsed <= 32, "lane j holds the j-th choice");
static_assert(kMoeMaxExperts <= 16 * 32, "at most 16 experts per lane");

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The selection half of route_warp: p[i] = the probability of expert lane + 32 i (any value past
// n_expert), by one whole warp; writes ids / weights as route_warp.
template <int kPerLane>
__device__ __forceinline__ void route_select(const float (&p)[kPerLane], const float* l, int n_expert, int k,
                                             bool renormalize, bool shared_slot, int32_t* ids, float* weights,
                                             int lane) {
    // k rounds of a warp arg-max over the experts not yet taken.
    uint32_t taken = 0;  // bit i: expert lane + 32 i is chosen
    double chosen_sum = 0.0;
    int32_t my_id = 0;
    float my_p = 0.0f;
    for (int j = 0; j < k; ++j) {
        float bp = -INFINITY;
        int be = INT_MAX;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int e = lane + 32 * i;
            if (e < n_expert && !(taken >> i & 1u) && p[i] > bp) {  // strict: the lower id keeps a tie
                bp = p[i];
                be = e;
            }
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        // Warp arg-max in two reductions: p >= 0 (never -0), so its bits order as the values;
        // key = bits + 1 (0: no candidate on this lane), then the lowest id among the lanes holding
        // the largest key. The same choice as the butterfly below (largest p, ties: lower id).
        {
            const unsigned key = be == INT_MAX ? 0u : __float_as_uint(bp) + 1u;
            const unsigned mk = __reduce_max_sync(0xffffffffu, key);
            const unsigned me = __reduce_min_sync(
                0xffffffffu, key == mk && mk != 0u ? static_cast<unsigned>(be) : 0x7fffffffu);
            bp = mk == 0u ? -INFINITY : __uint_as_float(mk - 1u);
            be = static_cast<int>(me);
        }
#else
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float op = __shfl_xor_sync(0xffffffffu, bp, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (op > bp || (op == bp && oe < be)) {
                bp = op;
                be = oe;
            }
        }
#endif
        if (be == INT_MAX) {  // only NaN p left (NaN logits): a valid id, weight 0
            be = j;
            bp = 0.0f;
        } else if ((be & 31) == lane) {
            taken |= 1u << (be >> 5);
        }
        chosen_sum += static_cast<double>(bp);
        if (lane == j) {
            my_id = be;
            my_p = bp;
        }
    }
    if (lane < k) {
        const double w = my_p;
        ids[lane] = my_id;
        weights[lane] = static_cast<float>(renormalize && chosen_sum > 0 ? w / chosen_sum : w);
    } else if (shared_slot && lane == k) {  // the shared expert, stacked as expert n_expert
        const float g = __ldcg(l + n_expert);
        ids[k] = n_expert;
        weights[k] = 1.0f / (1.0f + expf(-g));
    }
}

// ref::moe_route for one token, by one whole warp (lane = its lane): softmax over the n_expert
// logits l[0 .. n_expert) (read with ld.global.cg: l may have been written by other CTAs of the
// calling kernel), top k, renormalisation; writes ids[0 .. ko), weights[0 .. ko) (ko = k, or k + 1
// with the shared slot: entry k = (n_expert, sigmoid(l[n_expert]))). The exp terms and the sum in
// double as ref::softmax (the sum's order differs: a per-lane sum, then a butterfly; ~1e-16
// relative), p rounded to fp32; the selection compares those fp32 p (ties: lower id), the
// renormalising sum adds the chosen p in double in choice order, exactly as the reference.
// kPerLane: experts per lane (e = lane + 32 i), 32 kPerLane >= n_expert (the loops unroll over it).
template <int kPerLane>
__device__ __forceinline__ void route_warp(const float* l, int n_expert, int k, bool renormalize,
                                           bool shared_slot, int32_t* ids, float* weights, int lane) {
    float v[kPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < n_expert ? __ldcg(l + e) : -INFINITY;
        mx = v[i] > mx ? v[i] : mx;  // as the reference: NaN never becomes the max
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = m > mx ? m : mx;
    }
    float p[kPerLane];
    if (mx == -INFINITY) {  // all masked: p = 0 (ref::softmax)
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) p[i] = 0.0f;
    } else {
        double ex[kPerLane];
        double sum = 0.0;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int e = lane + 32 * i;
            ex[i] = e < n_expert ? exp(static_cast<double>(v[i]) - static_cast<double>(mx)) : 0.0;
            sum += ex[i];
        }
        sum = warp_sum_d(sum);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) p[i] = static_cast<float>(ex[i] / sum);
    }

    route_select<kPerLane>(p, l, n_expert, k, renormalize, shared_slot, ids, weights, lane);
}

// route_warp's result with the softmax spread over a CTA of kThreads >= n_expert threads (one expert
// per thread: the max, the double exp terms and their sum by warp and then by CTA, p rounded to fp32
// into s_p), then route_select by warp 0. The same max (NaN never wins), exp terms and p rounding; the
// double sum is ordered differently (~1e-16 relative, as route_warp's is). Called by the whole CTA
// (barriers inside). s_p: shared [kMoeMaxExperts]; s_red: shared [kThreads / 32] doubles.
// route_block = route_softmax_block (ends with a barrier: s_p complete) + route_select_block.
template <int kThreads>
__device__ __forceinline__ void route_softmax_block(const float* l, int n_expert, float* s_p, double* s_red) {
    constexpr int kWarps = kThreads / 32;
    static_assert(kThreads >= kMoeMaxExperts, "one expert per thread");
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    float* s_max = reinterpret_cast<float*>(s_red);  // [kWarps] floats, before the sums use s_red
    const float v = tid < n_expert ? __ldcg(l + tid) : -INFINITY;
    float mx = v;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = m > mx ? m : mx;
    }
    if (lane == 0) s_max[warp] = mx;
    __syncthreads();
    mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = s_max[w] > mx ? s_max[w] : mx;
    __syncthreads();  // s_max is read by all before s_red is written
    float pv = 0.0f;
    if (mx != -INFINITY) {  // uniform over the CTA
        const double ex = tid < n_expert ? exp(static_cast<double>(v) - static_cast<double>(mx)) : 0.0;
        const double ws = warp_sum_d(ex);
        if (lane == 0) s_red[warp] = ws;
        __syncthreads();
        double sum = 0.0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += s_red[w];
        pv = static_cast<float>(ex / sum);
    }
    if (tid < n_expert) s_p[tid] = pv;
    __syncthreads();
}

// Warp 0 selects from s_p (route_softmax_block's) and writes ids / weights as route_warp; other warps
// return at once (no barrier inside).
__device__ __forceinline__ void route_select_block(const float* l, int n_expert, int k, bool renormalize,
                                                   bool shared_slot, int32_t* ids, float* weights,
                                                   const float* s_p) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    if (threadIdx.x >= 32) return;
    constexpr int kPerLane = kMoeMaxExperts / 32;
    float p[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        p[i] = e < n_expert ? s_p[e] : 0.0f;
    }
    route_select<kPerLane>(p, l, n_expert, k, renormalize, shared_slot, ids, weights, lane);
}

// Ordered key of a logit for the top-k by logits: larger logit = larger unsigned key; -inf > 0; NaN
// (never chosen while a number is left, as in the reference) = 0 = "none".
__device__ __forceinline__ uint32_t route_logit_key(float v) {
    if (v != v) return 0u;
    const uint32_t u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float route_key_logit(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// route_block's result for renormalize = true, faster (every CTA of the fused MoE kernel routes on
// its own, so this sits on the decode step's critical path). The softmax is monotone, so the top k by
// p are the top k by logit; the one difference is where rounding p to fp32 makes two different logits
// equal (a near tie, |dp| / p < 1e-7): the reference then takes the lower id, this the larger logit.
// Weights: exp(l_j - l_max) / sum over the chosen of the same, in double (the reference divides the
// fp32-rounded p: a few units of fp32 rounding apart). Two levels:
//   1. warp w takes experts [32 w, 32 w + 32), one per lane, and picks its own top k in order by k
//      rounds of a warp arg-max (__reduce_max_sync on the keys, then __reduce_min_sync on the ids of
//      the lanes holding the largest key: ties -> the lower id) into s_key / s_id [w * 16 + j];
//   2. warp 0 merges the sorted lists (lane w holds list w's head): k more rounds of the same arg-max.
// Called by the whole CTA (one barrier inside). kThreads / 32 >= ceil(n_expert / 32); k <= 15 (the
// list stride is 16). Warp 0 lanes < k (and k with the shared slot) write ids / weights as route_block.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// One round of a warp arg-max over (key, id) pairs: the largest key of the warp (0 = none left) and the
// lowest id among the lanes holding it (0x7fffffff when none).
struct KeyChoice {
    uint32_t key, id;
};
__device__ __forceinline__ KeyChoice warp_argmax_key(uint32_t key, uint32_t id) {
    const uint32_t mk = __reduce_max_sync(0xffffffffu, key);
    return {mk, __reduce_min_sync(0xffffffffu, key == mk && mk != 0u ? id : 0x7fffffffu)};
}

template <int kThreads>
__device__ __forceinline__ void route_topk_renorm_block(const float* l, int n_expert, int k, bool shared_slot,
                                                        int32_t* ids, float* weights, uint32_t* s_key,
                                                        int32_t* s_id) {
    static_assert(kThreads / 32 >= kMoeMaxExperts / 32, "one warp per 32 experts");
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int n_lists = (n_expert + 31) / 32;
    if (warp < n_lists) {
        const int e = warp * 32 + lane;
        uint32_t key = e < n_expert ? route_logit_key(__ldcg(l + e)) : 0u;
        uint32_t my_key = 0u;
        int32_t my_id = 0;
        for (int j = 0; j < k; ++j) {
            const KeyChoice c = warp_argmax_key(key, static_cast<uint32_t>(e));
            if (lane == j) {
                my_key = c.key;  // 0: this list ran out of numbers
                my_id = static_cast<int32_t>(c.id);
            }
            if (static_cast<uint32_t>(e) == c.id) key = 0u;
        }
        if (lane < k) {
            s_key[warp * 16 + lane] = my_key;
            s_id[warp * 16 + lane] = my_id;
        }
    }
    __syncthreads();
    if (warp != 0) return;
    int ptr = 0;  // lane w < n_lists: the head of list w
    uint32_t head = lane < n_lists ? s_key[lane * 16] : 0u;
    int32_t head_id = lane < n_lists ? s_id[lane * 16] : 0;
    uint32_t my_key = 0u;
    int32_t my_id = 0;
    for (int j = 0; j < k; ++j) {
        const KeyChoice c = warp_argmax_key(head, static_cast<uint32_t>(head_id));
        if (lane == j) {
            my_key = c.key;
            my_id = c.key == 0u ? j : static_cast<int32_t>(c.id);  // only NaN left: a valid id, weight 0
        }
        if (c.key != 0u && head == c.key &&
            static_cast<uint32_t>(head_id) == c.id) {  // the winning list advances
            ++ptr;
            head = ptr < k ? s_key[lane * 16 + ptr] : 0u;
            head_id = ptr < k ? s_id[lane * 16 + ptr] : 0;
        }
    }
    // Weights: the largest logit is choice 0 (lane 0).
    const uint32_t key0 = __shfl_sync(0xffffffffu, my_key, 0);
    double ex = 0.0;
    if (lane < k && my_key != 0u && key0 > route_logit_key(-INFINITY))  // all -inf: weights 0
        ex = exp(static_cast<double>(route_key_logit(my_key)) - static_cast<double>(route_key_logit(key0)));
    const double sum = warp_sum_d(ex);
    if (lane < k) {
        ids[lane] = my_id;
        weights[lane] = static_cast<float>(sum > 0.0 ? ex / sum : 0.0);
    } else if (shared_slot && lane == k) {  // the shared expert, stacked as expert n_expert
        const float g = __ldcg(l + n_expert);
        ids[k] = n_expert;
        weights[k] = 1.0f / (1.0f + expf(-g));
    }
}
#endif  // sm_80+ (__reduce_*_sync)

template <int kThreads>
__device__ __forceinline__ void route_block(const float* l, int n_expert, int k, bool renormalize,
                                            bool shared_slot, int32_t* ids, float* weights, float* s_p,
                                            double* s_red) {
    route_softmax_block<kThreads>(l, n_expert, s_p, s_red);
    route_select_block(l, n_expert, k, renormalize, shared_slot, ids, weights, s_p);
}

}  // namespace pelican::cuda::detail
