// MoE router (moe_route: softmax, top-k, renormalisation; one warp per token) and the block's
// closing sum (moe_combine). See moe.h.
#include "backend/cuda/moe.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

[[noreturn]] void moe_fail(const char* what) {
    std::fprintf(stderr, "pelican: moe: %s\n", what);
    std::abort();
}

// ---- moe_route ----------------------------------------------------------------------------------

constexpr int kRouteWarps = 4;  // tokens per CTA

// moe_route: one warp per token (detail::route_warp).
template <int kPerLane>
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const float* logits, int64_t stride, int n_tok, int n_expert, int k, bool renormalize,
                     bool shared_slot, int32_t* ids, float* weights) {
    pdl_wait();  // the logits come from the router GEMV; ids / weights may be read by earlier kernels
    pdl_trigger();
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + (threadIdx.x >> 5);
    if (t >= n_tok) return;                  // whole warps
    const int ko = shared_slot ? k + 1 : k;  // entries per token
    detail::route_warp<kPerLane>(logits + t * stride, n_expert, k, renormalize, shared_slot, ids + t * ko,
                                 weights + t * ko, lane);
}

// ---- moe_combine --------------------------------------------------------------------------------

constexpr int kCombineThreads = 256;

struct CombineParams {
    MoeCombineArgs a;
    int64_t nv;  // vectors per row (n / 4 on the float4 path, else n)
};

__device__ __forceinline__ float sigmoid_of(const MoeCombineArgs& a, int64_t t) {
    if (a.shared_gate_logit == nullptr) return 1.0f;
    const float g = a.shared_gate_logit[t * a.shared_gate_stride];
    return 1.0f / (1.0f + expf(-g));
}

// blockIdx.y = token (t0 + blockIdx.y); a grid-stride loop over the row. kVec: float4.
template <bool kVec>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(const CombineParams cp, int t0) {
    pdl_wait();  // every input comes from earlier kernels; y may be read by them
    pdl_trigger();
    const MoeCombineArgs& a = cp.a;
    const int64_t t = t0 + static_cast<int64_t>(blockIdx.y);
    const float sg = a.shared_out ? sigmoid_of(a, t) : 0.0f;
    const float* wt = a.weights + t * a.k;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < cp.nv;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        if constexpr (kVec) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (a.shared_out) {
                const float4 s =
                    __ldg(reinterpret_cast<const float4*>(a.shared_out + t * a.shared_stride) + i);
                acc = make_float4(sg * s.x, sg * s.y, sg * s.z, sg * s.w);
            }
            for (int j = 0; j < a.k; ++j) {
                const float w = __ldg(wt + j);
                const int64_t row = a.slot_row ? a.slot_row[t * a.k + j] : t * a.k + j;
                if (row < 0) continue;  // a slot the grouping rejected (never from moe_route)
                const float4 e =
                    __ldg(reinterpret_cast<const float4*>(a.expert_out + row * a.expert_stride) + i);
                acc.x = fmaf(w, e.x, acc.x);
                acc.y = fmaf(w, e.y, acc.y);
                acc.z = fmaf(w, e.z, acc.z);
                acc.w = fmaf(w, e.w, acc.w);
            }
            if (a.residual) {
                const float4 r = reinterpret_cast<const float4*>(a.residual + t * a.residual_stride)[i];
                acc.x = r.x + acc.x;
                acc.y = r.y + acc.y;
                acc.z = r.z + acc.z;
                acc.w = r.w + acc.w;
            }
            reinterpret_cast<float4*>(a.y + t * a.y_stride)[i] = acc;
        } else {
            float acc = a.shared_out ? sg * __ldg(a.shared_out + t * a.shared_stride + i) : 0.0f;
            for (int j = 0; j < a.k; ++j) {
                const int64_t row = a.slot_row ? a.slot_row[t * a.k + j] : t * a.k + j;
                if (row >= 0) acc = fmaf(__ldg(wt + j), __ldg(a.expert_out + row * a.expert_stride + i), acc);
            }
            if (a.residual) acc = a.residual[t * a.residual_stride + i] + acc;
            a.y[t * a.y_stride + i] = acc;
        }
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void moe_route(const float* logits, int64_t logits_stride, int n_tok, int n_expert, int k, bool renormalize,
               int32_t* ids, float* weights, cudaStream_t stream, bool shared_slot) {
    if (n_tok < 0) moe_fail("moe_route: n_tok < 0");
    if (n_expert < 1 || n_expert > kMoeMaxExperts) moe_fail("moe_route: n_expert must be 1 .. 512");
    if (k < 1 || k > kMoeMaxUsed || k > n_expert) moe_fail("moe_route: k must be 1 .. min(n_expert, 16)");
    if (logits_stride == 0) logits_stride = n_expert;
    if (logits_stride < n_expert) moe_fail("moe_route: logits_stride below n_expert");
    if (shared_slot && (logits_stride < n_expert + 1 || k + 1 > 32))
        moe_fail("moe_route: the shared slot needs logits_stride > n_expert (its gate logit) and k < 32");
    if (n_tok == 0) return;
    if (logits == nullptr || ids == nullptr || weights == nullptr) moe_fail("moe_route: null pointer");
    const unsigned blocks =
        static_cast<unsigned>((static_cast<int64_t>(n_tok) + kRouteWarps - 1) / kRouteWarps);
    if (n_expert <= 4 * 32)
        launch_pdl(moe_route_kernel<4>, dim3(blocks), dim3(kRouteWarps * 32), 0, stream, logits,
                   logits_stride, n_tok, n_expert, k, renormalize, shared_slot, ids, weights);
    else if (n_expert <= 8 * 32)
        launch_pdl(moe_route_kernel<8>, dim3(blocks), dim3(kRouteWarps * 32), 0, stream, logits,
                   logits_stride, n_tok, n_expert, k, renormalize, shared_slot, ids, weights);
    else
        launch_pdl(moe_route_kernel<16>, dim3(blocks), dim3(kRouteWarps * 32), 0, stream, logits,
                   logits_stride, n_tok, n_expert, k, renormalize, shared_slot, ids, weights);
}

void moe_combine(const MoeCombineArgs& in, cudaStream_t stream) {
    MoeCombineArgs a = in;
    if (a.n_tok < 0 || a.n_embd < 0 || a.k < 0) moe_fail("moe_combine: negative size");
    if (a.n_tok == 0 || a.n_embd == 0) return;
    if (a.y == nullptr) moe_fail("moe_combine: null y");
    if (a.k > 0 && (a.expert_out == nullptr || a.weights == nullptr))
        moe_fail("moe_combine: k > 0 needs expert_out and weights");
    if (a.expert_stride == 0) a.expert_stride = a.n_embd;
    if (a.shared_stride == 0) a.shared_stride = a.n_embd;
    if (a.residual_stride == 0) a.residual_stride = a.n_embd;
    if (a.y_stride == 0) a.y_stride = a.n_embd;
    if ((a.k > 0 && a.expert_stride < a.n_embd) || (a.shared_out && a.shared_stride < a.n_embd) ||
        (a.residual && a.residual_stride < a.n_embd) || a.y_stride < a.n_embd)
        moe_fail("moe_combine: a row stride below n");
    if (a.residual != nullptr && a.residual != a.y) {
        // In place means the same rows; a partial overlap would race.
        const uintptr_t r0 = reinterpret_cast<uintptr_t>(a.residual),
                        r1 = r0 + sizeof(float) *
                                      static_cast<uintptr_t>((a.n_tok - 1) * a.residual_stride + a.n_embd);
        const uintptr_t y0 = reinterpret_cast<uintptr_t>(a.y),
                        y1 = y0 +
                             sizeof(float) * static_cast<uintptr_t>((a.n_tok - 1) * a.y_stride + a.n_embd);
        if (r0 < y1 && y0 < r1) moe_fail("moe_combine: residual overlaps y without being equal to it");
    }
    if (a.residual == a.y && a.residual_stride != a.y_stride)
        moe_fail("moe_combine: in place needs equal strides");
    const bool vec = a.n_embd % 4 == 0 && aligned16(a.y) && a.y_stride % 4 == 0 &&
                     (a.k == 0 || (aligned16(a.expert_out) && a.expert_stride % 4 == 0)) &&
                     (!a.shared_out || (aligned16(a.shared_out) && a.shared_stride % 4 == 0)) &&
                     (!a.residual || (aligned16(a.residual) && a.residual_stride % 4 == 0));
    CombineParams cp{a, vec ? a.n_embd / 4 : a.n_embd};
    int64_t bx = (cp.nv + kCombineThreads - 1) / kCombineThreads;
    if (bx > 1024) bx = 1024;  // then a grid-stride loop
    for (int t0 = 0; t0 < a.n_tok; t0 += 65535) {
        const int nt = a.n_tok - t0 < 65535 ? a.n_tok - t0 : 65535;
        const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(nt));
        if (vec)
            launch_pdl(moe_combine_kernel<true>, grid, dim3(kCombineThreads), 0, stream, cp, t0);
        else
            launch_pdl(moe_combine_kernel<false>, grid, dim3(kCombineThreads), 0, stream, cp, t0);
    }
}

}  // namespace pelican::cuda
