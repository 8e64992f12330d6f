// The whole MoE block of a one-token decode step in ONE kernel (host-includable, fmt-free):
//   x += sum_j w_j down_{e_j}(silu(gate_{e_j} x') * up_{e_j} x'),  x' = rms_norm(x) * (1 + norm_w)
// over the k routed experts and the shared expert stacked as expert n_expert (slot k, weight
// sigmoid(shared gate logit)), i.e. moe_router_route -> expert gate/up GEMV -> expert down GEMV ->
// combine of the decode step, without the two kernel boundaries between them. One CTA per SM, all
// resident; two grid barriers (device counters):
//   phase A  router logits (fp32 W [n_expert + 1, n_embd] . x'; the CTA's rows are loaded into
//            registers before the PDL wait), barrier;
//   phase B  every CTA routes (moe_route's rule; with renormalisation by the logits, route_by_logits
//            below; into shared memory), then the gate/up
//            rows of the chosen experts, act = silu(g) * u into `act`; the CTA's first down weights
//            are loaded before the barrier;
//   phase C  the down rows, each output element summed over the slots by one warp: x[o] += sum.
// Activations are rounded as the GEMVs round them (int8 32-blocks for quantized weights, fp32 for
// float ones); the gate/up sums are the GEMV's own order (bit-identical to a one-row-per-warp GEMV);
// the down sums and the combine are reordered (per lane w_j * unit dot, then a warp sum).
// The grid barriers need every CTA resident at once: one such kernel at a time on a device (the engine
// runs one decode stream; two of these kernels launched concurrently from different streams could each
// hold part of the SMs and wait for each other).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/gpu_matrix.h"

namespace pelican::cuda {

struct MoeFusedArgs {
    float* x = nullptr;  // [n_embd] the hidden state, updated in place (16-byte aligned)
    int64_t n_embd = 0;
    const float* norm_w = nullptr;  // [n_embd] (the MoE's RMSNorm weights; nullptr: no norm)
    float eps = 1e-6f;
    bool norm_one_plus = true;
    const float* router_w = nullptr;  // [n_expert + 1 rows, router_stride floats], fp32, 16-byte aligned
    int64_t router_stride = 0;
    int n_expert = 0, k = 0;  // routed experts, chosen per token (the shared expert is slot k)
    bool renormalize = true;
    // With renormalize: route by the logits (one top-k per 32 experts, then a merge; weights from the
    // chosen logits) instead of the softmax over all experts then the top-k. The same ids except at
    // near ties (p equal after rounding to fp32), weights within a few fp32 roundings. false, or
    // PELICAN_FUSED_ROUTE=0 in the environment: the softmax route (moe_route's order).
    bool route_by_logits = true;
    GpuMatrix gate_up;  // (n_expert + 1) experts of [gate (n_ff rows); up (n_ff rows)] x n_embd
    GpuMatrix down;     // (n_expert + 1) experts of n_embd rows x n_ff
    int64_t n_ff = 0;
    float* logits = nullptr;   // [n_expert + 1] written (the router's logits)
    int32_t* ids = nullptr;    // [k + 1] written (as moe_route with the shared slot)
    float* weights = nullptr;  // [k + 1] written
    float* act = nullptr;      // [(k + 1) * n_ff] scratch (written, then read by other CTAs)
    // The grid barrier's arrival count (device), zero before the first launch; every launch on one
    // counter must use the same grid (it stays a multiple of the grid size between launches).
    unsigned long long* barrier = nullptr;
    int grid = 0;  // CTAs; 0: one per SM (tests force smaller grids, each on its own counter)
    // Benchmarks only: [grid x kMoeFusedTracePoints] %globaltimer stamps (ns) of each CTA's thread 0 at
    // the phase boundaries (start, after the PDL wait, x' staged, logits written, barrier 1, routed,
    // gate/up done, barrier 2, act staged, end, then the route's softmax done); nullptr: none.
    uint64_t* trace = nullptr;
};
inline constexpr int kMoeFusedTracePoints = 11;

// True when moe_fused_decode takes these weights: gate/up and down of one of the supported type
// pairs (Q4_0/Q4_0, Q8_0/Q8_0, Q4_K/Q4_K, Q4_K/Q6_K, Q6_K/Q6_K, F32/F32), the shapes above, n_embd and
// n_ff multiples of 32, n_embd <= 8192, 1 <= k < 16, n_expert <= 512, the activations fitting shared
// memory, a device of sm_70+ where one CTA of the kernel fits an SM. The first call per device and type
// pair sets the kernel's attributes: make it outside a graph capture.
bool moe_fused_supported(const GpuMatrix& gate_up, const GpuMatrix& down, int64_t n_embd, int64_t n_ff,
                         int n_expert, int k);
// Whether the fused kernel is expected to beat the chain for this shape, from measurements
// (cuda_moe_bench on the H200, docs/performance.md): its gate/up phase spreads (k + 1) x n_ff row pairs
// of ceil(units / 32) chunks over grid x 16 warps; the fewer items per warp, the larger its lead
// (Qwen3.5-35B-A3B Q4_0: 4.4 items per warp, 18.2 us against 25.1 for the chain; 122B-A10B Q4_0: 13.1,
// 33.6 against 34.4, session 9; before that session's route and cursors 38.6 against 34.5). True when
// those items per warp are at most kMoeFusedMaxItems (just above the largest measured shape; larger
// ones are unmeasured and keep the chain). units: lane units of one gate/up row (32 elements for Q4_0 /
// Q8_0 / Q6_K, 64 for Q4_K, 4 for F32); sms: the grid.
inline constexpr double kMoeFusedMaxItems = 14.0;
bool moe_fused_preferred(int64_t n_ff, int k, int64_t gate_up_units, int sms);
// The decode pass's choice: PELICAN_FUSED_MOE=0 never, =2 wherever supported (A/B), otherwise (unset,
// 1) where supported and preferred.
bool moe_fused_use(const GpuMatrix& gate_up, const GpuMatrix& down, int64_t n_embd, int64_t n_ff,
                   int n_expert, int k);
// Aborts with a message on arguments moe_fused_supported rejects.
void moe_fused_decode(const MoeFusedArgs& a, cudaStream_t stream);

}  // namespace pelican::cuda
