// HF <-> GGUF tensor names of the dense Llama family (table in tensor_names.h).
#include "model/tensor_names.h"

#include <array>
#include <charconv>
#include <utility>

#include <fmt/format.h>

namespace pelican {
namespace {

struct NamePair {
    std::string_view hf;    // suffix after "model.layers.N." (layer tensors) or the full name
    std::string_view gguf;  // suffix after "blk.N." (layer tensors) or the full name
};

// Whole-model tensors.
constexpr std::array<NamePair, 3> kGlobal{{
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
}};

// Per-layer tensor bases; each takes ".weight" and, for projections, ".bias".
constexpr std::array<NamePair, 11> kLayer{{
    {"input_layernorm", "attn_norm"},
    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},
    {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
}};

// Splits "<prefix><N>.<rest>" into (N, rest); nullopt if name does not start that way.
std::optional<std::pair<int, std::string_view>> split_layer(std::string_view name, std::string_view prefix) {
    if (!name.starts_with(prefix)) return std::nullopt;
    name.remove_prefix(prefix.size());
    int layer = -1;
    const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
    if (ec != std::errc() || layer < 0 || ptr == name.data() || ptr == name.data() + name.size() ||
        *ptr != '.')
        return std::nullopt;
    const size_t digits = static_cast<size_t>(ptr - name.data());
    if (digits > 1 && name[0] == '0') return std::nullopt;  // "01" is not a layer index
    return std::pair{layer, name.substr(digits + 1)};
}

// Splits "base.weight" / "base.bias" into (base, suffix).
std::optional<std::pair<std::string_view, std::string_view>> split_suffix(std::string_view rest) {
    for (std::string_view suffix : {std::string_view("weight"), std::string_view("bias")}) {
        if (rest.size() > suffix.size() + 1 && rest.ends_with(suffix) &&
            rest[rest.size() - suffix.size() - 1] == '.')
            return std::pair{rest.substr(0, rest.size() - suffix.size() - 1), suffix};
    }
    return std::nullopt;
}

std::optional<std::string> map_name(std::string_view name, bool hf_to_gguf) {
    for (const auto& p : kGlobal) {
        if (name == (hf_to_gguf ? p.hf : p.gguf)) return std::string(hf_to_gguf ? p.gguf : p.hf);
    }
    const auto split = split_layer(name, hf_to_gguf ? "model.layers." : "blk.");
    if (!split) return std::nullopt;
    const auto parts = split_suffix(split->second);
    if (!parts) return std::nullopt;
    for (const auto& p : kLayer) {
        if (parts->first != (hf_to_gguf ? p.hf : p.gguf)) continue;
        return hf_to_gguf ? fmt::format("blk.{}.{}.{}", split->first, p.gguf, parts->second)
                          : fmt::format("model.layers.{}.{}.{}", split->first, p.hf, parts->second);
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf_name) {
    return map_name(hf_name, true);
}

std::optional<std::string> gguf_to_hf_tensor_name(std::string_view gguf_name) {
    return map_name(gguf_name, false);
}

QkPermute qk_permute_kind(std::string_view gguf_name) {
    const auto split = split_layer(gguf_name, "blk.");
    if (!split) return QkPermute::None;
    const auto parts = split_suffix(split->second);
    if (!parts) return QkPermute::None;
    if (parts->first == "attn_q") return QkPermute::Q;
    if (parts->first == "attn_k") return QkPermute::K;
    return QkPermute::None;
}

std::string gguf_layer_tensor(int layer, std::string_view base, std::string_view suffix) {
    return fmt::format("blk.{}.{}.{}", layer, base, suffix);
}

}  // namespace pelican
