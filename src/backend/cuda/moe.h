// Mixture-of-experts pieces of the GPU forward pass (host-includable, fmt-free). The block
// hidden += MoE(rms_norm(hidden)) runs as
//   router (+ shared-expert gate) logits   gemv                               [n_tok, n_expert (+1)]
//   moe_route                              ids, weights                       [n_tok, k]
//   routed gate/up, down                   gemv in expert-slot mode (gemv.h)  [n_tok * k, ...]
//   shared expert gate/up, down            gemv                               [n_tok, n_embd]
//   moe_combine                            hidden += sum_j w_j e_j + sigmoid(g) shared
// All launches are PDL launches (pdl.cuh), checked, graph-capturable (no allocation, no host
// synchronisation). Bad arguments (internal invariants) abort with a message.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/gpu_matrix.h"

namespace pelican::cuda {

inline constexpr int kMoeMaxExperts = 512;
inline constexpr int kMoeMaxUsed = 16;

// Router, exactly ref::moe_route (ops/ops_qwen35.h): per token t, p = softmax(logits row t) (the
// exp terms and their sum in double, p rounded to fp32; an all -inf row gives p = 0); the k largest
// p, ties to the lower expert id, sorted by p descending; weights = p / (sum of the k p, in
// double) when renormalize (and that sum > 0), else p. logits: token t's row at
// logits + t * logits_stride (0 = n_expert), n_expert floats (device). ids, weights [n_tok, k]
// (device). One warp per token. 1 <= n_expert <= kMoeMaxExperts, 1 <= k <= min(n_expert,
// kMoeMaxUsed); n_tok 0 does nothing. NaN logits give valid ids (weights unspecified).
// shared_slot: the shared expert runs as one more slot (stacked as expert n_expert after the routed
// ones): ids, weights are then [n_tok, k + 1] with entry k = (n_expert, sigmoid(logits[t, n_expert]))
// (the gate logit in the router row's extra column: logits_stride > n_expert; sigmoid in fp32 as
// 1 / (1 + expf(-g))), and moe_combine runs with k + 1 slots and no shared_out.
void moe_route(const float* logits, int64_t logits_stride, int n_tok, int n_expert, int k, bool renormalize,
               int32_t* ids, float* weights, cudaStream_t stream, bool shared_slot = false);

// The router GEMV and moe_route fused for ONE token (the decode step): logits[r] = W[r] . x' for
// r < n_rows with x' = rms_norm(x) * (1 + norm_w) (norm_one_plus; else * norm_w; no norm when
// norm_w is nullptr), fp32 weights W [n_rows, w_stride floats] (a row per expert, then the shared
// gate's row when n_rows > n_expert); then ids / weights exactly as moe_route on that logits row
// (shared_slot as there). The logits are written too (moe_combine may read the shared gate's).
// One kernel: the CTAs count themselves in on *counter (device, zero before the first launch, back
// to zero after each; one counter per stream of launches) and the last one routes. x, w, norm_w
// 16-byte aligned; n_embd a multiple of 4, <= kMoeRouterMaxEmbd; n_rows <= n_expert + 1.
// PELICAN_FUSED_ROUTER=0 in the environment makes moe_router_fused_enabled() false (callers then
// run gemv + moe_route).
inline constexpr int64_t kMoeRouterMaxEmbd = 8192;
struct MoeRouterArgs {
    const float* x = nullptr;  // [n_embd]
    int64_t n_embd = 0;
    const float* norm_w = nullptr;  // [n_embd] or nullptr
    float eps = 1e-6f;
    bool norm_one_plus = false;
    const float* w = nullptr;  // [n_rows, w_stride]
    int64_t w_stride = 0;      // floats per row (>= n_embd, a multiple of 4)
    int n_rows = 0;
    float* logits = nullptr;  // [n_rows]
    int n_expert = 0, k = 0;
    bool renormalize = true, shared_slot = false;
    int32_t* ids = nullptr;    // [k (+1)]
    float* weights = nullptr;  // [k (+1)]
    unsigned* counter = nullptr;
};
void moe_router_route(const MoeRouterArgs& a, cudaStream_t stream);
bool moe_router_fused_enabled();

// Grouped experts (prompt chunks): the n_slots (token, choice) slots with ids[s] in [0, n_experts)
// (moe_route's output; the shared expert's id n_expert counts as one more expert) sorted into groups
// of kMoeGroupRows rows of one expert: group_expert[g] = the group's expert or -1 (unused group),
// row_slot[g * kMoeGroupRows + i] = the slot in that row or -1 (empty row), slot_row[s] = the row of
// slot s. max_groups >= moe_group_max_groups(n_slots, n_experts) (each expert's last group may be
// partly empty). One CTA (graph-capturable, PDL launch). The expert GEMVs then run with n_tok 8 and
// skip_negative_ids over max_groups slots (gemv.h), on rows gathered by moe_gather_rows.
inline constexpr int kMoeGroupRows = 8;
struct MoeGroupArgs {
    const int32_t* ids = nullptr;  // [n_slots]
    int n_slots = 0;
    int n_experts = 0;  // ids are < n_experts (<= kMoeMaxExperts + 1)
    int max_groups = 0;
    int32_t* group_expert = nullptr;  // [max_groups]
    int32_t* slot_row = nullptr;      // [n_slots]
    int32_t* row_slot = nullptr;      // [max_groups * kMoeGroupRows]
};
int moe_group_max_groups(int n_slots, int n_experts);
void moe_group_slots(const MoeGroupArgs& a, cudaStream_t stream);
// y [n_rows, n] row r = x row (row_slot[r] / x_div) (x rows n floats apart), zeros where row_slot[r] < 0;
// with group_expert, rows of unused groups (group_expert[r / kMoeGroupRows] < 0) are not written.
void moe_gather_rows(const float* x, int64_t n, int x_div, const int32_t* row_slot,
                     const int32_t* group_expert, int64_t n_rows, float* y, cudaStream_t stream);

// Grouped expert matmul on tensor cores (moe_mma.cu) for prompt chunks, Q4_0 and Q4_K expert stacks: per
// group g with e = group_expert[g] >= 0 (the groups of moe_group_slots), for its kMoeGroupRows token rows r =
// g * 8 + i of x:
//   glu:  y[r, j] = silu(W[e * expert_rows + j] . x_r) * (W[e * expert_rows + n_out + j] . x_r), j < n_out
//   else: y[r, j] = W[e * expert_rows + j] . x_r,  j < n_out (= expert_rows)
// x rounds to f16 and W dequantizes to f16 (Q4_0: one rounding of (q - 8) d; Q4_K: dequantize_matrix's
// fp32 value rounded to f16), products summed in fp32 by
// mma.sync m16n8k16. Rows of groups with e < 0 are not written; e >= the stack's expert count reads
// expert 0 (as the expert GEMVs). The same results as the grouped expert GEMVs up to rounding.
struct MoeMmaArgs {
    GpuMatrix w;              // the expert stack: expert e's rows [e * expert_rows, (e + 1) * expert_rows)
    int64_t expert_rows = 0;  // glu: 2 * n_out (gate rows, then up rows)
    bool glu = false;
    int64_t n_out = 0;                      // outputs per token row
    const int32_t* group_expert = nullptr;  // [n_groups]
    int n_groups = 0;
    const float* x = nullptr;  // [n_groups * 8 rows, x_stride floats apart], 16-byte aligned rows
    int64_t x_stride = 0;
    float* y = nullptr;  // [n_groups * 8 rows, y_stride floats apart]
    int64_t y_stride = 0;
    int n_experts = 0;  // set by moe_group_mma (w.n_out / expert_rows)
};
// Q4_0 or Q4_K, n_in a multiple of 128 (Q4_K rows are whole 256-value super-blocks anyway) whose staged
// x fits the device's shared memory (n_in * 17 bytes, at most 200 KiB: n_in <= ~12K on sm_90), outputs per
// expert a multiple of 16, at most 65535 groups per call.
bool moe_mma_supported(const GpuMatrix& w, bool glu, int64_t expert_rows);
void moe_group_mma(const MoeMmaArgs& a, cudaStream_t stream);  // aborts on unsupported arguments

// Closes the MoE block:
//   y[t, i] = residual[t, i] + sigmoid(shared_gate_logit[t]) * shared_out[t, i]
//             + sum_{j < k} weights[t * k + j] * expert_out[t * k + j, i]
// in fp32 (acc = sigmoid(g) * shared; acc = fma(w_j, e_j, acc) for j = 0 .. k-1; y = residual +
// acc), for t < n_tok, i < n_embd. Rows are *_stride floats apart (0 = n_embd). residual may be
// nullptr (0) and may equal y exactly (in place: hidden += MoE); no other input may alias y.
// shared_out nullptr: no shared expert; shared_gate_logit nullptr: gate 1 (the shared output
// added unscaled). Token t's gate logit is shared_gate_logit[t * shared_gate_stride] (e.g. the
// extra column of a stacked [router; shared gate] GEMV: stride n_expert + 1).
struct MoeCombineArgs {
    int n_tok = 0;
    int64_t n_embd = 0;                 // row width
    int k = 0;                          // experts per token (0: none)
    const float* expert_out = nullptr;  // [n_tok * k, n_embd] (the expert slots' y), device
    int64_t expert_stride = 0;
    const float* weights = nullptr;  // [n_tok, k] (moe_route's), device
    // Grouped experts: expert_out row of slot t * k + j is slot_row[t * k + j] (moe_group_slots)
    // instead of t * k + j (a negative row: the term is left out); nullptr: the slot itself.
    const int32_t* slot_row = nullptr;
    const float* shared_out = nullptr;  // [n_tok, n_embd] or nullptr
    int64_t shared_stride = 0;
    const float* shared_gate_logit = nullptr;  // see above, or nullptr
    int64_t shared_gate_stride = 1;
    const float* residual = nullptr;  // [n_tok, n_embd] or nullptr; may equal y
    int64_t residual_stride = 0;
    float* y = nullptr;  // [n_tok, n_embd]
    int64_t y_stride = 0;
};
void moe_combine(const MoeCombineArgs& a, cudaStream_t stream);

}  // namespace pelican::cuda
