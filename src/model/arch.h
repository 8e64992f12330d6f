// Architecture registry. An architecture is DATA: which GGUF/HF names identify it, the rope
// layout of its GGUF files and which variants of the shared dense-transformer block apply.
// The block itself (RMSNorm -> GQA attention with rope -> residual -> RMSNorm -> SwiGLU MLP ->
// residual) lives once, in backend/cpu/cpu_executor_layer.cpp (and its CUDA mirror); its tensors are declared
// once in model/weights.cpp. One small file per architecture in model/archs/.
#pragma once

#include <span>
#include <string_view>

#include "ops/ops.h"  // RopeLayout

namespace pelican {

// Rope layouts (ops/ops.h RopeLayout): kInterleaved pairs (2i, 2i+1) in GGUF llama/mistral/granite,
// whose q/k rows llama.cpp's converter permutes (model/rope_permute.h); kNeox halves
// (i, i + rot/2), HF "rotate_half", in every HF checkpoint and in GGUF qwen2/qwen3.
std::string_view rope_layout_name(RopeLayout l);

// Whether a tensor of the shared block is absent, optional (loaded when present) or required.
enum class Need { No, Optional, Required };

struct ArchSpec {
    std::string_view name;                             // pelican's id, also the GGUF general.architecture
    std::span<const std::string_view> gguf_names;      // general.architecture values read as this arch
    std::span<const std::string_view> hf_model_types;  // config.json model_type values
    std::string_view gguf_write_name;  // general.architecture when converting to GGUF (llama.cpp's name)
    RopeLayout gguf_rope;              // rope layout of GGUF files of this arch
    Need qkv_bias = Need::Optional;    // attn_{q,k,v}.bias
    Need out_bias = Need::Optional;    // attn_output.bias
    Need mlp_bias = Need::Optional;    // ffn_{gate,up,down}.bias
    Need qk_norm = Need::No;           // attn_{q,k}_norm: per-head RMSNorm on q and k before rope (qwen3)
    bool scalar_multipliers = false;   // granite: embedding / residual / attention / logit multipliers
    bool sliding_window = false;  // apply config.json sliding_window (mistral); GGUF: whenever the key is set
    bool hybrid = false;  // Qwen3.5 hybrid stack (model/hybrid_*): its own hparams, weights and forward pass
};

// Lookups; nullptr when unknown.
const ArchSpec* find_arch_by_gguf(std::string_view general_architecture);
const ArchSpec* find_arch_by_hf_model_type(std::string_view model_type);
// Every registered architecture, in registration order.
std::span<const ArchSpec* const> all_archs();
// "llama, mistral, qwen2, qwen3, granite, ...": for error messages.
std::string_view supported_arch_list();

// Defined in model/archs/<name>.cpp.
const ArchSpec& arch_llama();
const ArchSpec& arch_mistral();
const ArchSpec& arch_qwen2();
const ArchSpec& arch_qwen3();
const ArchSpec& arch_granite();
const ArchSpec& arch_qwen35moe();  // hybrid (model/archs/qwen3_5.cpp)
const ArchSpec& arch_qwen35();
const ArchSpec& arch_qwen3next();

}  // namespace pelican
