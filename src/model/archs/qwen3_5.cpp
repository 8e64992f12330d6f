// Qwen3.5 hybrid stack (qwen3_5_moe, dense qwen3_5): per layer a zero-centred RMSNorm, then either a
// Gated DeltaNet (three layers in four) or gated full attention (per-head interleaved query/gate
// projection, zero-centred q/k norms, partial NeoX rope), then a zero-centred RMSNorm and a routed-
// experts + sigmoid-gated shared-expert MLP (qwen3_5_moe) or a SwiGLU MLP (qwen3_5). Its layer plan
// (LayerPlan::kLayerTypes) is read by model/qwen35_hparams.cpp and model/hparams.cpp, its weights by
// model/qwen35_weights.cpp; GGUF names are llama.cpp's (qwen35moe, qwen35), written by
// convert/convert_hybrid.cpp.
#include "model/arch.h"

namespace pelican {

const ArchSpec& arch_qwen35moe() {
    static constexpr std::string_view gguf[] = {"qwen35moe"};
    static constexpr std::string_view hf[] = {"qwen3_5_moe_text", "qwen3_5_moe"};
    static const ArchSpec spec{
        .name = "qwen35moe",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "qwen35moe",
        .gguf_rope = RopeLayout::kNeox,
        .qk_norm = Need::Required,
        .layer_plan = LayerPlan::kLayerTypes,
        .ffn = Ffn::kMoe,
    };
    return spec;
}

const ArchSpec& arch_qwen35() {
    static constexpr std::string_view gguf[] = {"qwen35"};
    static constexpr std::string_view hf[] = {"qwen3_5_text", "qwen3_5"};
    static const ArchSpec spec{
        .name = "qwen35",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "qwen35",
        .gguf_rope = RopeLayout::kNeox,
        .qk_norm = Need::Required,
        .layer_plan = LayerPlan::kLayerTypes,
    };
    return spec;
}

// Qwen3-Next (HF qwen3_next, e.g. Qwen3-Next-80B-A3B): the same hybrid MoE stack; its DeltaNet input
// projections come fused and grouped per key head (in_proj_qkvz, in_proj_ba), split on load
// (model/qwen35_weights.cpp). Hugging Face folders only: no GGUF read or write yet.
const ArchSpec& arch_qwen3next() {
    static constexpr std::string_view hf[] = {"qwen3_next"};
    static const ArchSpec spec{
        .name = "qwen3next",
        .gguf_names = {},
        .hf_model_types = hf,
        .gguf_write_name = "",
        .gguf_rope = RopeLayout::kNeox,
        .qk_norm = Need::Required,
        .layer_plan = LayerPlan::kLayerTypes,
        .ffn = Ffn::kMoe,
    };
    return spec;
}

}  // namespace pelican
