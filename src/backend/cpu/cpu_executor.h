// The CPU Executor (runtime/executor.h). It runs each layer by the kinds the model declares
// (model/layer_kind.h): attention, gated attention or Gated DeltaNet, then SwiGLU or MoE (+ shared
// expert); the gated-attention, DeltaNet and MoE blocks are backend/cpu/hybrid_blocks.h, recurrent
// state lives in the memory's rings. Norms apply w or 1 + w (hp.norm_weight).
//
//   x = embd[tokens] * embd_scale
//   per layer:  mixer, e.g. attention: h = rms_norm(x) -> q, k, v (+bias) -> [q/k rms_norm per head]
//               -> rope(q, k), K/V rows -> the sequences' KV pages; x += residual_scale * o_proj(attention)
//               FFN, e.g. x += residual_scale * down(silu(gate(rms_norm(x))) * up(rms_norm(x)))
//   logits = output(rms_norm(x[out_rows])) * logit_scale
//
// A step's rows may come from many sequences at different positions: every matmul runs once over
// all rows (the weights are read once per step, not once per sequence), attention reads each
// sequence's own pages. A DeltaNet layer runs its conv and delta rule per sequence: a step of at most
// `checkpoints` tokens of a sequence goes token by token and leaves a state per token in the ring (so
// a truncate within them is exact), a longer one uses the chunked form and leaves the last state.
// Scratch is sized at create() for max_batch_tokens rows: step() never allocates. mtp_step runs the MTP
// block (cpu_executor_mtp.cpp) through the same layer code, its K/V in the memory's pools after the stack's.
//
// Intermediates have names; a tap callback (debugging, eval) sees each one as it is produced, over
// all rows of the step: "embd" [n, n_embd]; per layer "attn_norm" [n, n_embd], "q" [n, q_dim] and
// "k", "v" [n, kv_dim] (after bias, q/k norm and rope), "attn" [n, q_dim] (attention output before
// o_proj), "attn_out" [n, n_embd], "ffn_inp" [n, n_embd], "ffn_norm", "ffn_act" [n, n_ff],
// "ffn_out" [n, n_embd], "l_out" [n, n_embd]; then "output_norm" and "logits" [out rows, ...]
// (layer -1). TapInfo::pos0 is the position of row 0.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/cpu_memory.h"
#include "backend/cpu/hybrid_blocks.h"
#include "core/buffer.h"
#include "model/forward.h"
#include "model/model.h"
#include "runtime/executor.h"

namespace pelican::cpu {

struct CpuExecutorOptions {
    int64_t max_batch_tokens = 512;  // most rows per step
    TapFn tap;
};

class CpuExecutor final : public Executor {
public:
    // Errors: bad sizes, allocation failures. The model must outlive the executor.
    static Expected<std::unique_ptr<CpuExecutor>> create(const Model& model, const CpuExecutorOptions& opt);

    Expected<std::unique_ptr<SequenceMemory>> create_memory(const MemoryOptions& opt) override;
    Status step(const Batch& batch, SequenceMemory& mem, const StepOutputs& out, ThreadPool& pool) override;
    Status mtp_step(const Batch& b, std::span<const float> hidden, SequenceMemory& mem,
                    const StepOutputs& out, ThreadPool& pool) override;
    int64_t max_batch_tokens() const override { return max_tokens_; }
    const Model& model() const override { return model_; }
    std::string_view device_name() const override { return "cpu"; }
    void set_tap(TapFn tap) { tap_ = std::move(tap); }

private:
    CpuExecutor(const Model& m, int64_t max_tokens);
    Status alloc_scratch();
    // Layer L (index il for taps and the DeltaNet state; K/V in pool kv_slot) by its kinds over rows 0..n-1
    // of x_.
    void layer(const LayerWeights& L, int il, int kv_slot, int64_t n, CpuMemoryStorage& st,
               const SequenceMemory& mem, ThreadPool& pool);
    // Mixer::kAttention: xn_ -> q/k/v (+bias, q/k norm, rope) -> paged attention -> o_proj -> proj_.
    void attention(int il, int kv_slot, const AttentionWeights& W, int64_t n, CpuMemoryStorage& kv,
                   const SequenceMemory& mem, ThreadPool& pool);
    // Ffn::kSwiglu: xn_ -> down(silu(gate) * up) (+biases) -> proj_.
    void swiglu_ffn(int il, const SwigluWeights& W, int64_t n, ThreadPool& pool);
    // This step's K/V rows k_ / v_ into attention layer `slot`'s pages, then paged attention of q -> out.
    void paged_attention(int slot, const float* q, float* out, CpuMemoryStorage& kv,
                         const SequenceMemory& mem, ThreadPool& pool);
    void deltanet_runs(int il, CpuMemoryStorage& st, const SequenceMemory& mem, ThreadPool& pool);
    // The out rows of x_ -> norm (the final norm, or the MTP block's) -> hidden / logits.
    void head(const Batch& b, const float* norm, const StepOutputs& out, ThreadPool& pool);
    void tap(std::string_view name, int layer, int64_t n, int64_t width, const float* data) const {
        if (tap_) tap_(TapInfo{name, layer, tap_pos0_, n, width, data});
    }

    const Model& model_;
    const ModelHParams& hp_;
    int64_t max_tokens_;
    TapFn tap_;
    int64_t tap_pos0_ = 0;
    std::vector<int> kv_slot_;   // [n_layer] attention layer -> its KV pool, else -1
    std::vector<int> rec_slot_;  // [n_layer] DeltaNet layer -> its recurrent state, else -1
    int n_kv_layers_ = 0;  // KV pools of the main stack; the MTP layers' pools follow (MemoryOptions::mtp)
    std::vector<float> mtp_in_;  // [max_tokens, 2 n_embd] the MTP fc input (models with an MTP block)
    std::unique_ptr<HybridBlocks> blocks_;  // when a layer is gated attention, DeltaNet or MoE
    std::vector<SeqRun> runs_;              // [<= max_tokens] this step's sequences (capacity reserved)
    std::vector<int32_t> n_states_;         // [<= max_tokens] state entries each run leaves (recurrent)
    std::vector<PagedSeq> attn_seqs_;

    // Scratch, all [max_tokens, width] fp32 unless noted (carved from one buffer).
    Buffer scratch_;
    float* x_ = nullptr;               // [T, n_embd] residual stream
    float* xn_ = nullptr;              // [T, n_embd] normed input of a sub-block
    float* q_ = nullptr;               // [T, q_dim]
    float* k_ = nullptr;               // [T, kv_dim] this step's K rows (copied into the pages)
    float* v_ = nullptr;               // [T, kv_dim]
    float* attn_ = nullptr;            // [T, q_dim]
    float* proj_ = nullptr;            // [T, n_embd] o_proj / down_proj output
    float* gate_ = nullptr;            // [T, n_ff]
    float* up_ = nullptr;              // [T, n_ff]
    float* cos_ = nullptr;             // [T, rope_dim/2]
    float* sin_ = nullptr;             // [T, rope_dim/2]
    int64_t* pos_ = nullptr;           // [T] absolute positions
    std::span<std::byte> mm_scratch_;  // cpu::matmul activation scratch
};

}  // namespace pelican::cpu
