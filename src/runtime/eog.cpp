// End-of-generation token discovery (see eog.h).
#include "runtime/eog.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

constexpr std::string_view kEndMarkers[] = {
    "<|eot_id|>",    "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>",
    "<end_of_turn>", "<|end|>",    "</s>",       "<|return|>",
};

void add_json_ids(const nlohmann::json& j, std::vector<int64_t>& out) {
    if (j.is_number_integer()) out.push_back(j.get<int64_t>());
    if (j.is_array())
        for (const auto& e : j)
            if (e.is_number_integer()) out.push_back(e.get<int64_t>());
}

}  // namespace

std::vector<int32_t> find_end_of_generation_ids(const Model& model, const Tokenizer* tok, int64_t n_vocab) {
    std::vector<int64_t> ids;
    if (tok && tok->spec().eos_id >= 0) ids.push_back(tok->spec().eos_id);
    if (const GgufFile* g = model.gguf()) {
        for (const char* key :
             {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
            if (auto v = g->get_int(key)) ids.push_back(*v);
    }
    if (const HfConfig* c = model.hf_config()) {
        ids.insert(ids.end(), c->eos_token_ids.begin(), c->eos_token_ids.end());
        const auto gen = std::filesystem::path(model.path()) / "generation_config.json";
        std::error_code ec;
        if (std::filesystem::is_regular_file(gen, ec)) {
            if (auto text = read_text_file(gen.string())) {
                const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
                if (j.is_object() && j.contains("eos_token_id")) add_json_ids(j["eos_token_id"], ids);
            }
        }
    }
    if (tok) {
        const TokenizerSpec& spec = tok->spec();
        for (size_t id = 0; id < spec.tokens.size(); ++id) {
            if (spec.types[id] != TokenType::Control && spec.types[id] != TokenType::UserDefined) continue;
            for (std::string_view m : kEndMarkers)
                if (spec.tokens[id] == m) ids.push_back(static_cast<int64_t>(id));
        }
    }
    std::vector<int32_t> out;
    for (int64_t id : ids)
        if (id >= 0 && id < n_vocab) out.push_back(static_cast<int32_t>(id));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

}  // namespace pelican
