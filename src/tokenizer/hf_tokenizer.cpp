// Tokenizer::from_hf: reads an HF tokenizer folder (or tokenizer.json) into a TokenizerSpec.
#include "tokenizer/hf_tokenizer.h"

#include <filesystem>
#include <system_error>

#include "core/mmap_file.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace hf {

Expected<json> parse_json(std::string_view text, const std::string& file) {
    try {
        return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
        return make_error("{}: malformed JSON at byte {}: {}", file, e.byte, e.what());
    }
}

}  // namespace hf

Expected<TokenizerSpec> hf_tokenizer_spec(const HfTokenizerFiles& files) {
    using hf::Where;
    TokenizerSpec spec;
    hf::TokenIds ids;
    {
        PELICAN_ASSIGN(hf::json root, hf::parse_json(files.tokenizer_json, files.tokenizer_json_name));
        Where w{files.tokenizer_json_name, ""};
        if (!root.is_object()) return make_error("{}: expected a JSON object", w.str());
        PELICAN_TRY(hf::load_model(root, w, spec, ids));
        PELICAN_TRY(hf::load_pipeline(root, w, spec, ids));
    }
    if (!files.special_tokens_map_json.empty()) {
        PELICAN_ASSIGN(hf::json map,
                       hf::parse_json(files.special_tokens_map_json, files.special_tokens_map_name));
        PELICAN_TRY(hf::load_special_tokens_map(map, Where{files.special_tokens_map_name, ""}, spec, ids));
    }
    if (!files.config_json.empty()) {
        PELICAN_ASSIGN(hf::json config, hf::parse_json(files.config_json, files.config_name));
        PELICAN_TRY(hf::load_config(config, Where{files.config_name, ""}, spec, ids));
    }
    if (!files.chat_template.empty()) spec.chat_template = files.chat_template;
    if (spec.bos_id >= 0 && spec.bos_text.empty()) spec.bos_text = spec.tokens[spec.bos_id];
    if (spec.eos_id >= 0 && spec.eos_text.empty()) spec.eos_text = spec.tokens[spec.eos_id];
    return spec;
}

Expected<TokenizerSpec> load_hf_tokenizer_spec(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path json_path(path);
    bool with_siblings = json_path.filename() == "tokenizer.json";
    if (fs::is_directory(json_path, ec)) {
        json_path /= "tokenizer.json";
        with_siblings = true;
    }
    if (!fs::is_regular_file(json_path, ec))
        return make_error(
            "{}: no tokenizer.json found (expected a tokenizer.json file or a folder holding one)", path);
    HfTokenizerFiles files;
    files.tokenizer_json_name = json_path.string();
    PELICAN_ASSIGN(files.tokenizer_json, read_text_file(json_path.string()));
    if (with_siblings) {
        fs::path dir = json_path.parent_path();
        auto read_optional = [&](const char* name, std::string& text, std::string& shown) -> Status {
            fs::path p = dir / name;
            if (!fs::is_regular_file(p, ec)) return {};
            shown = p.string();
            PELICAN_ASSIGN(text, read_text_file(p.string()));
            return {};
        };
        std::string unused;
        PELICAN_TRY(read_optional("tokenizer_config.json", files.config_json, files.config_name));
        PELICAN_TRY(read_optional("special_tokens_map.json", files.special_tokens_map_json,
                                  files.special_tokens_map_name));
        PELICAN_TRY(read_optional("chat_template.jinja", files.chat_template, unused));
    }
    return hf_tokenizer_spec(files);
}

Expected<Tokenizer> Tokenizer::from_hf(const std::string& path) {
    PELICAN_ASSIGN(TokenizerSpec spec, load_hf_tokenizer_spec(path));
    return Tokenizer::from_spec(std::move(spec));
}

}  // namespace pelican
