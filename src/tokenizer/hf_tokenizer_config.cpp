// tokenizer_config.json and special_tokens_map.json -> chat template, BOS/EOS texts and ids,
// add_bos/add_eos overrides, clean_up_tokenization_spaces.
#include "core/log.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace pelican::hf {
namespace {

// A special token entry: "<s>", {"content": "<s>", ...} (AddedToken), or null.
Expected<std::optional<std::string>> token_text(const json& obj, std::string_view key, const Where& w) {
    const json* v = member(obj, key);
    if (!v) return std::optional<std::string>();
    if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
    if (v->is_object()) {
        PELICAN_ASSIGN(std::string content, get_string(*v, "content", w.at(key)));
        return std::optional<std::string>(std::move(content));
    }
    return make_error("{}: expected a token string or object, found {}", w.at(key).str(), type_name(*v));
}

// Sets `text` and `id` from entry `key` when present. Unknown texts warn and leave the id alone.
Status set_special(const json& obj, std::string_view key, const Where& w, const TokenIds& ids,
                   std::string* text, int32_t& id) {
    PELICAN_ASSIGN(auto t, token_text(obj, key, w));
    if (!t) return {};
    if (text) *text = *t;
    auto it = ids.find(*t);
    if (it == ids.end()) {
        log_warn("{}: \"{}\" is not a token of this vocabulary", w.at(key).str(), *t);
        return {};
    }
    id = it->second;
    return {};
}

Status set_specials(const json& obj, const Where& w, TokenizerSpec& spec, const TokenIds& ids) {
    PELICAN_TRY(set_special(obj, "bos_token", w, ids, &spec.bos_text, spec.bos_id));
    PELICAN_TRY(set_special(obj, "eos_token", w, ids, &spec.eos_text, spec.eos_id));
    PELICAN_TRY(set_special(obj, "unk_token", w, ids, nullptr, spec.unk_id));
    PELICAN_TRY(set_special(obj, "pad_token", w, ids, nullptr, spec.pad_id));
    PELICAN_TRY(set_special(obj, "sep_token", w, ids, nullptr, spec.sep_id));
    PELICAN_TRY(set_special(obj, "cls_token", w, ids, nullptr, spec.cls_id));
    PELICAN_TRY(set_special(obj, "mask_token", w, ids, nullptr, spec.mask_id));
    return {};
}

// chat_template: a string, or a list of {name, template} (the one named "default" is used).
Expected<std::string> chat_template(const json& config, const Where& w) {
    const json* v = member(config, "chat_template");
    if (!v) return std::string();
    Where wt = w.at("chat_template");
    if (v->is_string()) return v->get<std::string>();
    if (!v->is_array())
        return make_error("{}: expected a string or a list, found {}", wt.str(), type_name(*v));
    std::string first;
    for (size_t i = 0; i < v->size(); ++i) {
        PELICAN_ASSIGN(std::string name, get_string((*v)[i], "name", wt.index(i)));
        PELICAN_ASSIGN(std::string tmpl, get_string((*v)[i], "template", wt.index(i)));
        if (name == "default") return tmpl;
        if (i == 0) first = std::move(tmpl);
    }
    if (!v->empty()) log_warn("{}: no template named \"default\"; using the first", wt.str());
    return first;
}

}  // namespace

Status load_config(const json& config, const Where& w, TokenizerSpec& spec, const TokenIds& ids) {
    if (!config.is_object()) return make_error("{}: expected an object", w.str());
    PELICAN_ASSIGN(spec.chat_template, chat_template(config, w));
    PELICAN_TRY(set_specials(config, w, spec, ids));
    // add_bos_token / add_eos_token, when given, override the post-processor (as transformers'
    // Llama/Gemma tokenizers rebuild their post-processor from them).
    if (const json* v = member(config, "add_bos_token")) {
        if (!v->is_boolean()) return make_error("{}: expected true/false", w.at("add_bos_token").str());
        spec.add_bos = v->get<bool>();
    }
    if (const json* v = member(config, "add_eos_token")) {
        if (!v->is_boolean()) return make_error("{}: expected true/false", w.at("add_eos_token").str());
        spec.add_eos = v->get<bool>();
    }
    PELICAN_ASSIGN(spec.clean_spaces, opt_bool(config, "clean_up_tokenization_spaces", spec.clean_spaces, w));
    if (spec.add_bos && spec.bos_id < 0) {
        log_warn("{}: add_bos_token is set but there is no BOS token; not adding one", w.str());
        spec.add_bos = false;
    }
    if (spec.add_eos && spec.eos_id < 0) {
        log_warn("{}: add_eos_token is set but there is no EOS token; not adding one", w.str());
        spec.add_eos = false;
    }
    return {};
}

Status load_special_tokens_map(const json& map, const Where& w, TokenizerSpec& spec, const TokenIds& ids) {
    if (!map.is_object()) return make_error("{}: expected an object", w.str());
    return set_specials(map, w, spec, ids);
}

}  // namespace pelican::hf
