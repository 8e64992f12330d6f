// Internal to the HF tokenizer loader: typed JSON accessors whose errors name the file and key,
// and the stages of the loader (one .cpp each).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace pelican::hf {

using json = nlohmann::json;

// Where a value sits, for messages: "tokenizer.json: pre_tokenizer.pretokenizers[1]".
struct Where {
    std::string file;
    std::string key;  // dotted path inside the file, "" for the root
    Where at(std::string_view k) const {
        return {file, key.empty() ? std::string(k) : key + "." + std::string(k)};
    }
    Where index(size_t i) const { return {file, fmt::format("{}[{}]", key, i)}; }
    std::string str() const { return key.empty() ? file : file + ": " + key; }
};

// Member `key` of object `obj`, or nullptr when absent or JSON null.
inline const json* member(const json& obj, std::string_view key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

inline const char* type_name(const json& j) { return j.type_name(); }

inline Expected<std::string> get_string(const json& obj, std::string_view key, const Where& w) {
    const json* v = member(obj, key);
    if (!v) return make_error("{}: missing string", w.at(key).str());
    if (!v->is_string()) return make_error("{}: expected a string, found {}", w.at(key).str(), type_name(*v));
    return v->get<std::string>();
}

inline Expected<std::optional<std::string>> opt_string(const json& obj, std::string_view key,
                                                       const Where& w) {
    const json* v = member(obj, key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string()) return make_error("{}: expected a string, found {}", w.at(key).str(), type_name(*v));
    return std::optional<std::string>(v->get<std::string>());
}

inline Expected<bool> opt_bool(const json& obj, std::string_view key, bool dflt, const Where& w) {
    const json* v = member(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean())
        return make_error("{}: expected true/false, found {}", w.at(key).str(), type_name(*v));
    return v->get<bool>();
}

// A token id: an integer in [0, 2^31).
inline Expected<int32_t> as_id(const json& v, const Where& w) {
    if (!v.is_number_integer()) return make_error("{}: expected a token id, found {}", w.str(), type_name(v));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
        return make_error("{}: token id {} out of range", w.str(), v.dump());
    return static_cast<int32_t>(v.get<int64_t>());
}

// The "type" of a component object ("Sequence", "ByteLevel", ...).
inline Expected<std::string> component_type(const json& obj, const Where& w) {
    if (!obj.is_object()) return make_error("{}: expected an object, found {}", w.str(), type_name(obj));
    return get_string(obj, "type", w);
}

// Parses JSON text; errors name the file and the byte offset.
Expected<json> parse_json(std::string_view text, const std::string& file);

// Token text -> id over the model vocab and added tokens (filled by the model stage).
using TokenIds = std::unordered_map<std::string, int32_t>;

// Stages. `root` is the parsed tokenizer.json.
// Model + added tokens: kind, tokens, types, merges, scores, unk; fills `ids`.
Status load_model(const json& root, const Where& w, TokenizerSpec& spec, TokenIds& ids);
// normalizer, pre_tokenizer, post_processor, decoder (needs spec.kind and `ids`).
Status load_pipeline(const json& root, const Where& w, TokenizerSpec& spec, const TokenIds& ids);
// tokenizer_config.json / special_tokens_map.json: chat template, bos/eos, add_bos/add_eos, cleanup.
Status load_config(const json& config, const Where& w, TokenizerSpec& spec, const TokenIds& ids);
Status load_special_tokens_map(const json& map, const Where& w, TokenizerSpec& spec, const TokenIds& ids);

}  // namespace pelican::hf
