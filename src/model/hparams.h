// Hyper-parameters of a dense Llama-family model, read once from GGUF "<arch>.*" keys or from
// config.json (formats/hf_config.h), validated, and immutable afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "model/arch.h"
#include "model/hybrid_hparams.h"

namespace pelican {

struct ModelHParams {
    const ArchSpec* arch = nullptr;
    int64_t n_vocab = 0;      // rows of token_embd (set by the weight loader when the file has no key)
    int64_t n_embd = 0;       // hidden size
    int64_t n_layer = 0;      // transformer blocks
    int64_t n_head = 0;       // query heads
    int64_t n_head_kv = 0;    // key/value heads (divides n_head)
    int64_t head_dim = 0;     // per-head width of q/k/v
    int64_t n_ff = 0;         // MLP intermediate width
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

    // Qwen3.5 hybrid stack only (arch->hybrid): layer kinds, DeltaNet heads, experts.
    std::optional<HybridHParams> hybrid;

    int64_t q_dim() const { return n_head * head_dim; }
    int64_t kv_dim() const { return n_head_kv * head_dim; }
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
// The same for the hybrid Qwen3.5 archs (model/hybrid_hparams.cpp); hparams_from_hf forwards to it.
Expected<ModelHParams> hybrid_hparams_from_hf(const HfConfig& c, const ArchSpec& arch,
                                              std::string_view source);

// Shared checks (positive sizes, head divisibility, rope dims); called by both readers.
Status validate_hparams(const ModelHParams& hp, std::string_view source);

}  // namespace pelican
