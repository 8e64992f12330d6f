// tokenizer.json "model" and "added_tokens" -> TokenizerSpec tokens, types, merges, scores.
#include <algorithm>
#include <limits>

#include "core/log.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace pelican::hf {
namespace {

// Ids may leave gaps, but a vocabulary this much sparser than its entries is refused rather
// than allocated (a corrupt file must not make us allocate gigabytes).
constexpr size_t kMaxGapSlack = 1 << 20;

// True when `component` is of type `type` or is a Sequence holding one (depth-limited).
bool contains_type(const json* component, std::string_view type, int depth = 0) {
    if (!component || !component->is_object() || depth > 8) return false;
    const json* t = member(*component, "type");
    if (!t || !t->is_string()) return false;
    if (*t == type) return true;
    if (*t != "Sequence") return false;
    for (const char* key : {"pretokenizers", "normalizers", "decoders", "processors"}) {
        const json* list = member(*component, key);
        if (!list || !list->is_array()) continue;
        for (const json& c : *list)
            if (contains_type(&c, type, depth + 1)) return true;
    }
    return false;
}

Expected<TokenizerKind> detect_kind(const json& root, const json& model, const Where& w) {
    std::string type;
    if (const json* t = member(model, "type")) {
        if (!t->is_string()) return make_error("{}: expected a string", w.at("model.type").str());
        type = t->get<std::string>();
    } else if (member(model, "merges")) {
        type = "BPE";  // untagged models are recognised by their fields, as HF does
    } else if (member(model, "continuing_subword_prefix") && member(model, "max_input_chars_per_word")) {
        type = "WordPiece";
    } else {
        return make_error("{}: missing model.type", w.str());
    }
    if (type == "WordPiece") return TokenizerKind::WordPiece;
    if (type != "BPE")
        return make_error("{}: unsupported tokenizer model type \"{}\"", w.at("model.type").str(), type);

    const json* pre = member(root, "pre_tokenizer");
    const json* dec = member(root, "decoder");
    const json* norm = member(root, "normalizer");
    if (contains_type(pre, "ByteLevel") || contains_type(dec, "ByteLevel")) return TokenizerKind::BPE;
    const json* fallback = member(model, "byte_fallback");
    bool byte_fallback = fallback && fallback->is_boolean() && fallback->get<bool>();
    if (byte_fallback || contains_type(pre, "Metaspace") || contains_type(norm, "Prepend") ||
        contains_type(dec, "Metaspace") || contains_type(dec, "ByteFallback"))
        return TokenizerKind::SPM;
    return make_error(
        "{}: BPE model with neither a ByteLevel pre-tokenizer/decoder nor SentencePiece-style "
        "components (byte_fallback, Metaspace) is not supported",
        w.str());
}

// Checks the BPE model options pelican does not implement.
Status check_bpe_options(const json& model, const Where& w, TokenizerSpec& spec) {
    if (const json* d = member(model, "dropout")) {
        if (!d->is_number()) return make_error("{}: expected a number", w.at("dropout").str());
        if (d->get<double>() != 0.0)
            return make_error("{}: BPE dropout is not supported", w.at("dropout").str());
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        PELICAN_ASSIGN(auto v, opt_string(model, key, w));
        if (v && !v->empty()) return make_error("{}: \"{}\" is not supported", w.at(key).str(), *v);
    }
    PELICAN_ASSIGN(spec.ignore_merges, opt_bool(model, "ignore_merges", false, w));
    PELICAN_ASSIGN(spec.byte_fallback, opt_bool(model, "byte_fallback", false, w));
    return {};
}

Status load_merges(const json& model, const Where& w, TokenizerSpec& spec) {
    const json* merges = member(model, "merges");
    if (!merges) return {};
    if (!merges->is_array()) return make_error("{}: expected an array", w.at("merges").str());
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const json& m = (*merges)[i];
        if (m.is_string()) {  // "a b": exactly one space (tokens never hold a raw space here)
            const std::string& s = m.get_ref<const std::string&>();
            size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                return make_error("{}: merge \"{}\" is not two tokens separated by one space",
                                  w.at("merges").index(i).str(), s);
            spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            return make_error("{}: expected \"a b\" or [\"a\", \"b\"], found {}",
                              w.at("merges").index(i).str(), type_name(m));
        }
    }
    return {};
}

// SPM models rank merges by piece score: the piece made by merge r scores -r, so the SPM
// algorithm picks the same pair HF's rank-ordered BPE picks. Other pieces score below all merges.
void fill_spm_scores(TokenizerSpec& spec, const TokenIds& ids) {
    const float floor = -static_cast<float>(spec.merges.size());
    spec.scores.assign(spec.tokens.size(), 0.0f);
    std::vector<bool> set(spec.tokens.size(), false);
    for (size_t r = 0; r < spec.merges.size(); ++r) {
        auto it = ids.find(spec.merges[r].first + spec.merges[r].second);
        if (it == ids.end() || set[it->second]) continue;
        spec.scores[it->second] = -static_cast<float>(r);
        set[it->second] = true;
    }
    for (size_t i = 0; i < spec.tokens.size(); ++i)
        if (!set[i]) spec.scores[i] = floor - static_cast<float>(i);
}

bool is_byte_piece(const std::string& t) {
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

struct Added {
    int32_t id;
    std::string content;
    bool special;
};

Expected<std::vector<Added>> read_added_tokens(const json& root, const Where& w, bool has_normalizer) {
    std::vector<Added> out;
    const json* list = member(root, "added_tokens");
    if (!list) return out;
    Where wl = w.at("added_tokens");
    if (!list->is_array()) return make_error("{}: expected an array", wl.str());
    for (size_t i = 0; i < list->size(); ++i) {
        const json& a = (*list)[i];
        Where wa = wl.index(i);
        if (!a.is_object()) return make_error("{}: expected an object", wa.str());
        const json* idv = member(a, "id");
        if (!idv) return make_error("{}: missing id", wa.str());
        PELICAN_ASSIGN(int32_t id, as_id(*idv, wa.at("id")));
        PELICAN_ASSIGN(std::string content, get_string(a, "content", wa));
        if (content.empty()) return make_error("{}: empty content", wa.at("content").str());
        PELICAN_ASSIGN(bool special, opt_bool(a, "special", false, wa));
        PELICAN_ASSIGN(bool lstrip, opt_bool(a, "lstrip", false, wa));
        PELICAN_ASSIGN(bool rstrip, opt_bool(a, "rstrip", false, wa));
        PELICAN_ASSIGN(bool single_word, opt_bool(a, "single_word", false, wa));
        PELICAN_ASSIGN(bool normalized, opt_bool(a, "normalized", !special, wa));
        // pelican matches added tokens verbatim in the raw text; these flags change that.
        if (lstrip || rstrip || single_word)
            log_warn("{}: added token \"{}\" has lstrip={} rstrip={} single_word={}; pelican ignores these",
                     wa.str(), content, lstrip, rstrip, single_word);
        if (normalized && has_normalizer)
            log_warn("{}: added token \"{}\" is matched on normalized text in HF; pelican matches it raw",
                     wa.str(), content);
        out.push_back({id, std::move(content), special});
    }
    return out;
}

}  // namespace

Status load_model(const json& root, const Where& w, TokenizerSpec& spec, TokenIds& ids) {
    const json* model = member(root, "model");
    if (!model || !model->is_object()) return make_error("{}: missing \"model\" object", w.str());
    Where wm = w.at("model");
    PELICAN_ASSIGN(spec.kind, detect_kind(root, *model, w));
    if (spec.kind != TokenizerKind::WordPiece) PELICAN_TRY(check_bpe_options(*model, wm, spec));

    const json* vocab = member(*model, "vocab");
    if (!vocab || !vocab->is_object())
        return make_error("{}: expected a token -> id object", wm.at("vocab").str());
    PELICAN_ASSIGN(auto added, read_added_tokens(root, w, member(root, "normalizer") != nullptr));

    // Size the id space: the largest id over vocab and added tokens, within sane bounds.
    int64_t max_id = -1;
    ids.reserve(vocab->size() + added.size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
        const json& v = it.value();
        int32_t id;
        if (v.is_number_unsigned() && v.get<uint64_t>() <= INT32_MAX) {
            id = static_cast<int32_t>(v.get<uint64_t>());  // the common case, without building a key path
        } else {
            PELICAN_ASSIGN(id, as_id(v, wm.at("vocab").at(it.key())));
        }
        ids.emplace(it.key(), id);
        max_id = std::max<int64_t>(max_id, id);
    }
    for (const Added& a : added) max_id = std::max<int64_t>(max_id, a.id);
    if (max_id < 0) return make_error("{}: empty vocabulary", wm.at("vocab").str());
    size_t n = static_cast<size_t>(max_id) + 1;
    if (n > vocab->size() + added.size() + kMaxGapSlack)
        return make_error("{}: token id {} is far beyond the {} tokens defined", w.str(), max_id,
                          vocab->size() + added.size());

    spec.tokens.assign(n, std::string());
    spec.types.assign(n, TokenType::Normal);
    std::vector<bool> filled(n, false);
    for (const auto& [text, id] : ids) {
        if (filled[id])
            return make_error("{}: id {} is used by both \"{}\" and \"{}\"", wm.at("vocab").str(), id,
                              spec.tokens[id], text);
        spec.tokens[id] = text;
        filled[id] = true;
    }
    for (const Added& a : added) {
        if (filled[a.id] && spec.tokens[a.id] != a.content)
            log_warn("{}: added token \"{}\" replaces vocab token \"{}\" at id {}",
                     w.at("added_tokens").str(), a.content, spec.tokens[a.id], a.id);
        if (auto it = ids.find(spec.tokens[a.id]); filled[a.id] && it != ids.end() && it->second == a.id)
            ids.erase(it);
        spec.tokens[a.id] = a.content;
        spec.types[a.id] = a.special ? TokenType::Control : TokenType::UserDefined;
        filled[a.id] = true;
        ids[a.content] = a.id;
    }
    size_t gaps = 0;
    for (size_t i = 0; i < n; ++i) {
        if (filled[i]) continue;  // a gap: a unique, unmatchable placeholder
        spec.tokens[i] = fmt::format("<pelican_unused_{}>", i);
        spec.types[i] = TokenType::Unused;
        ++gaps;
    }
    if (gaps) log_warn("{}: {} ids have no token; filled with placeholders", w.str(), gaps);

    PELICAN_ASSIGN(auto unk, opt_string(*model, "unk_token", wm));
    if (unk) {
        auto it = ids.find(*unk);
        if (it == ids.end())
            return make_error("{}: unk_token \"{}\" is not in the vocabulary", wm.str(), *unk);
        spec.unk_id = it->second;
        if (spec.types[spec.unk_id] == TokenType::Normal || spec.kind != TokenizerKind::BPE)
            spec.types[spec.unk_id] = TokenType::Unknown;
    }
    if (spec.kind == TokenizerKind::WordPiece) {
        PELICAN_ASSIGN(auto prefix, opt_string(*model, "continuing_subword_prefix", wm));
        if (prefix && *prefix != "##")
            return make_error("{}: WordPiece prefix \"{}\" is not supported (only \"##\")",
                              wm.at("continuing_subword_prefix").str(), *prefix);
        return {};
    }
    PELICAN_TRY(load_merges(*model, wm, spec));
    if (spec.kind == TokenizerKind::SPM) {
        for (size_t i = 0; i < n; ++i)
            if (spec.types[i] == TokenType::Normal && is_byte_piece(spec.tokens[i]))
                spec.types[i] = TokenType::Byte;
        fill_spm_scores(spec, ids);
    }
    return {};
}

}  // namespace pelican::hf
