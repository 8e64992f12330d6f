// tokenizer.json normalizer / pre_tokenizer / post_processor / decoder -> TokenizerSpec flags.
// Each stage accepts exactly what pelican's models implement and names anything else.
#include "core/log.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace pelican::hf {
namespace {

constexpr int kMaxDepth = 8;                    // Sequence nesting accepted in a component
constexpr const char* kSpace = "\xE2\x96\x81";  // "▁" U+2581

// GPT-2's pre-tokenizer regex, used by ByteLevel{use_regex: true}.
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Iterates the children of a Sequence (key = "normalizers", ...) or the component itself.
template <typename F>
Status for_each_leaf(const json& c, const char* list_key, const Where& w, F&& f, int depth = 0) {
    if (depth > kMaxDepth) return make_error("{}: Sequence nested too deeply", w.str());
    PELICAN_ASSIGN(std::string type, component_type(c, w));
    if (type != "Sequence") return f(c, type, w);
    const json* list = member(c, list_key);
    if (!list || !list->is_array()) return make_error("{}: expected an array", w.at(list_key).str());
    for (size_t i = 0; i < list->size(); ++i)
        PELICAN_TRY(for_each_leaf((*list)[i], list_key, w.at(list_key).index(i), f, depth + 1));
    return {};
}

// A literal string as a PCRE2 pattern (punctuation escaped; other bytes stand for themselves).
std::string regex_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

Status load_normalizer(const json& root, const Where& w, TokenizerSpec& spec) {
    const json* norm = member(root, "normalizer");
    if (!norm) return {};
    return for_each_leaf(
        *norm, "normalizers", w.at("normalizer"),
        [&](const json& c, const std::string& type, const Where& wc) -> Status {
            if (type == "NFC" && spec.kind == TokenizerKind::BPE) {
                spec.normalize_nfc = true;
                return {};
            }
            if (spec.kind == TokenizerKind::SPM && type == "Prepend") {
                PELICAN_ASSIGN(std::string p, get_string(c, "prepend", wc));
                if (p != kSpace)
                    return make_error("{}: Prepend \"{}\" is not supported (only \"▁\")", wc.str(), p);
                spec.add_space_prefix = true;
                return {};
            }
            if (spec.kind == TokenizerKind::SPM && type == "Replace") {  // " " -> "▁" is built into SPM
                const json* pat = member(c, "pattern");
                const json* str = pat ? member(*pat, "String") : nullptr;
                PELICAN_ASSIGN(std::string content, get_string(c, "content", wc));
                if (!str || *str != " " || content != kSpace)
                    return make_error("{}: only Replace(\" \" -> \"▁\") is supported", wc.str());
                return {};
            }
            if (spec.kind == TokenizerKind::WordPiece && type == "BertNormalizer") {
                PELICAN_ASSIGN(spec.lowercase, opt_bool(c, "lowercase", true, wc));
                const json* accents = member(c, "strip_accents");  // null: follows lowercase
                if (accents && (!accents->is_boolean() || accents->get<bool>() != spec.lowercase))
                    return make_error("{}: strip_accents different from lowercase is not supported",
                                      wc.str());
                return {};
            }
            return make_error("{}: unsupported normalizer {}", wc.str(), type);
        });
}

Status load_pre_tokenizer(const json& root, const Where& w, TokenizerSpec& spec) {
    const json* pre = member(root, "pre_tokenizer");
    if (!pre) return {};
    return for_each_leaf(
        *pre, "pretokenizers", w.at("pre_tokenizer"),
        [&](const json& c, const std::string& type, const Where& wc) -> Status {
            if (spec.kind == TokenizerKind::BPE && type == "Split") {
                const json* pat = member(c, "pattern");
                if (!pat || !pat->is_object()) return make_error("{}: missing pattern", wc.str());
                PELICAN_ASSIGN(auto re, opt_string(*pat, "Regex", wc.at("pattern")));
                PELICAN_ASSIGN(auto str, opt_string(*pat, "String", wc.at("pattern")));
                if (!re && !str) return make_error("{}: pattern needs Regex or String", wc.str());
                PELICAN_ASSIGN(std::string behavior, get_string(c, "behavior", wc));
                PELICAN_ASSIGN(bool invert, opt_bool(c, "invert", false, wc));
                if (behavior != "Isolated" || invert)
                    return make_error("{}: Split behavior {}{} is not supported (only Isolated)", wc.str(),
                                      behavior, invert ? " with invert" : "");
                spec.pre_regexes.push_back(re ? *re : regex_escape(*str));
                return {};
            }
            if (spec.kind == TokenizerKind::BPE && type == "ByteLevel") {
                PELICAN_ASSIGN(bool prefix, opt_bool(c, "add_prefix_space", false, wc));
                if (prefix)
                    return make_error("{}: ByteLevel add_prefix_space=true is not supported", wc.str());
                PELICAN_ASSIGN(bool use_regex, opt_bool(c, "use_regex", true, wc));
                if (use_regex) spec.pre_regexes.push_back(kGpt2Regex);
                return {};
            }
            if (spec.kind == TokenizerKind::BPE && type == "Digits") {
                PELICAN_ASSIGN(bool single, opt_bool(c, "individual_digits", false, wc));
                spec.pre_regexes.push_back(single ? "\\p{N}" : "\\p{N}+");
                return {};
            }
            if (spec.kind == TokenizerKind::SPM && type == "Metaspace") {
                PELICAN_ASSIGN(std::string rep, get_string(c, "replacement", wc));
                if (rep != kSpace)
                    return make_error("{}: Metaspace replacement \"{}\" is not supported", wc.str(), rep);
                PELICAN_ASSIGN(bool split, opt_bool(c, "split", true, wc));
                if (split) return make_error("{}: Metaspace split=true is not supported", wc.str());
                PELICAN_ASSIGN(auto scheme, opt_string(c, "prepend_scheme", wc));
                PELICAN_ASSIGN(bool prefix, opt_bool(c, "add_prefix_space", true, wc));
                if (scheme && *scheme != "always" && *scheme != "first" && *scheme != "never")
                    return make_error("{}: unknown prepend_scheme \"{}\"", wc.str(), *scheme);
                spec.add_space_prefix = scheme ? *scheme != "never" : prefix;
                return {};
            }
            if (spec.kind == TokenizerKind::WordPiece && type == "BertPreTokenizer") return {};
            return make_error("{}: unsupported pre_tokenizer {}", wc.str(), type);
        });
}

// One id of a TemplateProcessing special token entry {"id": "<s>", "ids": [1], ...}.
Expected<int32_t> template_special_id(const json& tp, const std::string& name, const Where& w) {
    const json* specials = member(tp, "special_tokens");
    const json* entry = specials ? member(*specials, name) : nullptr;
    if (!entry) return make_error("{}: special token \"{}\" is not in special_tokens", w.str(), name);
    const json* ids = member(*entry, "ids");
    if (!ids || !ids->is_array() || ids->size() != 1)
        return make_error("{}: special token \"{}\" must have exactly one id", w.str(), name);
    return as_id((*ids)[0], w.at("special_tokens").at(name).at("ids"));
}

// TemplateProcessing "single": [SpecialToken*, Sequence A, SpecialToken*] with at most one each side.
Status load_template(const json& tp, const Where& w, TokenizerSpec& spec) {
    const json* single = member(tp, "single");
    if (!single || !single->is_array()) return make_error("{}: expected an array", w.at("single").str());
    std::vector<int32_t> before, after;
    bool seen_seq = false;
    for (size_t i = 0; i < single->size(); ++i) {
        const json& item = (*single)[i];
        Where wi = w.at("single").index(i);
        if (const json* s = member(item, "Sequence")) {
            PELICAN_ASSIGN(std::string id, get_string(*s, "id", wi.at("Sequence")));
            if (id != "A" || seen_seq) return make_error("{}: unexpected sequence {}", wi.str(), id);
            seen_seq = true;
        } else if (const json* s = member(item, "SpecialToken")) {
            PELICAN_ASSIGN(std::string name, get_string(*s, "id", wi.at("SpecialToken")));
            PELICAN_ASSIGN(int32_t id, template_special_id(tp, name, w));
            (seen_seq ? after : before).push_back(id);
        } else {
            return make_error("{}: expected Sequence or SpecialToken", wi.str());
        }
    }
    if (!seen_seq || before.size() > 1 || after.size() > 1)
        return make_error("{}: only [BOS] $A [EOS] templates are supported", w.at("single").str());
    if (!before.empty()) spec.add_bos = true, spec.bos_id = before[0];
    if (!after.empty()) spec.add_eos = true, spec.eos_id = after[0];
    return {};
}

Status load_post_processor(const json& root, const Where& w, TokenizerSpec& spec) {
    const json* post = member(root, "post_processor");
    if (!post) return {};
    return for_each_leaf(*post, "processors", w.at("post_processor"),
                         [&](const json& c, const std::string& type, const Where& wc) -> Status {
                             if (type == "ByteLevel") return {};  // only trims offsets
                             if (type == "TemplateProcessing") return load_template(c, wc, spec);
                             if (type == "BertProcessing" || type == "RobertaProcessing") {
                                 for (const char* key : {"cls", "sep"}) {
                                     const json* pair = member(c, key);
                                     if (!pair || !pair->is_array() || pair->size() != 2)
                                         return make_error("{}: expected [token, id]", wc.at(key).str());
                                     PELICAN_ASSIGN(int32_t id, as_id((*pair)[1], wc.at(key)));
                                     (key[0] == 'c' ? spec.cls_id : spec.sep_id) = id;
                                 }
                                 spec.add_bos = spec.add_eos = true;
                                 spec.bos_id = spec.cls_id;
                                 spec.eos_id = spec.sep_id;
                                 return {};
                             }
                             return make_error("{}: unsupported post_processor {}", wc.str(), type);
                         });
}

// The decoder is implied by the kind; check that it matches and warn otherwise.
Status check_decoder(const json& root, const Where& w, const TokenizerSpec& spec) {
    const json* dec = member(root, "decoder");
    if (!dec) return {};
    return for_each_leaf(*dec, "decoders", w.at("decoder"),
                         [&](const json&, const std::string& type, const Where& wc) -> Status {
                             bool ok = false;
                             switch (spec.kind) {
                                 case TokenizerKind::BPE:
                                     ok = type == "ByteLevel";
                                     break;
                                 case TokenizerKind::SPM:
                                     ok = type == "Replace" || type == "ByteFallback" || type == "Fuse" ||
                                          type == "Strip" || type == "Metaspace";
                                     break;
                                 case TokenizerKind::WordPiece:
                                     ok = type == "WordPiece";
                                     break;
                             }
                             if (!ok)
                                 log_warn("{}: decoder {} is not implemented; decoding may differ from HF",
                                          wc.str(), type);
                             return {};
                         });
}

}  // namespace

Status load_pipeline(const json& root, const Where& w, TokenizerSpec& spec, const TokenIds& ids) {
    (void)ids;
    PELICAN_TRY(load_normalizer(root, w, spec));
    PELICAN_TRY(load_pre_tokenizer(root, w, spec));
    PELICAN_TRY(load_post_processor(root, w, spec));
    PELICAN_TRY(check_decoder(root, w, spec));
    if (spec.kind == TokenizerKind::BPE && spec.pre_regexes.empty())
        log_warn("{}: byte-level BPE without a splitting pre-tokenizer; the whole text is one piece",
                 w.str());
    if (spec.kind == TokenizerKind::WordPiece) {  // BERT specials, when the vocab has them
        auto find = [&](const char* t) {
            auto it = ids.find(t);
            return it == ids.end() ? -1 : it->second;
        };
        if (spec.cls_id < 0) spec.cls_id = find("[CLS]");
        if (spec.sep_id < 0) spec.sep_id = find("[SEP]");
        if (spec.pad_id < 0) spec.pad_id = find("[PAD]");
        if (spec.mask_id < 0) spec.mask_id = find("[MASK]");
    }
    for (int32_t id : {spec.bos_id, spec.eos_id, spec.cls_id, spec.sep_id})
        if (id >= static_cast<int64_t>(spec.tokens.size()))
            return make_error("{}: special token id {} is outside the vocabulary of {}", w.str(), id,
                              spec.tokens.size());
    return {};
}

}  // namespace pelican::hf
