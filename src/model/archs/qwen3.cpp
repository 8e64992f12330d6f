// Qwen3 (dense): the llama block plus a per-head RMSNorm on q and on k (weights [head_dim],
// attn_q_norm / attn_k_norm) applied after the projections and before rope; no biases by default.
// head_dim is explicit (config head_dim, GGUF qwen3.attention.key_length) and may differ from
// hidden_size / num_attention_heads.
// Rope layout: NeoX in both HF and GGUF (llama.cpp does not permute qwen3's q/k rows).
#include "model/arch.h"

namespace pelican {

const ArchSpec& arch_qwen3() {
    static constexpr std::string_view gguf[] = {"qwen3"};
    static constexpr std::string_view hf[] = {"qwen3"};
    static const ArchSpec spec{
        .name = "qwen3",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "qwen3",
        .gguf_rope = RopeLayout::kNeox,
        .qk_norm = Need::Required,
    };
    return spec;
}

}  // namespace pelican
