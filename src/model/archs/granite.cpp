// Granite (3.x dense): the llama block with four scalars (model/hparams.h):
//   embedding_multiplier  scales the token embeddings       (GGUF granite.embedding_scale)
//   residual_multiplier   scales each block's output before it is added to the residual
//                                                            (GGUF granite.residual_scale)
//   attention_multiplier  is the softmax scale, replacing 1/sqrt(head_dim) (granite.attention.scale)
//   logits_scaling        divides the logits                 (GGUF granite.logit_scale)
// Rope layout: like llama, llama.cpp permutes q/k, so GGUF granite uses normal rope, HF NeoX.
#include "model/arch.h"

namespace pelican {

const ArchSpec& arch_granite() {
    static constexpr std::string_view gguf[] = {"granite"};
    static constexpr std::string_view hf[] = {"granite"};
    static const ArchSpec spec{
        .name = "granite",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "granite",
        .gguf_rope = RopeLayout::kInterleaved,
        .scalar_multipliers = true,
    };
    return spec;
}

}  // namespace pelican
