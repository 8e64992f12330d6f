#include "formats/hf_info.h"

#include "core/format_bytes.h"

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "formats/hf_config.h"
#include "formats/hf_folder.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// tokenizer_config.json "chat_template" (string or list of named templates), or a template file.
bool has_chat_template(const fs::path& dir) {
    std::error_code ec;
    if (fs::is_regular_file(dir / "chat_template.jinja", ec) ||
        fs::is_regular_file(dir / "chat_template.json", ec))
        return true;
    auto text = read_text_file((dir / "tokenizer_config.json").string());
    if (!text) return false;
    json j = json::parse(*text, nullptr, false);
    if (!j.is_object()) return false;
    auto it = j.find("chat_template");
    return it != j.end() && (it->is_string() || (it->is_array() && !it->empty()));
}

json config_json(const HfConfig& c) {
    json j;
    j["model_type"] = c.model_type;
    if (c.outer_model_type != c.model_type) j["outer_model_type"] = c.outer_model_type;
    j["architectures"] = c.architectures;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["head_dim"] = c.head_dim;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_theta"] = c.rope_theta;
    if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
    if (c.rope_scaling)
        j["rope_scaling"] = {{"type", c.rope_scaling->type}, {"factor", c.rope_scaling->factor}};
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
    if (c.is_moe()) {
        j["num_experts"] = c.num_experts;
        j["num_experts_per_tok"] = c.num_experts_per_tok;
        j["moe_intermediate_size"] = c.moe_intermediate_size;
        if (c.shared_expert_intermediate_size)
            j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    }
    if (!c.layer_types.empty()) {
        std::map<std::string, int> counts;
        for (const auto& t : c.layer_types) counts[t]++;
        j["layer_types"] = counts;
    }
    if (c.mtp_num_hidden_layers) j["mtp_num_hidden_layers"] = c.mtp_num_hidden_layers;
    if (!c.quant_method.empty()) j["quant_method"] = c.quant_method;
    return j;
}

std::string to_text(const json& j) {
    std::string out;
    out += fmt::format("path:        {}\n", j["path"].get<std::string>());
    if (j.contains("config")) {
        const json& c = j["config"];
        std::string arch = c["architectures"].empty() ? "" : c["architectures"][0].get<std::string>();
        out += fmt::format("model_type:  {}{}\n", c["model_type"].get<std::string>(),
                           arch.empty() ? "" : " (" + arch + ")");
        for (const auto& [k, v] : c.items())
            if (k != "model_type" && k != "architectures")
                out +=
                    fmt::format("  {:<32} {}\n", k, v.dump(-1, ' ', false, json::error_handler_t::replace));
    }
    const json& w = j["weights"];
    out += fmt::format("tensors:     {} in {} shard(s), {} parameters\n", w["tensors"].get<uint64_t>(),
                       w["shards"].get<uint64_t>(), w["parameters"].get<uint64_t>());
    for (const auto& [dt, b] : w["bytes_per_dtype"].items())
        out += fmt::format("  {:<8} {}\n", dt, human_bytes(b.get<uint64_t>()));
    out += fmt::format("  total    {}\n", human_bytes(w["bytes_total"].get<uint64_t>()));
    if (j.contains("tokenizer_json"))
        out += fmt::format("tokenizer:   tokenizer.json {}, chat template {}\n",
                           j["tokenizer_json"].get<bool>() ? "yes" : "no",
                           j["chat_template"].get<bool>() ? "yes" : "no");
    return out;
}

}  // namespace

Expected<std::string> hf_model_summary(const std::string& path, bool as_json) {
    std::error_code ec;
    bool folder = fs::is_directory(path, ec);
    json j;
    j["path"] = path;
    j["kind"] = folder ? "hf_folder" : "safetensors";
    if (folder && fs::is_regular_file(fs::path(path) / "config.json", ec)) {
        PELICAN_ASSIGN(HfConfig c, load_hf_config(path));
        j["config"] = config_json(c);
    }
    PELICAN_ASSIGN(HfWeights w, HfWeights::open(path));
    std::map<std::string, uint64_t> per_dtype;
    uint64_t total = 0, params = 0;
    for (const auto* t : w.tensors()) {
        per_dtype[t->dtype_str] += t->n_bytes();
        total += t->n_bytes();
        params += t->n_elements();
    }
    j["weights"] = {{"tensors", w.n_tensors()}, {"shards", w.shards().size()},  {"indexed", w.indexed()},
                    {"parameters", params},     {"bytes_per_dtype", per_dtype}, {"bytes_total", total}};
    if (!folder && w.shards().size() == 1 && !w.shards()[0].metadata().empty())
        j["metadata"] = w.shards()[0].metadata();
    if (folder) {
        j["tokenizer_json"] = fs::is_regular_file(fs::path(path) / "tokenizer.json", ec);
        j["chat_template"] = has_chat_template(path);
    }
    if (as_json) return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    return to_text(j);
}

}  // namespace pelican
