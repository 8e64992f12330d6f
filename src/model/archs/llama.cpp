// Llama 2 / Llama 3 (and every "LlamaForCausalLM"): the plain shared block.
//  - RMSNorm, GQA attention, SwiGLU MLP; optional q/k/v/o and MLP biases (config attention_bias /
//    mlp_bias), loaded when the file has them.
//  - Rope scaling: "linear", "llama3" (per-frequency smoothing) and "yarn" from config.json
//    rope_scaling; GGUF files carry llama3 scaling as the rope_freqs.weight tensor and yarn/linear
//    as llama.rope.scaling.* keys (model/rope_freq.h).
//  - Rope layout: HF checkpoints use NeoX rope. llama.cpp's converter permutes the q/k rows
//    (model/rope_permute.h), so GGUF llama files use the interleaved ("normal") rope.
#include "model/arch.h"

namespace pelican {

const ArchSpec& arch_llama() {
    static constexpr std::string_view gguf[] = {"llama"};
    static constexpr std::string_view hf[] = {"llama"};
    static const ArchSpec spec{
        .name = "llama",
        .gguf_names = gguf,
        .hf_model_types = hf,
        .gguf_write_name = "llama",
        .gguf_rope = RopeLayout::kInterleaved,
    };
    return spec;
}

}  // namespace pelican
