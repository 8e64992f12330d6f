// A loaded Model's weights resident on the GPU, shared (read-only) by every CUDA pass and executor of
// an Engine:
//   - per layer, by its kinds (model/layer_kind.h): attention Q, K, V (and the gated attention's gate
//     rows) stacked along n_out into as few GpuMatrix parts as their types allow (one when they share a
//     type; GGUF Q4_K_M files keep V in Q6_K, giving [Q;K] + [V]) and wo; the Gated DeltaNet's input
//     projections likewise and its out_proj; SwiGLU gate and up likewise ([gate; up], read by the GEMV's
//     glu epilogue when it is one part) and down; the MoE router, the routed experts stacked per
//     projection and the shared expert;
//   - the LM head (the token embedding again when tied) as a GpuMatrix, the optional MTP block;
//   - norms, biases (stacked like their matrices, zeros where a part has none) and the rope
//     frequencies as fp32 device arrays carved from one allocation;
//   - the token embedding as raw GGUF rows (get_rows converts the looked-up rows).
// The CPU weights must be GGUF rows (a Model loaded with allow_repack = false), since the GPU
// layouts are built from them.
//
//   PELICAN_ASSIGN(auto gm, cuda::GpuModel::upload(model));   // logs "GPU weights: 4.21 GiB in 1.3 s"
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_matrix.h"
#include "core/status.h"
#include "model/device_model.h"
#include "model/layer_kind.h"

namespace pelican {
class Model;
struct LayerWeights;  // model/weights.h
struct AttentionWeights;
struct DeltaNetWeights;
struct SwigluWeights;
struct MoeWeights;
}  // namespace pelican

namespace pelican::cuda {

class Uploader;  // gpu_upload.h
class VecArena;
struct GemvArgs;  // gemv.h

// One stacked part: rows [row0, row0 + m.n_out) of the block's output.
struct GpuPart {
    GpuMatrix m;
    int64_t row0 = 0;
};

// fp32 device vectors below are nullptr when absent; norm weights stay as stored (hp.norm_weight
// kOnePlus: the kernels use 1 + w).

// Attention mixer (Mixer::kAttention, kGatedAttention).
struct GpuAttention {
    // kAttention: outputs [q_dim | kv_dim | kv_dim] (q heads, k heads, v heads); kGatedAttention:
    // [q_dim | kv_dim | kv_dim | q_dim (gate)] (wq's per-head query rows, K, V, then wq's per-head gate
    // rows).
    std::vector<GpuPart> qkv;
    GpuMatrix wo;                   // [n_embd, q_dim]
    const float* q_norm = nullptr;  // [head_dim] (qwen3; zero-centred in Qwen3.5)
    const float* k_norm = nullptr;  // [head_dim]
    const float* b_qkv = nullptr;   // [q_dim + 2 * kv_dim] (qwen2; kAttention), zeros for absent parts
    const float* b_o = nullptr;     // [n_embd]
};

// Gated DeltaNet mixer (Mixer::kDeltaNet).
struct GpuDeltaNet {
    std::vector<GpuPart> in_proj;    // outputs [conv_dim (Q|K|V) | value_dim (z) | n_v (b) | n_v (a)]
    GpuMatrix out;                   // [n_embd, value_dim]
    const float* conv = nullptr;     // [conv_dim, kernel]
    const float* dt_bias = nullptr;  // [n_v_heads]
    const float* a_log = nullptr;    // [n_v_heads]
    const float* norm = nullptr;     // [d_v] RMSNormGated weight (plain)
};

// SwiGLU MLP (Ffn::kSwiglu).
struct GpuMlp {
    std::vector<GpuPart> gate_up;      // outputs [2 * n_ff]: gate, then up
    GpuMatrix down;                    // [n_embd, n_ff]
    const float* b_gate_up = nullptr;  // [2 * n_ff], zeros for an absent part
    const float* b_down = nullptr;     // [n_embd]
};

// Routed experts (all E stacked in one matrix per projection) + the sigmoid-gated shared expert
// (Ffn::kMoe).
struct GpuMoe {
    std::vector<GpuPart> router;  // outputs [n_expert | 1 (shared expert gate logit)]
    GpuMatrix experts_gate_up;    // E blocks of [gate (n_ff_expert rows); up (n_ff_expert rows)]
    GpuMatrix experts_down;       // E blocks of n_embd rows (input n_ff_expert)
    // shared_in_experts: the shared expert is expert E of the stacked matrices above (same shapes and
    // types as the routed ones; it then runs as slot k) and the two below stay empty.
    bool shared_in_experts = false;
    std::vector<GpuPart> shared_gate_up;  // outputs [gate (n_ff_shared) | up (n_ff_shared)]
    GpuMatrix shared_down;                // [n_embd, n_ff_shared]
};

// One layer: kind.mixer picks attn or linear, kind.ffn picks mlp or moe (the others stay empty).
struct GpuLayer {
    LayerKind kind;
    const float* attn_norm = nullptr;  // [n_embd]
    const float* ffn_norm = nullptr;   // [n_embd]
    GpuAttention attn;
    GpuDeltaNet linear;
    GpuMlp mlp;
    GpuMoe moe;
};

// The multi-token-prediction block (mtp.*; model/weights.h MtpWeights): fc over
// [norm_embd(embd[x_{p+1}]) | norm_hidden(h_p)], one gated-attention decoder layer, norm, the LM head.
struct GpuMtp {
    bool present = false;
    GpuMatrix fc;                        // [n_embd, 2 n_embd]
    const float* norm_embd = nullptr;    // [n_embd] zero-centred
    const float* norm_hidden = nullptr;  // [n_embd] zero-centred
    const float* norm = nullptr;         // [n_embd] zero-centred, before the LM head
    GpuLayer layer;                      // {kGatedAttention, the stack's FFN}
};

// Whether the GPU forward pass can run this model: every layer of a kind the GPU runs, within the
// kernels' limits (gpu_supports_kinds), every matrix of a GPU matmul type (routed experts of one type
// per projection), an embedding get_rows can read, GGUF-row (not repacked) weights.
// The error says which tensor or property is not supported.
Status gpu_supports_model(const Model& model);
// The limits of the kinds present (gpu_model_hybrid.cpp): DeltaNet head widths and conv kernel, the
// gated attention's head_dim, the MoE router's experts.
Status gpu_supports_kinds(const Model& model);

class GpuModel final : public DeviceModel {
public:
    // Uploads every weight (synchronous). Errors: unsupported model (gpu_supports_model), no
    // device, or out of GPU memory (names the tensor, its bytes and the free/total device memory).
    // log_progress: one info line with the GiB uploaded and the seconds it took.
    static Expected<std::unique_ptr<GpuModel>> upload(const Model& model, bool log_progress = true);
    ~GpuModel() override;
    GpuModel(const GpuModel&) = delete;
    GpuModel& operator=(const GpuModel&) = delete;

    const Model& model() const { return model_; }
    // Layer i, its kinds as hp.layer[i].
    const GpuLayer& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
    int n_layer() const { return static_cast<int>(layers_.size()); }
    const GpuMtp& mtp() const { return mtp_; }
    const GpuMatrix& output() const { return output_; }  // [n_vocab, n_embd] LM head
    const float* output_norm() const { return output_norm_; }
    const float* inv_freq() const { return inv_freq_; }       // [rope_dim / 2], scaling applied
    const void* tok_embd() const { return tok_embd_.get(); }  // [n_vocab] GGUF rows, dense
    DType tok_embd_type() const { return tok_embd_type_; }
    size_t tok_embd_row_bytes() const { return tok_embd_row_bytes_; }
    // True when every matrix is F32 (the forward pass then keeps an F32 KV cache).
    bool all_f32() const { return all_f32_; }
    size_t device_bytes() const { return device_bytes_; }  // every allocation of the model
    // Weight bytes one decode step reads: the layers' and the LM head's GpuMatrix read_bytes (of the
    // routed experts only the k a token picks; not the MTP block), their norms and biases, one
    // embedding row.
    size_t decode_read_bytes() const override { return decode_read_bytes_; }

private:
    explicit GpuModel(const Model& m) : model_(m) {}
    void free_all();
    static void free_layer(GpuLayer& g);
    // One layer l into g by its kinds (up: the uploader of upload(); vecs: its fp32 arena; il: the
    // layer's name in errors, blk.<il>): *read += the matrix bytes one decode step reads of it (routed
    // experts: k of E), *vec_read += its vector bytes. gpu_model.cpp: the dispatch, attention and SwiGLU;
    // gpu_model_hybrid.cpp: gated attention, Gated DeltaNet, MoE and the MTP block.
    Status upload_layer(Uploader& up, VecArena& vecs, const LayerWeights& l, int il, GpuLayer& g,
                        size_t* read, size_t* vec_read) const;
    Status upload_attention(Uploader& up, VecArena& vecs, const AttentionWeights& a, int il, GpuAttention& g,
                            size_t* vec_read) const;
    Status upload_mlp(Uploader& up, VecArena& vecs, const SwigluWeights& m, int il, GpuMlp& g,
                      size_t* vec_read) const;
    Status upload_gated_attention(Uploader& up, VecArena& vecs, const AttentionWeights& a, int il,
                                  GpuAttention& g, size_t* vec_read) const;
    Status upload_deltanet(Uploader& up, VecArena& vecs, const DeltaNetWeights& d, int il, GpuDeltaNet& g,
                           size_t* vec_read) const;
    Status upload_moe(Uploader& up, const MoeWeights& m, int il, GpuMoe& g, size_t* read) const;
    // The MTP block when the file has it (not read by a decode step): fc, its norms, its decoder layer
    // (named blk.<n_layer>).
    Status upload_mtp(Uploader& up, VecArena& vecs);
    // tune: a decode GEMV of the matrix with those prologue/epilogue options; tune_args: with the
    // call shape given (the expert-slot GEMVs).
    using TuneFn = std::function<void(GpuMatrix&, bool norm, bool glu, bool residual)>;
    using TuneArgsFn = std::function<void(GpuMatrix&, const GemvArgs&)>;
    // Every layer's GEMVs as a decode step runs them (the MTP block's fc first, its layer after the stack's).
    void tune_layers(const TuneFn& tune, const TuneArgsFn& tune_args);
    void tune_moe(GpuMoe& g, const TuneArgsFn& tune_args) const;  // gpu_model_hybrid.cpp

    const Model& model_;
    std::vector<GpuLayer> layers_;
    GpuMtp mtp_;
    GpuMatrix output_;
    DeviceBuffer vectors_;  // every fp32 vector, 256-byte aligned slices
    DeviceBuffer tok_embd_;
    DType tok_embd_type_ = DType::F32;
    size_t tok_embd_row_bytes_ = 0;
    const float* output_norm_ = nullptr;
    const float* inv_freq_ = nullptr;
    bool all_f32_ = true;
    size_t device_bytes_ = 0;
    size_t decode_read_bytes_ = 0;
};

}  // namespace pelican::cuda
