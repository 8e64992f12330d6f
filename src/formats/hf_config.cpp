#include "formats/hf_config.h"

#include <cmath>
#include <filesystem>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"

namespace pelican {
namespace {

using json = nlohmann::json;

// Typed lookups over text_config (first) and the top level (second). Null counts as absent.
struct Keys {
    const json& text;
    const json& root;
    std::string src;

    const json* find_in(const json& obj, std::string_view key) const {
        if (!obj.is_object()) return nullptr;
        auto it = obj.find(key);
        return (it == obj.end() || it->is_null()) ? nullptr : &*it;
    }
    const json* find(std::string_view key) const {
        if (const json* v = find_in(text, key)) return v;
        return &text == &root ? nullptr : find_in(root, key);
    }
    Error type_error(std::string_view key, std::string_view want, const json& v) const {
        return make_error("{}: key '{}' must be {}, found {} ({})", src, key, want, v.type_name(),
                          v.dump().substr(0, 60));
    }

    Expected<int64_t> to_int(std::string_view key, const json& v) const {
        if (v.is_number_integer()) {
            if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})
                return type_error(key, "a 64-bit integer", v);
            return v.get<int64_t>();
        }
        if (v.is_number_float()) {
            double d = v.get<double>();
            if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
        }
        return type_error(key, "an integer", v);
    }
    Expected<double> to_double(std::string_view key, const json& v) const {
        if (v.is_number()) return v.get<double>();
        return type_error(key, "a number", v);
    }

    Status get(std::string_view key, int64_t& out) const {
        if (const json* v = find(key)) {
            PELICAN_ASSIGN(out, to_int(key, *v));
        }
        return {};
    }
    Status get(std::string_view key, std::optional<int64_t>& out) const {
        if (const json* v = find(key)) {
            PELICAN_ASSIGN(out, to_int(key, *v));
        }
        return {};
    }
    Status get(std::string_view key, double& out) const {
        if (const json* v = find(key)) {
            PELICAN_ASSIGN(out, to_double(key, *v));
        }
        return {};
    }
    Status get(std::string_view key, std::optional<double>& out) const {
        if (const json* v = find(key)) {
            PELICAN_ASSIGN(out, to_double(key, *v));
        }
        return {};
    }
    Status get(std::string_view key, bool& out) const {
        if (const json* v = find(key)) {
            if (!v->is_boolean()) return type_error(key, "true or false", *v);
            out = v->get<bool>();
        }
        return {};
    }
    Status get(std::string_view key, std::string& out) const {
        if (const json* v = find(key)) {
            if (!v->is_string()) return type_error(key, "a string", *v);
            out = v->get<std::string>();
        }
        return {};
    }
    // An integer or a list of integers.
    Status get(std::string_view key, std::vector<int64_t>& out) const {
        const json* v = find(key);
        if (!v) return {};
        out.clear();
        if (!v->is_array()) {
            PELICAN_ASSIGN(int64_t x, to_int(key, *v));
            out.push_back(x);
            return {};
        }
        for (const auto& e : *v) {
            PELICAN_ASSIGN(int64_t x, to_int(key, e));
            out.push_back(x);
        }
        return {};
    }
    Status get(std::string_view key, std::vector<std::string>& out) const {
        const json* v = find(key);
        if (!v) return {};
        if (!v->is_array()) return type_error(key, "a list of strings", *v);
        out.clear();
        for (const auto& e : *v) {
            if (!e.is_string()) return type_error(key, "a list of strings", *v);
            out.push_back(e.get<std::string>());
        }
        return {};
    }
    // First present key of several aliases.
    template <typename T>
    Status get_any(std::initializer_list<std::string_view> keys, T& out) const {
        for (auto k : keys)
            if (find(k)) return get(k, out);
        return {};
    }
};

Status parse_rope(const Keys& k, HfConfig& c) {
    PELICAN_TRY(k.get("rope_theta", c.rope_theta));
    PELICAN_TRY(k.get("partial_rotary_factor", c.partial_rotary_factor));
    const json* params = k.find("rope_parameters");
    if (params && !params->is_object()) return k.type_error("rope_parameters", "an object", *params);
    const json* scaling = k.find("rope_scaling");
    if (scaling && !scaling->is_object()) return k.type_error("rope_scaling", "an object", *scaling);
    if (params) {
        Keys p{*params, *params, k.src + " rope_parameters"};
        PELICAN_TRY(p.get("rope_theta", c.rope_theta));
        PELICAN_TRY(p.get("partial_rotary_factor", c.partial_rotary_factor));
    }
    const json* obj = scaling ? scaling : params;
    if (!obj) return {};
    Keys s{*obj, *obj, k.src + (scaling ? " rope_scaling" : " rope_parameters")};
    RopeScaling r;
    PELICAN_TRY(s.get_any({"rope_type", "type"}, r.type));
    PELICAN_TRY(s.get("mrope_section", r.mrope_section));
    if ((r.type.empty() || r.type == "default") && r.mrope_section.empty()) return {};
    PELICAN_TRY(s.get("factor", r.factor));
    PELICAN_TRY(s.get("low_freq_factor", r.low_freq_factor));
    PELICAN_TRY(s.get("high_freq_factor", r.high_freq_factor));
    PELICAN_TRY(s.get("original_max_position_embeddings", r.original_max_position_embeddings));
    PELICAN_TRY(s.get("attention_factor", r.attention_factor));
    PELICAN_TRY(s.get("beta_fast", r.beta_fast));
    PELICAN_TRY(s.get("beta_slow", r.beta_slow));
    PELICAN_TRY(s.get("mrope_interleaved", r.mrope_interleaved));
    if (!(r.factor > 0) || !std::isfinite(r.factor))
        return make_error("{}: rope scaling factor must be positive, found {}", k.src, r.factor);
    c.rope_scaling = std::move(r);
    return {};
}

Status parse_fields(const Keys& k, HfConfig& c) {
    PELICAN_TRY(k.get("hidden_size", c.hidden_size));
    PELICAN_TRY(k.get("intermediate_size", c.intermediate_size));
    PELICAN_TRY(k.get("num_hidden_layers", c.num_hidden_layers));
    PELICAN_TRY(k.get("num_attention_heads", c.num_attention_heads));
    PELICAN_TRY(k.get("num_key_value_heads", c.num_key_value_heads));
    PELICAN_TRY(k.get("head_dim", c.head_dim));
    PELICAN_TRY(k.get("vocab_size", c.vocab_size));
    PELICAN_TRY(k.get("max_position_embeddings", c.max_position_embeddings));
    PELICAN_TRY(
        k.get_any({"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps"}, c.rms_norm_eps));
    PELICAN_TRY(k.get_any({"hidden_act", "hidden_activation", "activation_function"}, c.hidden_act));
    PELICAN_TRY(parse_rope(k, c));
    PELICAN_TRY(k.get("tie_word_embeddings", c.tie_word_embeddings));
    PELICAN_TRY(k.get("bos_token_id", c.bos_token_ids));
    PELICAN_TRY(k.get("eos_token_id", c.eos_token_ids));
    PELICAN_TRY(k.get("pad_token_id", c.pad_token_id));
    PELICAN_TRY(k.get_any({"torch_dtype", "dtype"}, c.torch_dtype));
    PELICAN_TRY(k.get("attention_bias", c.attention_bias));
    PELICAN_TRY(k.get("mlp_bias", c.mlp_bias));
    bool use_sliding = true;
    PELICAN_TRY(k.get("use_sliding_window", use_sliding));
    if (use_sliding) PELICAN_TRY(k.get("sliding_window", c.sliding_window));

    PELICAN_TRY(k.get("embedding_multiplier", c.embedding_multiplier));
    PELICAN_TRY(k.get("residual_multiplier", c.residual_multiplier));
    PELICAN_TRY(k.get("attention_multiplier", c.attention_multiplier));
    PELICAN_TRY(k.get("logits_scaling", c.logits_scaling));

    PELICAN_TRY(k.get_any({"num_experts", "num_local_experts", "n_routed_experts"}, c.num_experts));
    PELICAN_TRY(k.get("num_experts_per_tok", c.num_experts_per_tok));
    PELICAN_TRY(k.get("moe_intermediate_size", c.moe_intermediate_size));
    PELICAN_TRY(k.get("shared_expert_intermediate_size", c.shared_expert_intermediate_size));
    PELICAN_TRY(k.get("norm_topk_prob", c.norm_topk_prob));
    PELICAN_TRY(k.get("decoder_sparse_step", c.decoder_sparse_step));
    PELICAN_TRY(k.get("mlp_only_layers", c.mlp_only_layers));

    PELICAN_TRY(k.get("layer_types", c.layer_types));
    PELICAN_TRY(k.get("full_attention_interval", c.full_attention_interval));
    PELICAN_TRY(k.get("linear_num_key_heads", c.linear_num_key_heads));
    PELICAN_TRY(k.get("linear_num_value_heads", c.linear_num_value_heads));
    PELICAN_TRY(k.get("linear_key_head_dim", c.linear_key_head_dim));
    PELICAN_TRY(k.get("linear_value_head_dim", c.linear_value_head_dim));
    PELICAN_TRY(k.get("linear_conv_kernel_dim", c.linear_conv_kernel_dim));
    PELICAN_TRY(k.get("mtp_num_hidden_layers", c.mtp_num_hidden_layers));
    PELICAN_TRY(k.get("attn_output_gate", c.attn_output_gate));

    if (const json* q = k.find("quantization_config")) {
        if (!q->is_object()) return k.type_error("quantization_config", "an object", *q);
        Keys qk{*q, *q, k.src + " quantization_config"};
        PELICAN_TRY(qk.get("quant_method", c.quant_method));
    }
    return {};
}

bool is_hybrid_linear_attention(std::string_view model_type) {
    return model_type.starts_with("qwen3_next") || model_type.starts_with("qwen3_5");
}

// Fills defaults that depend on other fields and rejects values that would mislead later layers.
Status finish(const Keys& k, HfConfig& c) {
    const std::string& src = k.src;
    constexpr int64_t kMaxDim = int64_t{1} << 24;  // bounds every size so later products cannot overflow
    auto need = [&](std::string_view key, int64_t v) -> Status {
        if (v <= 0 || v > kMaxDim)
            return make_error("{}: '{}' must be in 1..{}, found {}{}", src, key, kMaxDim, v,
                              k.find(key) ? "" : " (key missing)");
        return {};
    };
    auto bounded = [&](std::string_view key, int64_t v) -> Status {
        if (v < 0 || v > kMaxDim)
            return make_error("{}: '{}' must be in 0..{}, found {}", src, key, kMaxDim, v);
        return {};
    };
    PELICAN_TRY(need("hidden_size", c.hidden_size));
    PELICAN_TRY(need("num_hidden_layers", c.num_hidden_layers));
    constexpr int64_t kMaxLayers =
        4096;  // far above any released model; layer_types is built per layer below
    if (c.num_hidden_layers > kMaxLayers)
        return make_error("{}: num_hidden_layers {} is above the supported {}", src, c.num_hidden_layers,
                          kMaxLayers);
    PELICAN_TRY(need("num_attention_heads", c.num_attention_heads));
    PELICAN_TRY(need("vocab_size", c.vocab_size));
    if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
    PELICAN_TRY(need("num_key_value_heads", c.num_key_value_heads));
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        return make_error("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", src,
                          c.num_attention_heads, c.num_key_value_heads);
    if (c.head_dim == 0) {
        if (c.hidden_size % c.num_attention_heads != 0)
            return make_error(
                "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim", src,
                c.hidden_size, c.num_attention_heads);
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    PELICAN_TRY(need("head_dim", c.head_dim));
    for (auto [key, v] : {std::pair<std::string_view, int64_t>{"intermediate_size", c.intermediate_size},
                          {"max_position_embeddings", c.max_position_embeddings},
                          {"num_experts", c.num_experts},
                          {"num_experts_per_tok", c.num_experts_per_tok},
                          {"moe_intermediate_size", c.moe_intermediate_size},
                          {"shared_expert_intermediate_size", c.shared_expert_intermediate_size},
                          {"full_attention_interval", c.full_attention_interval},
                          {"linear_num_key_heads", c.linear_num_key_heads},
                          {"linear_num_value_heads", c.linear_num_value_heads},
                          {"linear_key_head_dim", c.linear_key_head_dim},
                          {"linear_value_head_dim", c.linear_value_head_dim},
                          {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
                          {"mtp_num_hidden_layers", c.mtp_num_hidden_layers}})
        PELICAN_TRY(bounded(key, v));
    if (c.num_experts_per_tok > c.num_experts && c.num_experts > 0)
        return make_error("{}: num_experts_per_tok ({}) exceeds num_experts ({})", src, c.num_experts_per_tok,
                          c.num_experts);
    if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
        return make_error("{}: partial_rotary_factor must be in (0, 1], found {}", src,
                          c.partial_rotary_factor);
    if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
        return make_error("{}: rope_theta must be positive, found {}", src, c.rope_theta);
    if (!(c.rms_norm_eps >= 0) || !std::isfinite(c.rms_norm_eps))
        return make_error("{}: rms_norm_eps must be a non-negative number, found {}", src, c.rms_norm_eps);

    if (c.layer_types.empty() &&
        (c.full_attention_interval > 0 || is_hybrid_linear_attention(c.model_type))) {
        int64_t every = c.full_attention_interval > 0 ? c.full_attention_interval : 4;
        c.full_attention_interval = every;
        for (int64_t i = 0; i < c.num_hidden_layers; ++i)
            c.layer_types.push_back((i + 1) % every == 0 ? "full_attention" : "linear_attention");
    }
    if (!c.layer_types.empty() && static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
        return make_error("{}: layer_types has {} entries but num_hidden_layers is {}", src,
                          c.layer_types.size(), c.num_hidden_layers);
    return {};
}

}  // namespace

int64_t HfConfig::rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

Expected<HfConfig> parse_hf_config(std::string_view json_text, std::string_view source) {
    auto root = std::make_shared<json>(json::parse(json_text.begin(), json_text.end(), nullptr, false));
    if (root->is_discarded()) return make_error("{}: not valid JSON", source);
    if (!root->is_object())
        return make_error("{}: must be a JSON object, found {}", source, root->type_name());
    HfConfig c;
    c.raw = root;
    c.text = root;
    auto tc = root->find("text_config");
    if (tc != root->end() && !tc->is_null()) {
        if (!tc->is_object())
            return make_error("{}: key 'text_config' must be an object, found {}", source, tc->type_name());
        c.has_text_config = true;
        c.text = std::shared_ptr<const json>(root, &*tc);  // aliases into root, shares its lifetime
    }
    Keys top{*root, *root, std::string(source)};
    PELICAN_TRY(top.get("model_type", c.outer_model_type));
    PELICAN_TRY(top.get("architectures", c.architectures));
    Keys k{*c.text, *root, std::string(source)};
    c.model_type = c.outer_model_type;
    if (c.has_text_config) {
        Keys inner{*c.text, *c.text, std::string(source) + " text_config"};
        PELICAN_TRY(inner.get("model_type", c.model_type));
        if (c.architectures.empty()) PELICAN_TRY(inner.get("architectures", c.architectures));
    }
    PELICAN_TRY(parse_fields(k, c));
    PELICAN_TRY(finish(k, c));
    return c;
}

Expected<HfConfig> load_hf_config(const std::string& path) {
    std::error_code ec;
    std::string file = std::filesystem::is_directory(path, ec)
                           ? (std::filesystem::path(path) / "config.json").string()
                           : path;
    PELICAN_ASSIGN(std::string text, read_text_file(file));
    return parse_hf_config(text, file);
}

}  // namespace pelican
