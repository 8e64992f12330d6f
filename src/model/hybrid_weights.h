// Weights of the hybrid Qwen3.5 stack (model/archs/qwen3_5.cpp), loaded from a Hugging Face folder:
// tensors under "model.language_model." (the multimodal checkpoints) or "model." (text-only
// *ForCausalLM), "lm_head.weight", and the optional "mtp.*" block. Routed experts come fused
// (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]; no ".weight") or per expert
// (mlp.experts.{e}.{gate,up,down}_proj.weight); both become one cpu::Weight per expert matrix (a
// view, or with allow_repack an owned copy whose mapped pages are released, as in weights.h).
// Norm vectors are owned fp32 copies (converted when stored narrower); zero-centred norms are kept
// as stored (y = x/rms * (1 + w)); the DeltaNet's gated norm weight is plain.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/buffer.h"
#include "core/status.h"
#include "model/hparams.h"
#include "model/weight_source.h"
#include "model/weights.h"

namespace pelican {

// Gated DeltaNet mixer (linear_attn.*).
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

// Gated full attention (self_attn.*).
struct GatedAttentionWeights {
    cpu::Weight wq;      // [n_head * 2 * head_dim, n_embd]: per head head_dim query rows, then gate rows
    cpu::Weight wk, wv;  // [kv_dim, n_embd]
    cpu::Weight wo;      // [n_embd, q_dim]
    const float* q_norm = nullptr;  // [head_dim] zero-centred
    const float* k_norm = nullptr;  // [head_dim] zero-centred
};

// A SwiGLU MLP: the dense MLP of qwen3_5, one routed expert, or the shared expert.
struct SwigluWeights {
    cpu::Weight gate, up;  // [n_ff, n_embd]
    cpu::Weight down;      // [n_embd, n_ff]
};

struct MoeWeights {
    cpu::Weight router;  // [n_expert, n_embd] (mlp.gate.weight)
    std::vector<SwigluWeights> experts;
    SwigluWeights shared;     // [n_ff_shared]
    cpu::Weight shared_gate;  // [1, n_embd] (mlp.shared_expert_gate.weight)
};

struct HybridLayerWeights {
    bool full_attention = false;
    const float* attn_norm = nullptr;  // [n_embd] input_layernorm, zero-centred
    const float* ffn_norm = nullptr;   // [n_embd] post_attention_layernorm, zero-centred
    DeltaNetWeights linear;            // when !full_attention
    GatedAttentionWeights attn;        // when full_attention
    SwigluWeights mlp;                 // dense qwen3_5
    MoeWeights moe;                    // qwen3_5_moe
};

// Multi-token prediction block (mtp.*): present only when the folder has mtp.fc.weight.
struct MtpWeights {
    bool present = false;
    cpu::Weight fc;                          // [n_embd, 2 n_embd]: input concat(norm_embd(e), norm_hidden(h))
    const float* norm_embd = nullptr;        // [n_embd] pre_fc_norm_embedding, zero-centred
    const float* norm_hidden = nullptr;      // [n_embd] pre_fc_norm_hidden, zero-centred
    const float* norm = nullptr;             // [n_embd] mtp.norm, zero-centred (before the shared lm_head)
    std::vector<HybridLayerWeights> layers;  // full-attention decoder layers (mtp.layers.N.*)
};

struct HybridWeights {
    std::vector<HybridLayerWeights> layers;
    MtpWeights mtp;
    std::string prefix;             // "model.language_model." or "model."
    std::vector<Buffer> owned;      // fp32 copies of the vectors; gathered rows a Weight views
    std::deque<std::string> names;  // names of per-expert tensor views (Tensor::name is a view)
};

// Loads the hybrid stack from an HF folder: the shared parts (token embedding, final norm, LM head)
// into `base` (base.layers stays empty) and everything else into the result. Errors name the tensor
// as the file spells it, with expected and found shapes.
Expected<HybridWeights> load_hybrid_weights(const WeightSource& src, ModelHParams& hp, ModelWeights& base,
                                            const WeightLoadOptions& opt = {});

}  // namespace pelican
