// The blocks of the Qwen3.5 layer kinds on the CPU that the executor (backend/cpu/cpu_executor.h) runs
// besides its attention and SwiGLU: Gated DeltaNet, gated full attention, MoE with a shared expert. Each
// works on rows [n, ...] of a step (any mix of sequences): the matmuls run once over all rows; what is per
// sequence (the DeltaNet's conv and delta rule over its state, attention over its KV) is a
// separate call the pass makes per sequence. Scratch for max_rows rows is allocated once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace pelican::cpu {

class HybridBlocks {
public:
    HybridBlocks(const ModelHParams& hp, int64_t max_rows);  // throws std::bad_alloc

    // ---- Gated DeltaNet: project (all rows), core (per sequence), finish (all rows) ----
    // xn [n, n_embd] -> the block's inputs for rows 0..n-1.
    void deltanet_project(const DeltaNetWeights& W, const float* xn, int64_t n, ThreadPool& pool);
    // Rows row0 .. row0+n-1 through the causal conv and the delta rule of one sequence, whose state
    // (conv [kernel-1, conv_dim], ssm [n_v_heads, d_k, d_v]) is updated in place. chunked: the
    // 64-token chunked form (prefill), else token by token (equal up to rounding).
    // ssm_in: the delta-rule state before these rows when it is not ssm_state (read only), else nullptr.
    void deltanet_core(const DeltaNetWeights& W, int64_t row0, int64_t n, float* conv_state, float* ssm_state,
                       bool chunked, ThreadPool& pool, const float* ssm_in = nullptr);
    // Gated norm and output projection of rows 0..n-1 -> out [n, n_embd].
    void deltanet_finish(const DeltaNetWeights& W, int64_t n, float* out, ThreadPool& pool);

    // ---- gated attention: project (all rows) -> the caller's attention -> finish ----
    // q (normed, roped) -> q(); k, v (k normed and roped) -> k_out / v_out [n, kv_dim]; the sigmoid
    // gate is kept. cos / sin [n, rope_dim/2].
    void attention_project(const AttentionWeights& W, const float* xn, int64_t n, const float* cos,
                           const float* sin, float* k_out, float* v_out, ThreadPool& pool);
    float* q() { return q_.data(); }        // [n, q_dim]
    float* attn() { return attn_.data(); }  // [n, q_dim]: the caller's attention output goes here
    // attn() * sigmoid(gate) -> o_proj -> out [n, n_embd].
    void attention_finish(const AttentionWeights& W, int64_t n, float* out, ThreadPool& pool);

    // ---- FFN ----
    void moe(const MoeWeights& W, const float* xn, int64_t n, float* out, ThreadPool& pool);

private:
    const ModelHParams& hp_;
    std::vector<float> q_, gate_, attn_, qg_;      // [.., q_dim] (qg_: 2 q_dim)
    std::vector<float> qkv_, conv_out_, z_;        // [.., conv_dim], [.., conv_dim], [.., value_dim]
    std::vector<float> lq_, lk_, lv_, core_;       // [.., key_dim] x2, [.., value_dim] x2
    std::vector<float> a_, b_, g_, beta_;          // [.., n_v_heads]
    std::vector<float> ff_a_, ff_b_;               // [.., max(n_ff, n_ff_shared, n_ff_expert)]
    std::vector<float> router_, route_w_;          // [.., n_expert], [.., k]
    std::vector<int32_t> route_id_;                // [.., k]
    std::vector<int32_t> sel_tok_;                 // [max_rows] tokens routed to one expert
    std::vector<float> sel_w_, gather_, sh_gate_;  // [max_rows], [max_rows, n_embd], [max_rows]
    std::vector<float> expert_out_;                // [max_rows, n_embd]
};

}  // namespace pelican::cpu
