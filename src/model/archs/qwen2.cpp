// Qwen2 / Qwen2.5: the llama block with REQUIRED q/k/v biases (no o_proj bias).
// Rope layout: NeoX in both HF and GGUF (llama.cpp does not permute qwen2's q/k rows).
// Qwen2 configs name a sliding window but released models set use_sliding_window false: ignored.
#include "model/arch.h"

namespace pelican {

const ArchSpec& arch_qwen2() {
    static constexpr std::string_view gguf[] = {"qwen2"};
    static constexpr std::string_view hf[] = {"qwen2"};
    static const ArchSpec spec{
        .name = "qwen2",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "qwen2",
        .gguf_rope = RopeLayout::kNeox,
        .qkv_bias = Need::Required,
    };
    return spec;
}

}  // namespace pelican
