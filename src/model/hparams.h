// Hyper-parameters of a model, read once from GGUF "<arch>.*" keys or from config.json
// (formats/hf_config.h), validated, and immutable afterwards: the shared sizes, rope and attention
// settings, and per layer its kinds (model/layer_kind.h) with the parameters of the kinds present.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "model/arch.h"
#include "model/layer_kind.h"
#include "ops/ops.h"         // NormWeight
#include "ops/ops_qwen35.h"  // DeltaNetShape

namespace pelican {

// Gated DeltaNet layers (Mixer::kDeltaNet).
struct DeltaNetHParams {
    DeltaNetShape linear;  // heads (linear_num_{key,value}_heads, *_head_dim)
    int conv_kernel = 4;   // linear_conv_kernel_dim
};

// MoE layers (Ffn::kMoe).
struct MoeHParams {
    int n_expert = 0;         // num_experts
    int n_expert_used = 0;    // num_experts_per_tok (weights always renormalised)
    int64_t n_ff_expert = 0;  // moe_intermediate_size
    int64_t n_ff_shared = 0;  // shared_expert_intermediate_size
};

struct ModelHParams {
    const ArchSpec* arch = nullptr;
    int64_t n_vocab = 0;      // rows of token_embd (set by the weight loader when the file has no key)
    int64_t n_embd = 0;       // hidden size
    int64_t n_layer = 0;      // transformer blocks
    int64_t n_head = 0;       // query heads
    int64_t n_head_kv = 0;    // key/value heads (divides n_head)
    int64_t head_dim = 0;     // per-head width of q/k/v
    int64_t n_ff = 0;         // SwiGLU intermediate width (MoE models: n_ff_expert)
    int64_t n_ctx_train = 0;  // training context (0 when unknown)
    float rms_eps = 1e-6f;

    // Rope: the first rope_dim dims of each q/k head rotate; angle(pos, i) = pos * inv_freq[i].
    RopeLayout rope_layout = RopeLayout::kNeox;
    int64_t rope_dim = 0;
    double rope_theta = 10000.0;
    std::vector<float> inv_freq;    // [rope_dim / 2], scaling applied (model/rope_freq.h)
    float rope_attn_factor = 1.0f;  // multiplies cos and sin (yarn)
    std::string rope_scaling;       // "" or the scaling type, for printing

    // Attention
    float attn_scale = 0.0f;     // softmax scale: 1/sqrt(head_dim), or granite's attention_multiplier
    int64_t sliding_window = 0;  // 0 = full causal attention

    // Granite multipliers (1 elsewhere).
    float embd_scale = 1.0f;      // token embeddings *= embd_scale
    float residual_scale = 1.0f;  // each block output *= residual_scale before the residual add
    float logit_scale = 1.0f;     // logits *= logit_scale (= 1 / HF logits_scaling)

    // Per layer: its mixer and FFN ([n_layer]); the parameters of the kinds present.
    std::vector<LayerKind> layer;
    NormWeight norm_weight =
        NormWeight::kPlain;    // every RMSNorm's weight: w, or 1 + w (zero-centred, Qwen3.5)
    DeltaNetHParams deltanet;  // when a layer is Mixer::kDeltaNet
    MoeHParams moe;            // when a layer is Ffn::kMoe
    int64_t n_mtp_layers = 0;  // multi-token-prediction layers after the stack (optional weights)

    int64_t q_dim() const { return n_head * head_dim; }
    int64_t kv_dim() const { return n_head_kv * head_dim; }
    int64_t count(Mixer m) const {
        int64_t n = 0;
        for (const LayerKind& k : layer) n += k.mixer == m;
        return n;
    }
    bool has(Mixer m) const { return count(m) > 0; }
    bool has(Ffn f) const {
        for (const LayerKind& k : layer)
            if (k.ffn == f) return true;
        return false;
    }
    int64_t n_kv_layers() const {  // layers whose K/V rows live in the sequence memory's pages
        int64_t n = 0;
        for (const LayerKind& k : layer) n += uses_kv(k.mixer);
        return n;
    }
    // Every layer {kAttention, kSwiglu} with plain norms: the shared Llama-family block.
    bool uniform_attention() const {
        for (const LayerKind& k : layer)
            if (!(k == LayerKind{})) return false;
        return norm_weight == NormWeight::kPlain;
    }
};

// From a GGUF file whose general.architecture maps to `arch`. n_vocab is taken from
// "<arch>.vocab_size" if present, else left 0 for the weight loader. Errors name the file and key.
Expected<ModelHParams> hparams_from_gguf(const GgufFile& f, const ArchSpec& arch);
// From a parsed config.json. Rope layout is always NeoX (HF checkpoints are not permuted).
Expected<ModelHParams> hparams_from_hf(const HfConfig& c, const ArchSpec& arch, std::string_view source);

// The fields every config.json reader shares (sizes, eps, rope dims and theta, NeoX layout,
// 1/sqrt(head_dim) attention scale); errors: an activation other than silu.
Expected<ModelHParams> hparams_common_from_hf(const HfConfig& c, const ArchSpec& arch,
                                              std::string_view source);
// The same for the Qwen3.5 layer plan (model/qwen35_hparams.cpp); hparams_from_hf forwards to it.
Expected<ModelHParams> qwen35_hparams_from_hf(const HfConfig& c, const ArchSpec& arch,
                                              std::string_view source);

// Shared checks (positive sizes, head divisibility, rope dims, one kind per layer); called by both readers.
Status validate_hparams(const ModelHParams& hp, std::string_view source);

}  // namespace pelican
