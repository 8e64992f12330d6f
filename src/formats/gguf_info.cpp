#include "formats/gguf_info.h"

#include "core/format_bytes.h"

#include <map>

#include <nlohmann/json.hpp>

namespace pelican {
namespace {

using json = nlohmann::json;

// Scalar metadata as JSON; null for arrays (callers skip those).
json scalar_json(const GgufValue& v) {
    switch (v.type) {
        case GgufType::U8:
        case GgufType::U16:
        case GgufType::U32:
        case GgufType::U64:
            return v.u;
        case GgufType::I8:
        case GgufType::I16:
        case GgufType::I32:
        case GgufType::I64:
            return v.i;
        case GgufType::F32:
            return static_cast<float>(v.f);
        case GgufType::F64:
            return v.f;
        case GgufType::BOOL:
            return v.u != 0;
        case GgufType::STRING:
            return v.str;
        default:
            return nullptr;
    }
}

std::string scalar_text(const GgufValue& v) {
    switch (v.type) {
        case GgufType::F32:
            return fmt::format("{}", static_cast<float>(v.f));
        case GgufType::F64:
            return fmt::format("{}", v.f);
        case GgufType::BOOL:
            return v.u ? "true" : "false";
        case GgufType::STRING:
            return v.str.size() > 60 ? v.str.substr(0, 57) + "..." : v.str;
        default:
            return v.as_int() ? fmt::format("{}", *v.as_int()) : fmt::format("{}", v.u);
    }
}

std::string str_or(const json& j, const char* key, const char* dflt) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : dflt;
}

}  // namespace

json gguf_summary_json(const GgufFile& f) {
    json j;
    j["file"] = f.name();
    j["format"] = "gguf";
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["file_bytes"] = f.bytes().size();
    auto arch = f.get_string("general.architecture");
    j["architecture"] = arch ? json(*arch) : json(nullptr);
    auto name = f.get_string("general.name");
    j["name"] = name ? json(*name) : json(nullptr);

    json hp = json::object();
    if (arch) {
        std::string prefix = *arch + ".";
        for (const auto& kv : f.kvs())
            if (kv.key.starts_with(prefix) && kv.value.type != GgufType::ARRAY)
                hp[kv.key.substr(prefix.size())] = scalar_json(kv.value);
    }
    j["hyper_parameters"] = hp;

    std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // name -> (count, bytes)
    uint64_t total = 0, params = 0;
    for (const auto& t : f.tensors()) {
        auto& e = by_type[std::string(dtype_name(t.type))];
        e.first += 1;
        e.second += t.n_bytes;
        total += t.n_bytes;
        params += t.n_elements();
    }
    j["tensor_count"] = f.tensors().size();
    j["parameters"] = params;
    json types = json::object();
    for (const auto& [n, e] : by_type) types[n] = {{"count", e.first}, {"bytes", e.second}};
    j["tensor_types"] = types;
    j["tensor_bytes"] = total;

    json tok = json::object();
    if (auto m = f.get_string("tokenizer.ggml.model")) tok["model"] = *m;
    if (auto p = f.get_string("tokenizer.ggml.pre")) tok["pre"] = *p;
    const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
    if (tokens && tokens->type == GgufType::ARRAY) tok["vocab_size"] = tokens->arr.size();
    j["tokenizer"] = tok;
    j["chat_template"] = f.find("tokenizer.chat_template") != nullptr;
    return j;
}

std::string gguf_summary(const GgufFile& f, bool as_json) {
    json j = gguf_summary_json(f);
    if (as_json) return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";

    std::string out;
    out += fmt::format("file:            {} ({}, GGUF v{}, alignment {})\n", f.name(),
                       human_bytes(f.bytes().size()), f.version(), f.alignment());
    out += fmt::format("architecture:    {}\n", str_or(j, "architecture", "(none)"));
    out += fmt::format("name:            {}\n", str_or(j, "name", "(none)"));

    auto arch = f.get_string("general.architecture");
    if (arch && !j["hyper_parameters"].empty()) {
        out += "hyper-parameters:\n";
        std::string prefix = *arch + ".";
        size_t width = 0;
        for (const auto& kv : f.kvs())
            if (kv.key.starts_with(prefix) && kv.value.type != GgufType::ARRAY)
                width = std::max(width, kv.key.size() - prefix.size());
        for (const auto& kv : f.kvs())
            if (kv.key.starts_with(prefix) && kv.value.type != GgufType::ARRAY)
                out +=
                    fmt::format("  {:<{}}  {}\n", kv.key.substr(prefix.size()), width, scalar_text(kv.value));
    }

    out += fmt::format("tensors:         {} ({} parameters)\n", f.tensors().size(),
                       j["parameters"].get<uint64_t>());
    if (!f.tensors().empty()) {
        out += fmt::format("  {:<8} {:>7} {:>12}\n", "type", "count", "bytes");
        for (const auto& [n, e] : j["tensor_types"].items())
            out += fmt::format("  {:<8} {:>7} {:>12}\n", n, e["count"].get<uint64_t>(),
                               human_bytes(e["bytes"].get<uint64_t>()));
        out += fmt::format("  {:<8} {:>7} {:>12}\n", "total", f.tensors().size(),
                           human_bytes(j["tensor_bytes"].get<uint64_t>()));
    }

    const json& tok = j["tokenizer"];
    if (tok.contains("model")) {
        out += fmt::format("tokenizer:       {}", tok["model"].get<std::string>());
        if (tok.contains("pre")) out += fmt::format(" (pre: {})", tok["pre"].get<std::string>());
        if (tok.contains("vocab_size")) out += fmt::format(", {} tokens", tok["vocab_size"].get<uint64_t>());
        out += "\n";
    } else {
        out += "tokenizer:       (none)\n";
    }
    out += fmt::format("chat template:   {}\n", j["chat_template"].get<bool>() ? "yes" : "no");
    return out;
}

}  // namespace pelican
