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
// The blocks are backend/cpu/hybrid_blocks.h (shared with the CPU executor, which runs these models
// for Session and bench); this pass remains for multi-token prediction (mtp_eval), not yet on the executor.
//
// Multi-token prediction (mtp.*, when the model has it; research §1.7, as vLLM runs it): for main
// position p with final-normed hidden state h_p and the next token x_{p+1},
//   z = fc(concat[rms_norm_zc(embd[x_{p+1}], pre_fc_norm_embedding), rms_norm_zc(h_p, pre_fc_norm_hidden)])
//   z = MTP decoder layer (gated full attention + MoE / MLP) at rope position p + 1 over its own KV
//       cache (slot p), then logits = lm_head(rms_norm_zc(z, mtp.norm))   -> a draft for x_{p+2}.
// Only mtp.layers.0 runs (every released Qwen3.5 has one MTP layer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/hybrid_blocks.h"
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
    size_t kv_bytes() const override { return kv_.bytes() + state_.bytes() + mtp_kv_.bytes(); }

    int64_t n_past() const { return static_cast<int64_t>(history_.size()); }
    // The DeltaNet state (conv inputs + S) of this sequence: copy it to snapshot, assign to roll back
    // (keep n_past consistent: see truncate_history).
    RecurrentState& recurrent_state() { return state_; }
    // Last hidden state (after the final norm) of the last evaluated token [n_embd]: the MTP input.
    std::span<const float> last_hidden() const { return last_hidden_; }
    // When on, eval also keeps the final-normed hidden state of every token it was given
    // (hidden_rows(): [n_tokens of the last eval call, n_embd]); the input to prime the MTP cache.
    void set_keep_hidden(bool on) { keep_hidden_ = on; }
    std::span<const float> hidden_rows() const { return hidden_rows_; }

    // ---- multi-token prediction ----
    bool has_mtp() const { return w_.mtp.present; }
    // Runs the MTP block on n rows: row i is main position p = pos0 + i, with hidden[i] = h_p
    // [n_embd] and next_tokens[i] = x_{p+1}. Writes MTP KV slots pos0 .. pos0+n-1 (pos0 may rewind to
    // any earlier slot, but not skip past mtp_n_past()). mtp_logits() then holds the last row's
    // logits (the draft for x_{pos0+n+1}); all_logits, when given, receives every row [n, n_vocab].
    Status mtp_eval(std::span<const int32_t> next_tokens, std::span<const float> hidden, int64_t pos0,
                    ThreadPool& pool, std::span<float> all_logits = {});
    // After eval of x_0..x_t: mtp_eval({x_{t+1}}, last_hidden(), t), the logits of the draft for x_{t+2}.
    Status mtp_draft(int32_t next_token, ThreadPool& pool);
    std::span<const float> mtp_logits() const { return mtp_logits_; }
    int64_t mtp_n_past() const { return mtp_n_past_; }

private:
    HybridForward(const Model& m, KvCache kv, int64_t n_batch);
    void alloc_scratch();
    void eval_chunk(const int32_t* tokens, int64_t n, int64_t pos0, ThreadPool& pool, float* all_logits);
    void mtp_chunk(const int32_t* tokens, const float* hidden, int64_t n, int64_t pos0, ThreadPool& pool,
                   float* all_logits);
    // x_ += mixer(norm(x_)); x_ += mlp(norm(x_)) for a full-attention layer whose K/V rows live at
    // kc / vc (slot pos0 onwards); rope tables cos_ / sin_ must be set for the n rows.
    void attention_layer(const LayerWeights& L, float* kc, float* vc, int64_t n, int64_t pos0,
                         ThreadPool& pool);
    // Mixers and MLPs over n tokens: read xn_, write proj_.
    void deltanet(int il, int64_t n, ThreadPool& pool);
    void attention(const AttentionWeights& W, float* kc, float* vc, int64_t n, int64_t pos0,
                   ThreadPool& pool);
    void ffn(const LayerWeights& L, int64_t n, ThreadPool& pool);

    const Model& model_;
    const ModelHParams& hp_;
    const ModelWeights& w_;
    KvCache kv_;                  // full-attention layers only, in layer order
    std::vector<int> kv_index_;   // [n_layer]: KV-cache slot of a full-attention layer
    std::vector<int> rec_index_;  // [n_layer]: RecurrentState slot of a DeltaNet layer
    RecurrentState state_;
    std::vector<int32_t> history_;  // tokens at positions 0 .. n_past-1
    int64_t n_batch_;

    // Scratch, [n_batch, width] fp32 (allocated once at create); the blocks' own in blocks_.
    std::vector<float> x_, xn_, proj_;  // [.., n_embd]
    std::vector<float> cos_, sin_;      // [.., rope_dim/2]
    std::vector<int64_t> pos_;          // [n_batch]
    std::unique_ptr<cpu::HybridBlocks> blocks_;
    std::vector<float> last_logits_, last_hidden_;
    bool keep_hidden_ = false;
    std::vector<float> hidden_rows_;  // [n tokens of the last eval, n_embd] when keep_hidden_

    // MTP: its own KV cache (one slot per main position), fc input scratch, logits.
    KvCache mtp_kv_;
    int64_t mtp_n_past_ = 0;
    std::vector<float> mtp_in_;  // [n_batch, 2 n_embd]
    std::vector<float> mtp_logits_;
};

}  // namespace pelican
