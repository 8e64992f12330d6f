// Hugging Face config.json -> typed hyper-parameters.
// Multimodal configs (e.g. qwen3_5_moe) keep the language model in "text_config": keys are looked up
// there first, then at the top level. Absent or null keys take transformers' defaults; keys of the
// wrong JSON type are errors that name the key. The parsed JSON stays available in raw/text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pelican {

// RoPE frequency scaling ("rope_scaling", or the non-default parts of "rope_parameters").
struct RopeScaling {
    std::string type;                        // "linear", "dynamic", "yarn", "llama3", "longrope", ...
    double factor = 1.0;                     // context extension factor
    std::optional<double> low_freq_factor;   // llama3
    std::optional<double> high_freq_factor;  // llama3
    std::optional<int64_t> original_max_position_embeddings;  // llama3 / yarn / longrope
    std::optional<double> attention_factor;                   // yarn / longrope
    std::optional<double> beta_fast, beta_slow;               // yarn
    std::vector<int64_t> mrope_section;                       // multimodal rope (qwen2-vl / qwen3.5)
    bool mrope_interleaved = false;
};

struct HfConfig {
    std::string model_type;        // of the language model ("qwen3_5_moe_text" inside text_config)
    std::string outer_model_type;  // top-level model_type (equals model_type without text_config)
    std::vector<std::string> architectures;
    bool has_text_config = false;

    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;  // dense MLP width (0 when absent, e.g. all-MoE models)
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;  // default: num_attention_heads
    int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
    int64_t vocab_size = 0;
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;  // also read from layer_norm_eps / layer_norm_epsilon
    std::string hidden_act = "silu";

    // RoPE
    double rope_theta = 10000.0;              // top level or rope_parameters.rope_theta
    double partial_rotary_factor = 1.0;       // fraction of head_dim that is rotated
    std::optional<RopeScaling> rope_scaling;  // absent for plain rope

    bool tie_word_embeddings = false;
    std::vector<int64_t> bos_token_ids;  // config.json allows an int or a list
    std::vector<int64_t> eos_token_ids;
    std::optional<int64_t> pad_token_id;
    std::string torch_dtype;  // "bfloat16", ... ("dtype" in newer configs); empty if absent
    bool attention_bias = false;
    bool mlp_bias = false;
    std::optional<int64_t> sliding_window;  // set only when sliding attention is in use

    // granite scalars
    double embedding_multiplier = 1.0;
    double residual_multiplier = 1.0;
    std::optional<double> attention_multiplier;  // softmax scale; default 1/sqrt(head_dim)
    double logits_scaling = 1.0;                 // logits are divided by this

    // mixture of experts (0 when dense)
    int64_t num_experts = 0;  // also num_local_experts / n_routed_experts
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    int64_t shared_expert_intermediate_size = 0;
    bool norm_topk_prob = false;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;

    // Qwen3.5 / Qwen3-Next hybrid attention
    std::vector<std::string> layer_types;  // per layer: "full_attention", "linear_attention", ...
    int64_t full_attention_interval = 0;
    int64_t linear_num_key_heads = 0;
    int64_t linear_num_value_heads = 0;
    int64_t linear_key_head_dim = 0;
    int64_t linear_value_head_dim = 0;
    int64_t linear_conv_kernel_dim = 0;
    int64_t mtp_num_hidden_layers = 0;
    bool attn_output_gate = false;

    // quantization_config.quant_method ("gptq", "auto-round", "fp8", ...); empty if unquantized
    std::string quant_method;

    std::shared_ptr<const nlohmann::json> raw;   // the whole config.json
    std::shared_ptr<const nlohmann::json> text;  // text_config when present, else the same as raw

    bool is_moe() const { return num_experts > 0; }
    // Rotated dimensions per head: head_dim * partial_rotary_factor.
    int64_t rotary_dim() const;
};

// Parses config.json text; `source` names the file in errors.
Expected<HfConfig> parse_hf_config(std::string_view json_text, std::string_view source = "config.json");
// Reads `path` (a config.json, or a folder holding one).
Expected<HfConfig> load_hf_config(const std::string& path);

}  // namespace pelican
