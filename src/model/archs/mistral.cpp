// Mistral (MistralForCausalLM): the llama block, read from config.json model_type "mistral".
// llama.cpp converts Mistral checkpoints to GGUF architecture "llama" (q/k permuted, normal rope),
// so a GGUF Mistral loads as arch llama; "mistral" is also accepted as a GGUF name.
// Sliding-window attention (config sliding_window, e.g. 4096 in Mistral 7B v0.1; GGUF
// <arch>.attention.sliding_window when present) is applied: a token attends to the last
// `window` positions. llama.cpp's GGUFs carry no window, so they run with full attention.
#include "model/arch.h"

namespace pelican {

const ArchSpec& arch_mistral() {
    static constexpr std::string_view gguf[] = {"mistral"};
    static constexpr std::string_view hf[] = {"mistral"};
    static const ArchSpec spec{
        .name = "mistral",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "llama",
        .gguf_rope = RopeLayout::kInterleaved,
        .sliding_window = true,
    };
    return spec;
}

}  // namespace pelican
