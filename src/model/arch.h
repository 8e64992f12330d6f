// Architecture registry. An architecture is DATA: which GGUF/HF names identify it, the rope
// layout of its GGUF files, which optional tensors of its layers apply, and how its per-layer kinds
// (model/layer_kind.h) are read. The blocks themselves (RMSNorm -> mixer -> residual -> RMSNorm -> FFN
// -> residual) live once per backend, in its executor; their tensors are declared once per naming
// scheme (model/weights.cpp, model/qwen35_weights.cpp). One small file per architecture in model/archs/.
#pragma once

#include <span>
#include <string_view>

#include "model/layer_kind.h"
#include "ops/ops.h"  // RopeLayout

namespace pelican {

// Rope layouts (ops/ops.h RopeLayout): kInterleaved pairs (2i, 2i+1) in GGUF llama/mistral/granite,
// whose q/k rows llama.cpp's converter permutes (model/rope_permute.h); kNeox halves
// (i, i + rot/2), HF "rotate_half", in every HF checkpoint and in GGUF qwen2/qwen3.
std::string_view rope_layout_name(RopeLayout l);

// Whether a tensor of the shared block is absent, optional (loaded when present) or required.
enum class Need { No, Optional, Required };

enum class LayerPlan : uint8_t {
    kUniform,     // every layer {kAttention, kSwiglu}, plain norms; llama.cpp's blk.N.* / HF's Llama names
    kLayerTypes,  // the Qwen3.5 stack: layer_types (HF) or attention.recurrent_layers /
                  // full_attention_interval (GGUF) choose kGatedAttention or kDeltaNet per layer;
                  // zero-centred norms; an optional MTP block; weights by model/qwen35_weights.cpp
};

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
    // Which reader builds the per-layer kinds (ModelHParams::layer) and which tensor names hold their
    // weights. Nothing after the loaders reads this: the executors run the layers by their kinds.
    LayerPlan layer_plan = LayerPlan::kUniform;
    Ffn ffn = Ffn::kSwiglu;  // the FFN kind of every layer (kLayerTypes plans)
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
