// The forward pass of the hybrid Qwen3.5 stack (qwen35moe / qwen35; backend/cpu/hybrid_forward.h is the
// CPU pass it mirrors) on one CUDA GPU.
//
// A decode step is a micro-batch of one token (the GEMV kernels take up to kMicro = 8). A prompt runs
// in chunks of up to chunk_ = min(n_batch, kMaxChunk) tokens, every layer over the whole chunk
// (cuda_hybrid_chunk.cpp: GEMMs for the projections, conv and DeltaNet recurrence over the chunk in
// one launch each, flash attention, the experts in slot GEMVs); with PELICAN_HYBRID_CHUNK=0 (or
// n_batch <= 8) in micro-batches of eight like the decode step. Per micro-batch:
//   x = embd[tokens]
//   per layer (norms zero-centred: 1 + w, fused into the GEMV prologues):
//     DeltaNet:  in_proj GEMV [Q|K|V | z | b | a] -> conv1d_silu (rolling conv state) ->
//                deltanet_step (L2 norms, gates, delta rule over the fp32 state S, RMSNormGated)
//                -> out GEMV + residual
//     attention: GEMV [q | k | v | gate] -> rope_store_kv (q/k norms, partial NeoX rope, K/V into the
//                F16 cache) -> attention_decode -> sigmoid gate -> wo GEMV + residual
//     MoE:       router GEMV [E logits | shared-gate logit] -> moe_route (softmax, top-k, renorm; the
//                ids stay on the device) -> expert GEMVs in slot mode (gate/up glu, then down; only the
//                chosen experts' rows are read; the shared expert is one more slot, weight sigmoid(g),
//                when it is stacked with the routed ones, else two GEMVs of its own) -> moe_combine
//                (x += sum_k w_k y_k [+ sigmoid(g) * shared])
//     dense MLP: gate/up glu GEMV -> down GEMV + residual
//   logits = LM head GEMV with the final norm (last token, or every token for all_logits).
// The one-token step is captured once in a CUDA graph (token and position read from device
// memory). The recurrent state cannot rewind: eval at pos0 < n_past resets it and replays the kept
// tokens 0 .. pos0-1 (as the CPU pass does). The MTP block runs through mtp_eval (below).
// The routed experts of a prompt still read one expert per (token, choice) slot: grouping the slots
// by expert (a grouped GEMM) is the next step for prompt speed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_model.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/host_staging.h"
#include "backend/cuda/prefill_matmul.h"
#include "model/forward.h"

namespace pelican::cuda {

class CudaHybridForward final : public ForwardPass {
public:
    static constexpr int kMicro = 8;  // tokens per micro-batch (kMaxGemvTokens)
    // Tokens per layer pass of a prompt: min(n_batch, kMaxChunk). n_batch defaults to 512 (engine.h,
    // bench -b); larger batches (up to 2048) read each chosen expert's weights for more tokens at once
    // and launch fewer kernels per prompt, at ~4x the activation scratch of 512.
    static constexpr int64_t kMaxChunk = 2048;

    // Errors: not a hybrid model's weights, bad sizes, out of GPU memory.
    static Expected<std::unique_ptr<CudaHybridForward>> create(std::shared_ptr<const GpuModel> weights,
                                                               const ForwardOptions& opt,
                                                               bool use_graph = true);
    ~CudaHybridForward() override;
    CudaHybridForward(const CudaHybridForward&) = delete;
    CudaHybridForward& operator=(const CudaHybridForward&) = delete;

    // ForwardPass. eval returns once the work is queued (with all_logits: once they are on the host).
    Status eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                std::span<float> all_logits = {}) override;
    std::span<const float> last_logits() const override;
    int64_t n_ctx() const override { return n_ctx_; }
    int64_t n_batch() const override { return n_batch_; }
    const Model& model() const override { return model_; }
    size_t kv_bytes() const override { return kv_k_.size() + kv_v_.size() + state_.size(); }
    std::string_view device_name() const override { return "cuda"; }
    Status synchronize() override;

    int64_t n_past() const { return static_cast<int64_t>(history_.size()); }

    // ---- multi-token prediction (as HybridForward::mtp_eval; backend/cpu/hybrid_forward.h) ----
    bool has_mtp() const { return gm_->mtp().present; }
    // Runs the MTP block on n rows: row i is main position p = pos0 + i with hidden[i] = h_p (the final-
    // normed hidden state, host memory [n, n_embd]) and next_tokens[i] = x_{p+1}; writes MTP KV slots
    // pos0 .. pos0+n-1 (pos0 may rewind, not skip past mtp_n_past()). mtp_logits() then holds the last
    // row's logits; all_logits, when given, receives every row [n, n_vocab]. Returns once done.
    // The MTP layer ropes at the slot position p instead of p + 1: the attention scores depend only on
    // position differences, so the result is the same up to rounding.
    Status mtp_eval(std::span<const int32_t> next_tokens, std::span<const float> hidden, int64_t pos0,
                    std::span<float> all_logits = {});
    std::span<const float> mtp_logits() const;
    int64_t mtp_n_past() const { return mtp_n_past_; }
    bool uses_graph() const { return step_exec_ != nullptr; }
    const GpuModel& weights() const { return *gm_; }
    const std::shared_ptr<const GpuModel>& weights_ptr() const { return gm_; }
    DType kv_type() const { return gm_->all_f32() ? DType::F32 : DType::F16; }

    // ForwardPass's device hooks (a one-token eval is already the graph-replayed step without a
    // host sync, so decode_no_logits stays eval).
    int64_t decode_weight_bytes() const override { return static_cast<int64_t>(gm_->decode_read_bytes()); }
    int kv_elem_bytes() const override { return kv_type() == DType::F32 ? 4 : 2; }
    std::string_view kv_type_name() const override { return dtype_name(kv_type()); }

private:
    struct StepInput {  // the one-token step's device inputs
        int32_t token = 0;
        int32_t pos = 0;
    };
    static constexpr int kRing = 64;  // pinned staging slots for step inputs (the host runs ahead)

    CudaHybridForward(std::shared_ptr<const GpuModel> gm, int64_t n_ctx, int64_t n_batch, bool use_graph);
    Status init();
    KvView kv(int slot) const;
    float* conv_state(int slot) const;  // [kernel-1, conv_dim]
    float* ssm_state(int slot) const;   // [n_v_heads, d_k, d_v]
    void reset_state();                 // zero conv and S of every DeltaNet layer (async)
    // Queues one micro-batch of n <= kMicro tokens (ids, pos: device) through every layer; when
    // logits, the LM head: the last token's logits into logits_ row 0 (every token's when all_rows).
    void enqueue_micro(int n, const int32_t* ids, const int32_t* pos, bool all_rows, bool logits = true);
    void deltanet_layer(const GpuLayer& L, int slot, int n);
    void attention_layer(const GpuLayer& L, int slot, int n, const int32_t* pos);
    // chunk: a prompt chunk of up to chunk_ tokens (GEMMs through mm_ for the router, the shared
    // expert and the dense MLP; the routed experts in expert-slot GEMVs as in a micro-batch).
    void moe_block(const GpuLayer& L, int n, bool chunk = false);
    bool fused_router_ok(const GpuLayer& L) const;
    // The whole decode MoE block in one kernel (moe_fused.h): fused_moe_check = the fused router's
    // conditions, the shared expert stacked, and moe_fused_use (a supported type pair and shape where it
    // is the faster), evaluated once per layer at creation into fused_moe_layers_; fused_moe_ok looks it up.
    bool fused_moe_check(const GpuLayer& L) const;
    bool fused_moe_ok(const GpuLayer& L) const;
    void moe_fused_block(const GpuLayer& L);
    // The routed experts of n tokens x ko slots: slot-wise GEMVs (eact_, eout_), or for prompt chunks
    // grouped by expert (xg_, eactg_, eoutg_; slot s at row slot_row_[s]).
    void moe_slot_experts(const GpuLayer& L, int n, int ko, bool chunk, bool fused_combine = false);
    void moe_grouped_experts(const GpuLayer& L, int n, int ko);
    void mlp_block(const GpuLayer& L, int n, bool chunk = false);
    DeltaNetStepArgs deltanet_args(const GpuLayer& L, int slot, int n) const;
    // ---- prompt chunks (cuda_hybrid_chunk.cpp): every layer over n <= chunk_ tokens at once ----
    void enqueue_chunk(int n, const int32_t* ids, const int32_t* pos, int64_t pos0);
    void chunk_deltanet(const GpuLayer& L, int slot, int n);
    void chunk_attention(const GpuLayer& L, int slot, int n, const int32_t* pos, int64_t pos0);
    // x_ += x W^T (through tmp_).
    void mm_residual(const GpuMatrix& w, const float* x, int n);
    // down(silu(gate) * up) of xn_ into y [n, n_embd], or added to x_ when residual.
    void mm_swiglu(const std::vector<GpuPart>& gate_up, const GpuMatrix& down, int n, float* y,
                   bool residual);
    // The LM head of n <= kMicro rows of x after the norm (default: the final norm) into y (default:
    // logits_) rows 0 .. n-1.
    void lm_head(const float* x, int n, const float* norm = nullptr, float* y = nullptr);
    // y [n, n_embd] (+ residual) = down(silu(gate) * up) of rms_norm_zc(x_) over stacked or split
    // gate/up parts (through act_, and gu_ when split).
    void swiglu_mlp(const std::vector<GpuPart>& gate_up, const GpuMatrix& down, const float* norm, int n,
                    float* y, const float* residual);
    // GEMV of x_ (with the layer norm) over stacked parts into rows of width `width` of y.
    void gemv_parts(const std::vector<GpuPart>& parts, const float* norm, int n, float* y, int64_t width,
                    bool glu_single);
    Status run_tokens(std::span<const int32_t> tokens, int64_t pos0, std::span<float> all_logits);
    // Stages up to n_batch tokens at positions pos0.. for micro-batches: ids_dev_ = the tokens, pos_dev_[u]
    // = the first position of micro-batch u (one pinned buffer, two copies). Returns the micro-batch count.
    int64_t stage_chunk(std::span<const int32_t> tokens, int64_t pos0);
    void enqueue_mtp(int n, const int32_t* ids, const int32_t* pos, bool all_rows);

    std::shared_ptr<const GpuModel> gm_;
    const Model& model_;
    const ModelHParams& hp_;
    const int64_t n_ctx_, n_batch_;
    int64_t chunk_ = 0;  // tokens per layer pass of the prompt path (0: micro-batches only)
    const bool want_graph_;
    std::vector<int> kv_slot_, rec_slot_;  // [n_layer] cache / state slot of each layer (-1: none)
    int n_full_ = 0, n_linear_ = 0;
    int64_t w_dn_ = 0, w_at_ = 0;  // in_proj / gated attention qkv ([q | k | v | gate]) output widths

    cudaStream_t stream_ = nullptr;
    DeviceBuffer kv_k_, kv_v_, state_, scratch_, io_;
    size_t conv_floats_ = 0, ssm_floats_ = 0;  // per DeltaNet layer
    // Scratch [kMicro, ...] fp32 unless noted.
    // Rows: M = max(kMicro, chunk_) for the activations below; logits_ and the MTP buffers kMicro.
    float* x_ = nullptr;       // [M, n_embd] residual stream
    float* xn_ = nullptr;      // [M, n_embd] normed x (prompt chunks)
    float* tmp_ = nullptr;     // [M, max GEMM width] GEMM outputs (prompt chunks)
    float* proj_ = nullptr;    // [M, max(w_dn_, w_at_)] in_proj / gated attention qkv outputs
    float* conv_ = nullptr;    // [M, conv_dim]
    float* core_ = nullptr;    // [M, max(value_dim, q_dim, n_embd)] DeltaNet / attention outputs; MTP norms
    float* gu_ = nullptr;      // [M, 2 * max ff] split gate/up parts
    float* act_ = nullptr;     // [M, max ff] dense / shared SwiGLU output
    float* router_ = nullptr;  // [M, n_expert + 1]
    int32_t* ids_ = nullptr;   // [M, ko] expert ids (ko = k, or k + 1 with the shared expert as a slot)
    float* wts_ = nullptr;     // [M, ko] expert weights
    unsigned* router_ctr_ = nullptr;                 // moe_router_route's arrival counter (zeroed scratch)
    std::vector<const GpuLayer*> fused_moe_layers_;  // layers (and the MTP layer) with fused_moe_check
    bool conv_fold_ =
        false;  // deltanet_layer folds the conv into deltanet_step (deltanet_conv_fold_supported)
    unsigned long long* moe_bar_ = nullptr;  // moe_fused_decode's grid barrier count (zeroed scratch)
    unsigned* comb_ctr_ = nullptr;           // [n_embd] the fused combine's arrival counters (zeroed scratch)
    float* eact_ = nullptr;                  // [M * ko, n_ff_expert]
    float* eout_ = nullptr;                  // [M * ko, n_embd]
    float* sout_ = nullptr;                  // [M, n_embd] shared expert output
    float* logits_ = nullptr;                // [M, n_vocab]; row 0 = the last token's after enqueue_micro
    float* mtp_cat_ = nullptr;               // [M, 2 n_embd] MTP fc input (MTP only)
    float* mtp_hidden_ = nullptr;            // [M, n_embd] the rows' hidden states (MTP only)
    float* mtp_logits_ = nullptr;            // [M, n_vocab] (MTP only)
    void* attn_ws_ = nullptr;
    float* rope_table_ = nullptr;
    StepInput* step_in_ = nullptr;
    int32_t* ids_dev_ = nullptr;  // [n_batch] prompt tokens of one eval chunk
    int32_t* pos_dev_ = nullptr;  // [n_batch / kMicro + 1] first position of each micro-batch
    PrefillMatmul mm_;            // prompt-chunk GEMMs (cuBLAS), set up when chunk_ > 0
    // Grouped experts of a prompt chunk (chunk_ > 0, MoE; PELICAN_MOE_GROUPED=0: off): groups of
    // kMoeGroupRows rows, at most moe_group_max_groups(M * (k + 1), n_expert + 1) of them.
    bool grouped_ = false;
    int32_t* group_expert_ = nullptr;  // [groups]
    int32_t* slot_row_ = nullptr;      // [M * (k + 1)]
    int32_t* row_slot_ = nullptr;      // [groups * 8]
    float* xg_ = nullptr;              // [groups * 8, n_embd] gathered normed rows
    float* eactg_ = nullptr;           // [groups * 8, n_ff_expert]
    float* eoutg_ = nullptr;           // [groups * 8, n_embd]
    // Scratch of deltanet_chunked for the prompt chunks' DeltaNet layers (chunk_ > 0;
    // PELICAN_DN_CHUNKED=0: deltanet_step token by token instead).
    void* dn_scratch_ = nullptr;

    PinnedHost step_pin_, prompt_pin_, logits_pin_;
    cudaEvent_t step_ev_[kRing] = {}, prompt_ev_ = nullptr;
    int ring_next_ = 0;
    cudaGraphExec_t step_exec_ = nullptr;

    std::vector<int32_t> history_;  // tokens at positions 0 .. n_past-1
    int64_t mtp_n_past_ = 0;
    PinnedHost mtp_pin_;  // [n_vocab] the last MTP row's logits on the host
    bool have_logits_ = false;
    mutable bool host_logits_valid_ = false;
};

}  // namespace pelican::cuda
