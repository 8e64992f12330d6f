// Private to moe_fused*.cu: the one-kernel decode MoE block (moe_fused.h) as a template over the
// gate/up and down weight traits (gemv_traits.cuh). CUDA only.
#pragma once

#include <cstdint>

#include "backend/cuda/gemv_impl.cuh"
#include "backend/cuda/l2_hint.cuh"
#include "backend/cuda/moe_fused.h"
#include "backend/cuda/moe_route.cuh"

namespace pelican::cuda::detail {

inline constexpr int kFusedThreads = kGemvThreads;  // 512: one CTA per SM
inline constexpr int kFusedWarps = kGemvWarps;
inline constexpr int kFusedMaxSlots = kMoeMaxUsed + 1;
inline constexpr int kFusedRouterRows = 2;  // router rows per CTA per round
inline constexpr int kFusedRouterF4 = 4;    // float4 per lane per row: n_embd <= 16 warps x 32 x 4 x 4
inline constexpr int kFusedMaxPrefetch = 8;

struct MoeFusedParams {
    float* x = nullptr;  // = gu.x (written at the end); gu also holds the norm weights and epsilon
    int n_embd = 0;
    const float* rw = nullptr;  // router rows [n_rows, r_stride floats]
    int64_t r_stride = 0;
    int n_rows = 0;                        // n_expert + 1
    int n_expert = 0, k = 0, n_slots = 0;  // n_slots = k + 1 (the shared expert last)
    bool renorm = true;
    bool route_by_logits = true;  // route_topk_renorm_block where renorm (PELICAN_FUSED_ROUTE=0: route_block)
    GemvParams gu, dn;            // the layouts (gemv_make_params); gu.norm_one_plus is the norm's rule
    int n_ff = 0;
    float* logits = nullptr;
    int32_t* ids = nullptr;
    float* wts = nullptr;
    float* act = nullptr;
    unsigned long long* bar = nullptr;
    uint64_t* trace = nullptr;
    int smem_gu = 0, smem_dn = 0;  // byte offsets of the activation areas (x' as fp32 at 0)
    // L2 prefetch before the PDL wait of the shared expert's rows (known without the router): the device
    // ranges [pf_ptr, pf_ptr + pf_len) of its gate/up and down planes, split over the CTAs.
    int pf_n = 0;
    const uint8_t* pf_ptr[kFusedMaxPrefetch] = {};
    uint64_t pf_len[kFusedMaxPrefetch] = {};
};

// Grid-wide barrier over all CTAs of the launch (every one resident). *bar counts arrivals and only
// grows (64-bit: it never wraps): an arrival that reads old waits until the count reaches the next
// multiple of the grid size, so every launch on the same words must use the same grid (the count starts
// at 0, a multiple of every grid). Memory written before it by any CTA is visible after it to loads
// that bypass L1 (__ldcg).
__device__ __forceinline__ void fused_grid_sync(unsigned long long* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned long long g = gridDim.x;
        __threadfence();
        const unsigned long long old = atomicAdd(bar, 1ull);
        const unsigned long long target = old - old % g + g;
        for (;;) {
            unsigned long long now;
            asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(bar) : "memory");
            if (static_cast<long long>(now - target) >= 0) break;
            __nanosleep(20);
        }
        __threadfence();
    }
    __syncthreads();
}

// x[4f .. 4f+3] into a GEMV activation area: int8 blocks (quantize4; all 32 lanes must call it)
// or fp32 in the float layout.
template <class T>
__device__ __forceinline__ void fused_stage4(const GemvParams& p, uint8_t* area, float4 v, int f,
                                             bool active) {
    if constexpr (T::kQuant) {
        quantize4<T::kNP>(p, area, v, f, active);
    } else if (active) {
        *reinterpret_cast<float4*>(area + float_x4_offset<T::kNP>(p, f)) = v;
    }
}

// Phase C's walk over (output, chunk) items: output o takes cpo chunks of 32 of its S * nu (slot, unit)
// pairs in order; a lane's (slot, unit) moves by 32 units per chunk (step_s slots + step_u units) and
// starts again at (slot0, unit0) for the next output (o += W).
struct DownCursor {
    int o, c, slot, unit;
    // Advances one chunk; true when the output was complete (o has moved on).
    __device__ __forceinline__ bool next(int cpo, int W, int nu, int slot0, int unit0, int step_s,
                                         int step_u) {
        if (++c == cpo) {
            c = 0;
            o += W;
            slot = slot0;
            unit = unit0;
            return true;
        }
        slot += step_s;
        unit += step_u;
        if (unit >= nu) {
            unit -= nu;
            ++slot;
        }
        return false;
    }
};

__device__ __forceinline__ void fused_stamp(const MoeFusedParams& a, int point) {
    if (a.trace != nullptr && threadIdx.x == 0) {
        uint64_t t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        a.trace[blockIdx.x * kMoeFusedTracePoints + point] = t;
    }
}

template <class TG, class TD>
__global__ void __launch_bounds__(kFusedThreads, 1) moe_fused_kernel(const MoeFusedParams a) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[kFusedWarps][kFusedRouterRows];
    __shared__ int32_t s_ids[kFusedMaxSlots];
    __shared__ float s_w[kFusedMaxSlots];
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int G = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int n = a.n_embd, nf = n / 4;
    float4* xs = reinterpret_cast<float4*>(smem);  // x' (fp32) for the router
    uint8_t* x_gu = smem + a.smem_gu;
    uint8_t* x_dn = smem + a.smem_dn;

    fused_stamp(a, 0);
    // ---- before the PDL wait: weights only ------------------------------------------------------
    // Router rows of this CTA: b, b + G, ...; warp w holds float4 (kk * 16 + w) * 32 + lane.
    float4 rw[kFusedRouterRows][kFusedRouterF4];
    const int my_rows = a.n_rows > b ? (a.n_rows - 1 - b) / G + 1 : 0;
    const int r_rounds = (my_rows + kFusedRouterRows - 1) / kFusedRouterRows;
    auto router_load = [&](int round) {
#pragma unroll
        for (int j = 0; j < kFusedRouterRows; ++j) {
            const int r = b + G * (round * kFusedRouterRows + j);
            const float4* row = reinterpret_cast<const float4*>(a.rw + static_cast<int64_t>(r) * a.r_stride);
#pragma unroll
            for (int kk = 0; kk < kFusedRouterF4; ++kk) {
                const int f = (kk * kFusedWarps + warp) * 32 + lane;
                rw[j][kk] = r < a.n_rows && f < nf ? __ldg(row + f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
    };
    if (r_rounds > 0) router_load(0);
    // Work items (router rows aside) go to warps by wid = warp * G + b: consecutive items to different
    // CTAs, so that every CTA (one per SM, sharing its SM's bandwidth) gets within one of the same number
    // of items of each phase (with b * 16 + warp the first CTAs took two row pairs or outputs per warp
    // and the last ones one, and the shared expert's pairs fell on the first n_ff / 16 CTAs alone).
    // The shared expert (expert n_expert, slot k) needs no route: warp wid < n_ff takes its gate/up pair
    // wid, loaded here and computed before barrier 1 (when its rows fit kShCh chunks per lane).
    const int W = G * kFusedWarps, wid = warp * G + b;
    const int ff = a.n_ff;
    constexpr int kShCh = sizeof(typename TG::W) > 24 ? 1 : TG::kBatch;  // register budget
    const int nch_g = (a.gu.n_units + 31) / 32;
    const bool sh_early = nch_g <= kShCh && ff <= W;  // uniform over the grid
    const bool sh_mine = sh_early && wid < ff;        // uniform over the warp
    typename TG::W shg[kShCh], shu[kShCh];
    if (sh_mine) {
        const int64_t row = static_cast<int64_t>(a.n_expert) * a.gu.expert_rows + wid;
#pragma unroll
        for (int c = 0; c < kShCh; ++c) {
            const int unit = c * 32 + lane;
            if (c < nch_g && unit < a.gu.n_units) {
                TG::load(shg[c], a.gu, row, unit);
                TG::load(shu[c], a.gu, row + ff, unit);
            }
        }
    }
    for (int r = 0; r < a.pf_n; ++r) l2_hint_share(a.pf_ptr[r], a.pf_len[r], b, G, kFusedThreads);
    pdl_wait();  // x comes from the previous kernel
    fused_stamp(a, 1);

    // ---- x' = rms_norm(x) (1 + w) (the GEMV's short prologue on a.gu, which holds x and the norm):
    // fp32 for the router, staged for the gate/up rows ------------------------------------------------
    {
        float4 v[4];
        gemv_norm_short(a.gu, a.gu.x, v);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const int f = kk * kFusedThreads + tid;
            if (f < nf) xs[f] = v[kk];
            fused_stage4<TG>(a.gu, x_gu, v[kk], f, f < nf);
        }
    }
    __syncthreads();
    fused_stamp(a, 2);
    if (sh_mine) {  // the shared expert's act[k * n_ff + wid], as phase B computes a pair
        float accg = 0.0f, accu = 0.0f;
#pragma unroll
        for (int c = 0; c < kShCh; ++c) {
            const int unit = c * 32 + lane;
            if (c < nch_g && unit < a.gu.n_units) {
                const typename TG::X xv = TG::load_x(x_gu, a.gu, unit);
                accg = TG::dot(TG::unpack(shg[c], unit), xv, accg);
                accu = TG::dot(TG::unpack(shu[c], unit), xv, accu);
            }
        }
        const float gs = warp_sum(accg), us = warp_sum(accu);
        if (lane == 0) a.act[a.k * ff + wid] = silu_mul(gs, us);
    }

    // ---- phase A: router logits -------------------------------------------------------------------
    for (int round = 0; round < r_rounds; ++round) {
        if (round > 0) router_load(round);
#pragma unroll
        for (int j = 0; j < kFusedRouterRows; ++j) {
            float acc = 0.0f;
#pragma unroll
            for (int kk = 0; kk < kFusedRouterF4; ++kk) {
                const int f = (kk * kFusedWarps + warp) * 32 + lane;
                if (f < nf) {
                    const float4 xv = xs[f];
                    acc =
                        fmaf(rw[j][kk].x, xv.x,
                             fmaf(rw[j][kk].y, xv.y, fmaf(rw[j][kk].z, xv.z, fmaf(rw[j][kk].w, xv.w, acc))));
                }
            }
            acc = warp_sum(acc);
            if (lane == 0) red[warp][j] = acc;
        }
        __syncthreads();
        if (tid < kFusedRouterRows) {
            const int r = b + G * (round * kFusedRouterRows + tid);
            if (r < a.n_rows) {
                float s = 0.0f;
#pragma unroll
                for (int q = 0; q < kFusedWarps; ++q) s += red[q][tid];
                __stcg(a.logits + r, s);
            }
        }
        __syncthreads();
    }
    fused_stamp(a, 3);
    fused_grid_sync(a.bar);
    fused_stamp(a, 4);
    pdl_trigger();  // every CTA is resident (all arrived): the next kernel may be scheduled

    // ---- phase B: route (every CTA), gate/up rows of the chosen experts -----------------------------
    {
        // The top-k by logits (route_topk_renorm_block) where the weights are renormalised, else the
        // softmax over the CTA then the selection by one warp (route_block); a.route_by_logits = false
        // (PELICAN_FUSED_ROUTE=0) forces the latter.
        __shared__ __align__(16) float s_p[kMoeMaxExperts];  // also the fast route's lists (16 per warp)
        __shared__ double s_red[kFusedWarps];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        if (a.renorm && a.route_by_logits) {  // uniform over the grid
            static_assert(kMoeMaxExperts >= 2 * kFusedWarps * 16, "the lists fit s_p");
            uint32_t* s_key = reinterpret_cast<uint32_t*>(s_p);
            int32_t* s_id = reinterpret_cast<int32_t*>(s_p + kFusedWarps * 16);
            route_topk_renorm_block<kFusedThreads>(a.logits, a.n_expert, a.k, /*shared_slot=*/true, s_ids,
                                                   s_w, s_key, s_id);
            fused_stamp(a, 10);
        } else
#endif
        {
            route_softmax_block<kFusedThreads>(a.logits, a.n_expert, s_p, s_red);
            fused_stamp(a, 10);
            route_select_block(a.logits, a.n_expert, a.k, a.renorm, /*shared_slot=*/true, s_ids, s_w, s_p);
        }
    }
    __syncthreads();
    fused_stamp(a, 5);
    if (b == 0 && tid < a.n_slots) {
        a.ids[tid] = s_ids[tid];
        a.wts[tid] = s_w[tid];
    }
    const int S = a.n_slots;
    {
        // Row pairs q = wid + W i (q = slot * n_ff + j: slot-major, the shared slot last), each as
        // nch chunks of 32 lane units in order (the GEMV's sum order). Items (pair, chunk) are walked by
        // two cursors without divisions per item: the loads run one set of kI items ahead of the math.
        const GemvParams& p = a.gu;
        const int nu = p.n_units, nch = (nu + 31) / 32;
        const int pairs = (sh_early ? S - 1 : S) * ff;
        const auto gate_row = [&](int q) {  // one division per pair
            const int slot = q / ff;
            return static_cast<int64_t>(s_ids[slot]) * p.expert_rows + (q - slot * ff);
        };
        // Pairs x chunks per set (two sets in flight): ~40 registers of raw weights per set.
        constexpr int kIw = static_cast<int>(80 / sizeof(typename TG::W));
        constexpr int kI = kIw < 1 ? 1 : kIw > 4 ? 4 : kIw;
        typename TG::W ga[kI], ua[kI], gb[kI], ub[kI];
        int lq = wid, lc = 0;  // load cursor: pair, chunk
        int64_t lrow = wid < pairs ? gate_row(wid) : 0;
        auto load = [&](typename TG::W(&g)[kI], typename TG::W(&u)[kI]) {
#pragma unroll
            for (int i = 0; i < kI; ++i) {
                if (lq >= pairs) break;  // uniform over the warp
                const int unit = lc * 32 + lane;
                if (unit < nu) {
                    TG::load(g[i], p, lrow, unit);
                    TG::load(u[i], p, lrow + ff, unit);
                }
                if (++lc == nch) {
                    lc = 0;
                    lq += W;
                    if (lq < pairs) lrow = gate_row(lq);
                }
            }
        };
        int cq = wid, cc = 0;  // math cursor
        float accg = 0.0f, accu = 0.0f;
        auto compute = [&](const typename TG::W(&g)[kI], const typename TG::W(&u)[kI]) {
#pragma unroll
            for (int i = 0; i < kI; ++i) {
                if (cq >= pairs) break;  // uniform over the warp
                const int unit = cc * 32 + lane;
                if (unit < nu) {
                    const typename TG::X xv = TG::load_x(x_gu, p, unit);
                    accg = TG::dot(TG::unpack(g[i], unit), xv, accg);
                    accu = TG::dot(TG::unpack(u[i], unit), xv, accu);
                }
                if (++cc == nch) {  // the pair is complete
                    const float gs = warp_sum(accg), us = warp_sum(accu);
                    if (lane == 0) a.act[cq] = silu_mul(gs, us);
                    accg = accu = 0.0f;
                    cc = 0;
                    cq += W;
                }
            }
        };
        load(ga, ua);
        while (cq < pairs) {  // uniform over the warp; a load or compute past the end does nothing
            load(gb, ub);
            compute(ga, ua);
            load(ga, ua);
            compute(gb, ub);
        }
    }

    // ---- phase C: down rows, each output summed over the slots by one warp ---------------------------
    // Outputs o = wid + W i, walked by DownCursor.
    const GemvParams& p = a.dn;
    const int nu = p.n_units, per_out = S * nu, cpo = (per_out + 31) / 32;
    const int slot0 = lane / nu, unit0 = lane - slot0 * nu, step_s = 32 / nu, step_u = 32 - step_s * nu;
    // Units per lane per set: ~40 registers of raw weights (the first set stays live across barrier 2).
    constexpr int kDw = static_cast<int>(160 / sizeof(typename TD::W));
    constexpr int kD = kDw < 1 ? 1 : kDw > 8 ? 8 : kDw;
    typename TD::W da[kD], db[kD];
    DownCursor ld{wid, 0, slot0, unit0};  // load cursor
    auto load = [&](typename TD::W(&w)[kD]) {
#pragma unroll
        for (int i = 0; i < kD; ++i) {
            if (ld.o >= n) break;  // uniform over the warp
            if (ld.slot < S)
                TD::load(w[i], p, static_cast<int64_t>(s_ids[ld.slot]) * p.expert_rows + ld.o, ld.unit);
            ld.next(cpo, W, nu, slot0, unit0, step_s, step_u);
        }
    };
    load(da);  // the ids are known: before the barrier
    fused_stamp(a, 6);
    fused_grid_sync(a.bar);  // every slot's act is written
    fused_stamp(a, 7);

    // Stage act (S rows of n_ff) into the down activation areas: up to 8 loads per thread in flight.
    {
        constexpr int kL = 8;
        const int nff = ff / 4, total = S * nff;
        for (int i0 = 0; i0 < total; i0 += kL * kFusedThreads) {  // uniform trip counts (quantize4 shuffles)
            float4 v[kL];
#pragma unroll
            for (int j = 0; j < kL; ++j) {
                const int i = i0 + j * kFusedThreads + tid;
                v[j] = i < total ? __ldcg(reinterpret_cast<const float4*>(a.act) + i)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < kL; ++j) {
                const int i = i0 + j * kFusedThreads + tid, slot = i / nff, f = i - slot * nff;
                const bool on = i < total;
                if (i0 + j * kFusedThreads < total)  // uniform over the CTA
                    fused_stage4<TD>(p, x_dn + (on ? slot : 0) * p.tok_bytes, v[j], f, on);
            }
        }
    }
    __syncthreads();
    fused_stamp(a, 8);

    DownCursor cp{wid, 0, slot0, unit0};  // math cursor
    float acc = 0.0f;
    auto compute = [&](const typename TD::W(&w)[kD]) {
#pragma unroll
        for (int i = 0; i < kD; ++i) {
            if (cp.o >= n) break;  // uniform over the warp
            if (cp.slot < S) {
                const typename TD::X xv = TD::load_x(x_dn + cp.slot * p.tok_bytes, p, cp.unit);
                acc = fmaf(s_w[cp.slot], TD::dot(TD::unpack(w[i], cp.unit), xv, 0.0f), acc);
            }
            const int o = cp.o;
            if (cp.next(cpo, W, nu, slot0, unit0, step_s, step_u)) {  // output o is complete
                const float sum = warp_sum(acc);
                if (lane == 0) a.x[o] = __ldcg(a.x + o) + sum;
                acc = 0.0f;
            }
        }
    };
    while (cp.o < n) {  // uniform over the warp
        load(db);
        compute(da);
        load(da);
        compute(db);
    }
    fused_stamp(a, 9);
}

template <class TG, class TD>
void moe_fused_attr() {
    PELICAN_CUDA_CHECK(cudaFuncSetAttribute(moe_fused_kernel<TG, TD>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kGemvMaxSmem));
}

template <class TG, class TD>
int moe_fused_regs() {
    cudaFuncAttributes fa{};
    PELICAN_CUDA_CHECK(cudaFuncGetAttributes(&fa, moe_fused_kernel<TG, TD>));
    return fa.numRegs;
}

template <class TG, class TD>
void moe_fused_launch_pair(const MoeFusedParams& a, int grid, size_t smem, cudaStream_t stream) {
    launch_pdl(moe_fused_kernel<TG, TD>, dim3(grid), dim3(kFusedThreads), smem, stream, a);
}

// Per type pair (moe_fused_<pair>.cu): op 0 = set attributes, 1 = launch; returns the kernel's
// registers per thread for op 0.
using MoeFusedEntry = int (*)(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);

template <class TG, class TD>
int moe_fused_entry(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream) {
    if (op == 0) {
        moe_fused_attr<TG, TD>();
        return moe_fused_regs<TG, TD>();
    }
    moe_fused_launch_pair<TG, TD>(*a, grid, smem, stream);
    return 0;
}

}  // namespace pelican::cuda::detail
