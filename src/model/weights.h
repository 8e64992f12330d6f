// The weights of a model, per layer by its kinds (model/layer_kind.h): read by the Llama-family
// naming scheme (weights.cpp) or the Qwen3.5 one (qwen35_weights.cpp). Matrices are cpu::Weight views of the
// mapped file when allow_repack is false (the GPU upload reads them); with it (the CPU) they are owned
// copies, Q4_0/Q8_0 repacked for the kernels, and the mapped pages of each matrix are released from the
// resident set as soon as it is copied (WeightSource::release_pages), so the process holds the weights once.
// Norm weights and biases are owned fp32 copies (converted when the file stores them narrower); the token
// embedding stays a view read row by row (or reads a tied head's copy). Absent optional tensors
// are nullptr.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/hparams.h"
#include "model/weight_source.h"

namespace pelican {

// A mixer's attention projections (Mixer::kAttention, kGatedAttention).
struct AttentionWeights {
    cpu::Weight wq;             // [q_dim, n_embd] (torch order: out, in); kGatedAttention: [2 q_dim, n_embd],
                                // per head head_dim query rows then head_dim gate rows
    cpu::Weight wk;             // [kv_dim, n_embd]
    cpu::Weight wv;             // [kv_dim, n_embd]
    cpu::Weight wo;             // [n_embd, q_dim]
    const float* bq = nullptr;  // [q_dim]   (optional)
    const float* bk = nullptr;  // [kv_dim]
    const float* bv = nullptr;  // [kv_dim]
    const float* bo = nullptr;  // [n_embd]
    const float* q_norm =
        nullptr;  // [head_dim] per-head RMSNorm before rope (qwen3; zero-centred in Qwen3.5)
    const float* k_norm = nullptr;  // [head_dim]
};

// Gated DeltaNet mixer (Mixer::kDeltaNet; linear_attn.*).
struct DeltaNetWeights {
    cpu::Weight in_qkv;           // [conv_dim, n_embd]: channels [Q (key_dim) | K (key_dim) | V (value_dim)]
    cpu::Weight in_z;             // [value_dim, n_embd] output-gate input of the gated norm
    cpu::Weight in_b;             // [n_v_heads, n_embd] -> beta = sigmoid(b)
    cpu::Weight in_a;             // [n_v_heads, n_embd] -> g = -exp(A_log) softplus(a + dt_bias)
    const float* conv = nullptr;  // [conv_dim, kernel] depthwise causal conv (conv1d.weight [C, 1, K])
    const float* dt_bias = nullptr;  // [n_v_heads]
    const float* a_log = nullptr;    // [n_v_heads]
    const float* norm = nullptr;     // [d_v] RMSNormGated weight (plain, not zero-centred)
    cpu::Weight out;                 // [n_embd, value_dim]
};

// A SwiGLU MLP (Ffn::kSwiglu), one routed expert, or the shared expert.
struct SwigluWeights {
    cpu::Weight gate, up;           // [n_ff, n_embd]
    cpu::Weight down;               // [n_embd, n_ff]
    const float* b_gate = nullptr;  // [n_ff]   (optional; never in experts)
    const float* b_up = nullptr;    // [n_ff]
    const float* b_down = nullptr;  // [n_embd]
};

// Routed experts + a sigmoid-gated shared expert (Ffn::kMoe).
struct MoeWeights {
    cpu::Weight router;  // [n_expert, n_embd] (mlp.gate.weight)
    std::vector<SwigluWeights> experts;
    SwigluWeights shared;     // [n_ff_shared]
    cpu::Weight shared_gate;  // [1, n_embd] (mlp.shared_expert_gate.weight)
};

// One layer: kind.mixer picks attn or linear, kind.ffn picks mlp or moe (the others stay empty).
struct LayerWeights {
    LayerKind kind;
    const float* attn_norm = nullptr;  // [n_embd] (zero-centred when hp.norm_weight is kOnePlus)
    const float* ffn_norm = nullptr;   // [n_embd]
    AttentionWeights attn;
    DeltaNetWeights linear;
    SwigluWeights mlp;
    MoeWeights moe;
};

// Multi-token prediction block (Qwen3.5 mtp.*): present only when the file has it.
struct MtpWeights {
    bool present = false;
    cpu::Weight fc;                      // [n_embd, 2 n_embd]: input concat(norm_embd(e), norm_hidden(h))
    const float* norm_embd = nullptr;    // [n_embd] pre_fc_norm_embedding, zero-centred
    const float* norm_hidden = nullptr;  // [n_embd] pre_fc_norm_hidden, zero-centred
    const float* norm = nullptr;         // [n_embd] mtp.norm, zero-centred (before the shared lm_head)
    std::vector<LayerWeights> layers;    // {kGatedAttention, the stack's FFN} decoder layers (mtp.layers.N.*)
};

struct ModelWeights {
    // ne = {n_embd, n_vocab}, any dtype with a to_float row conversion: a view of the file, or of
    // the tied head's copy (share_tied_embedding).
    Tensor tok_embd;
    const float* output_norm = nullptr;  // [n_embd]
    cpu::Weight output;                  // [n_vocab, n_embd]; token_embd when the file has no output
    bool tied_output = false;
    std::vector<LayerWeights> layers;  // [n_layer], kinds as hp.layer
    MtpWeights mtp;
    std::vector<Buffer> owned;      // fp32 copies of the norms and biases; gathered rows a Weight views
    std::deque<std::string> names;  // names of tensor views made on load (Tensor::name is a view)
    std::string prefix;             // HF Qwen3.5 folders: "model.language_model." or "model."
    std::vector<float> rope_freq_factors;  // GGUF rope_freqs.weight ([rope_dim/2]) or empty
};

struct WeightLoadOptions {
    // Let the CPU backend repack Q4_0/Q8_0 for its kernels and copy the other matrices into
    // huge-page memory (cpu::Weight::prepare's own_copy), releasing the mapped pages they came from.
    bool allow_repack = true;
};

// A tied head (w.tied_output) that the CPU copied in the embedding's own row layout (GGUF rows,
// not repacked) holds the embedding's bytes: points w.tok_embd at that copy, so lookups read the
// one copy held and never fault the released mapping back in. Otherwise nothing changes (a
// repacked head, or a view for the GPU: the embedding stays a view of the file).
void share_tied_embedding(ModelWeights& w);

// The Qwen3.5 naming scheme (LayerPlan::kLayerTypes; model/qwen35_weights.cpp): HF folders (tensors under
// "model.language_model." or "model.", "lm_head.weight", the optional "mtp.*" block; routed experts fused
// as mlp.experts.gate_up_proj [E, 2I, H] / down_proj [E, H, I] or per expert) and llama.cpp's GGUF names.
// Zero-centred norms are kept as stored (y = x/rms * (1 + w)); the DeltaNet's gated norm weight is plain.
// load_weights forwards to it.
Expected<ModelWeights> load_qwen35_weights(const WeightSource& src, ModelHParams& hp,
                                           const WeightLoadOptions& opt);

// Loads and checks every tensor of every layer for hp (hp.n_vocab is set from token_embd when 0, and
// checked against it otherwise), by hp.arch's layer plan. Errors name the tensor as the file spells it,
// with the expected and found shapes.
Expected<ModelWeights> load_weights(const WeightSource& src, ModelHParams& hp,
                                    const WeightLoadOptions& opt = {});

}  // namespace pelican
