// moe_router_route (moe.h): the router GEMV (fp32 weights, RMSNorm of x in the prologue) and the
// top-k of moe_route in one kernel for one token; the last CTA to finish routes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tuning.h"

namespace pelican::cuda {
namespace {

constexpr int kRouterWarps = 8;
constexpr int kRouterThreads = kRouterWarps * 32;

[[noreturn]] void router_fail(const char* what) {
    std::fprintf(stderr, "pelican: moe_router_route: %s\n", what);
    std::abort();
}

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Grid: G CTAs of 8 warps; warp w of CTA b computes rows b * 8 + w, + 8 G, ... Every CTA stages
// x' = rms_norm(x) (the GEMV prologue's arithmetic) in shared memory [n_embd floats]. The CTAs
// count themselves in on *counter (atomicInc wraps it back to 0 for the next launch); the last one
// routes with its warp 0.
template <int kPerLane>
__global__ void __launch_bounds__(kRouterThreads) moe_router_kernel(const MoeRouterArgs a) {
    extern __shared__ __align__(16) float xs[];  // [n_embd] x'
    __shared__ float part[kRouterWarps];
    __shared__ bool s_last;
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int n = static_cast<int>(a.n_embd), nf = n / 4;
    const int row_step = static_cast<int>(gridDim.x) * kRouterWarps;

    // Weights never change: start pulling this warp's rows into L2 while the previous kernel ends.
    for (int r = static_cast<int>(blockIdx.x) * kRouterWarps + warp; r < a.n_rows; r += row_step) {
        const char* row = reinterpret_cast<const char*>(a.w + static_cast<int64_t>(r) * a.w_stride);
        for (int off = lane * 128; off < n * 4; off += 32 * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(row + off));
    }
    pdl_wait();  // x comes from the previous kernel; logits / ids / weights may be read by earlier ones

    // x' = x * rstd * (1 + w) (or * w), as gemv_rstd / gemv_x4.
    float ss = 0.0f;
    for (int f = tid; f < nf; f += kRouterThreads) {
        const float4 v = reinterpret_cast<const float4*>(a.x)[f];
        ss = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
    }
    ss = warp_sum_f(ss);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int w = 0; w < kRouterWarps; ++w) tot += part[w];
    const float rstd =
        a.norm_w ? __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(tot, static_cast<float>(n)), a.eps)))
                 : 1.0f;
    for (int f = tid; f < nf; f += kRouterThreads) {
        float4 v = reinterpret_cast<const float4*>(a.x)[f];
        if (a.norm_w) {
            float4 w = reinterpret_cast<const float4*>(a.norm_w)[f];
            if (a.norm_one_plus) {
                w.x = __fadd_rn(1.0f, w.x);
                w.y = __fadd_rn(1.0f, w.y);
                w.z = __fadd_rn(1.0f, w.z);
                w.w = __fadd_rn(1.0f, w.w);
            }
            v.x = __fmul_rn(__fmul_rn(v.x, rstd), w.x);
            v.y = __fmul_rn(__fmul_rn(v.y, rstd), w.y);
            v.z = __fmul_rn(__fmul_rn(v.z, rstd), w.z);
            v.w = __fmul_rn(__fmul_rn(v.w, rstd), w.w);
        }
        reinterpret_cast<float4*>(xs)[f] = v;
    }
    __syncthreads();
    pdl_trigger();  // x read: the next kernel's CTAs may be scheduled (they wait for this grid)

    // logits[r] = W[r] . x' (fp32; per lane float4 steps, then a butterfly).
    for (int r = static_cast<int>(blockIdx.x) * kRouterWarps + warp; r < a.n_rows; r += row_step) {
        const float4* wr = reinterpret_cast<const float4*>(a.w + static_cast<int64_t>(r) * a.w_stride);
        float acc = 0.0f;
        // Batches of 16 float4 per lane: all of a batch's loads are issued before its FMAs (a 2048-wide
        // row is one batch), which a plain unrolled loop did not get from the compiler. The FMA order
        // (and so the result) is the plain loop's: f ascending.
        constexpr int kB = 16;
        for (int f0 = lane; f0 < nf; f0 += 32 * kB) {
            float4 w[kB];
#pragma unroll
            for (int u = 0; u < kB; ++u)
                w[u] = f0 + 32 * u < nf ? __ldg(wr + f0 + 32 * u) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int u = 0; u < kB; ++u) {
                if (f0 + 32 * u >= nf) break;
                const float4 x = reinterpret_cast<const float4*>(xs)[f0 + 32 * u];
                acc = fmaf(w[u].x, x.x, fmaf(w[u].y, x.y, fmaf(w[u].z, x.z, fmaf(w[u].w, x.w, acc))));
            }
        }
        acc = warp_sum_f(acc);
        if (lane == 0) a.logits[r] = acc;
    }

    // The last CTA to arrive routes (threadfence-reduction pattern).
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicInc(a.counter, gridDim.x - 1) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (warp == 0)
        detail::route_warp<kPerLane>(a.logits, a.n_expert, a.k, a.renormalize, a.shared_slot, a.ids,
                                     a.weights, lane);
}

}  // namespace

bool moe_router_fused_enabled() { return cuda_tuning().fused_router; }

void moe_router_route(const MoeRouterArgs& a, cudaStream_t stream) {
    if (a.n_expert < 1 || a.n_expert > kMoeMaxExperts) router_fail("n_expert must be 1 .. 512");
    if (a.k < 1 || a.k > kMoeMaxUsed || a.k > a.n_expert) router_fail("k must be 1 .. min(n_expert, 16)");
    if (a.n_rows < a.n_expert + (a.shared_slot ? 1 : 0))
        router_fail("n_rows below n_expert (+1 for the shared slot's gate logit)");
    if (a.n_embd < 4 || a.n_embd % 4 != 0 || a.n_embd > kMoeRouterMaxEmbd)
        router_fail("n_embd must be a multiple of 4, at most 8192");
    if (a.w_stride < a.n_embd || a.w_stride % 4 != 0)
        router_fail("w_stride below n_embd or not a multiple of 4");
    if (!a.x || !a.w || !a.logits || !a.ids || !a.weights || !a.counter) router_fail("null pointer");
    const auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
    if (misaligned(a.x) || misaligned(a.w) || (a.norm_w && misaligned(a.norm_w)))
        router_fail("x, w and norm_w must be 16-byte aligned");
    if (a.n_rows > kMoeMaxExperts + 1) router_fail("n_rows above n_expert + 1");
    const int blocks = (a.n_rows + kRouterWarps - 1) / kRouterWarps;  // a row per warp
    const size_t smem = static_cast<size_t>(a.n_embd) * sizeof(float);
    if (a.n_expert <= 4 * 32)
        launch_pdl(moe_router_kernel<4>, dim3(blocks), dim3(kRouterThreads), smem, stream, a);
    else if (a.n_expert <= 8 * 32)
        launch_pdl(moe_router_kernel<8>, dim3(blocks), dim3(kRouterThreads), smem, stream, a);
    else
        launch_pdl(moe_router_kernel<16>, dim3(blocks), dim3(kRouterThreads), smem, stream, a);
}

}  // namespace pelican::cuda
