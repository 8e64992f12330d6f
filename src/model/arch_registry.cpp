// The list of supported architectures (model/arch.h).
#include <array>

#include "model/arch.h"

namespace pelican {

std::string_view rope_layout_name(RopeLayout l) { return l == RopeLayout::kInterleaved ? "normal" : "neox"; }

std::span<const ArchSpec* const> all_archs() {
    static const std::array<const ArchSpec*, 8> archs{&arch_llama(),  &arch_mistral(),  &arch_qwen2(),
                                                      &arch_qwen3(),  &arch_granite(),  &arch_qwen35moe(),
                                                      &arch_qwen35(), &arch_qwen3next()};
    return archs;
}

std::string_view supported_arch_list() {
    return "llama, mistral, qwen2, qwen3, granite, qwen3_5_moe, qwen3_5, qwen3_next";
}

const ArchSpec* find_arch_by_gguf(std::string_view general_architecture) {
    for (const ArchSpec* a : all_archs())
        for (std::string_view n : a->gguf_names)
            if (n == general_architecture) return a;
    return nullptr;
}

const ArchSpec* find_arch_by_hf_model_type(std::string_view model_type) {
    for (const ArchSpec* a : all_archs())
        for (std::string_view n : a->hf_model_types)
            if (n == model_type) return a;
    return nullptr;
}

}  // namespace pelican
