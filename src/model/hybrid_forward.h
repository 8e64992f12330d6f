// The CPU forward pass of the hybrid Qwen3.5 stack (qwen3_5_moe, qwen3_5):
//
//   x = embd[tokens]
//   per layer:  h = rms_norm_zc(x)
//               x += DeltaNet(h)        (linear_attention layers: conv + delta rule over RecurrentState)
//                 or GatedAttention(h)  (full_attention layers: over the KV cache of those layers)
//               x += MoE(rms_norm_zc(x))  (routed top-k + sigmoid-gated shared expert) or SwiGLU MLP
//   logits = lm_head(rms_norm_zc(x))          rms_norm_zc: y = x/rms * (1 + w)
//
// Prompts run in n_batch chunks; inside a chunk the DeltaNet uses the chunked (64-token) form when it
// has more than one token and the recurrent step otherwise. The recurrent state cannot rewind, so an
// eval at pos0 below the current position replays the kept tokens 0..pos0-1 from a reset state (the
// pass keeps its token history); positions must otherwise follow on (pos0 == n_past).
// The block math is the scalar reference ops (ops/ops_qwen35.h) plus the CPU matmuls: correct, not fast.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/forward.h"
#include "model/forward_pass.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/recurrent_state.h"

namespace pelican {

class HybridForward final : public ForwardPass {
public:
    // Errors: not a hybrid model, bad sizes, allocation failures. The model must outlive the pass.
    static Expected<std::unique_ptr<HybridForward>> create(const Model& model, const ForwardOptions& opt);

    Status eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                std::span<float> all_logits = {}) override;
    std::span<const float> last_logits() const override { return last_logits_; }
    int64_t n_ctx() const override { return kv_.n_ctx(); }
    int64_t n_batch() const override { return n_batch_; }
    const Model& model() const override { return model_; }
    size_t kv_bytes() const override { return kv_.bytes() + state_.bytes(); }

    int64_t n_past() const { return static_cast<int64_t>(history_.size()); }
    // The DeltaNet state (conv inputs + S) of this sequence: copy it to snapshot, assign to roll back
    // (keep n_past consistent: see truncate_history).
    RecurrentState& recurrent_state() { return state_; }
    // Last hidden state (after the final norm) of the last evaluated token [n_embd]: the MTP input.
    std::span<const float> last_hidden() const { return last_hidden_; }

private:
    HybridForward(const Model& m, KvCache kv, int64_t n_batch);
    void alloc_scratch();
    void eval_chunk(const int32_t* tokens, int64_t n, int64_t pos0, ThreadPool& pool, float* all_logits);
    // Mixers and MLPs over n tokens: read xn_, write proj_.
    void deltanet(int il, int64_t n, ThreadPool& pool);
    void attention(int il, int64_t n, int64_t pos0, ThreadPool& pool);
    void moe(int il, int64_t n, ThreadPool& pool);
    void mlp(int il, int64_t n, ThreadPool& pool);

    const Model& model_;
    const ModelHParams& hp_;
    const HybridHParams& hy_;
    const HybridWeights& w_;
    KvCache kv_;                  // full-attention layers only, in layer order
    std::vector<int> kv_index_;   // [n_layer]: KV-cache slot of a full-attention layer
    std::vector<int> rec_index_;  // [n_layer]: RecurrentState slot of a DeltaNet layer
    RecurrentState state_;
    std::vector<int32_t> history_;  // tokens at positions 0 .. n_past-1
    int64_t n_batch_;

    // Scratch, [n_batch, width] fp32 (allocated once at create).
    std::vector<float> x_, xn_, proj_;             // [.., n_embd]
    std::vector<float> q_, gate_, attn_, qg_;      // [.., q_dim] (qg_: 2 q_dim)
    std::vector<float> cos_, sin_;                 // [.., rope_dim/2]
    std::vector<int64_t> pos_;                     // [n_batch]
    std::vector<float> qkv_, conv_out_, z_;        // [.., conv_dim], [.., conv_dim], [.., value_dim]
    std::vector<float> lq_, lk_, lv_, core_;       // [.., key_dim] x2, [.., value_dim] x2
    std::vector<float> a_, b_, g_, beta_;          // [.., n_v_heads]
    std::vector<float> ff_a_, ff_b_;               // [.., max(n_ff, n_ff_shared)]
    std::vector<float> router_, route_w_;          // [.., n_expert], [.., k]
    std::vector<int32_t> route_id_;                // [.., k]
    std::vector<int32_t> sel_tok_;                 // [n_batch] tokens routed to one expert
    std::vector<float> sel_w_, gather_, sh_gate_;  // [n_batch], [n_batch, n_embd], [n_batch]
    std::vector<float> expert_out_;                // [n_batch, n_embd]
    std::vector<float> last_logits_, last_hidden_;
};

// For runtime/forward_factory.cpp: the CPU pass of a hybrid model as a ForwardPass.
Expected<std::unique_ptr<ForwardPass>> create_hybrid_forward(const Model& model, const ForwardOptions& opt);

}  // namespace pelican
