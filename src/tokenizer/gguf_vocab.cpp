// Tokenizer::from_gguf: GGUF tokenizer.* metadata -> TokenizerSpec, with llama.cpp's defaults
// per model type:
//   "gpt2"  -> byte-level BPE. Pre-tokenizer from tokenizer.ggml.pre; a missing or unknown name
//              falls back to the GPT-2 regex with a warning (llama.cpp also keeps going). BOS is
//              added only for llama-3 style pre names or when add_bos_token says so.
//   "llama" -> SentencePiece: add_bos and add_space_prefix default to true; bos 1, eos 2, unk 0.
//   "bert"  -> WordPiece: lowercases; [CLS]=bos (101) is prepended and [SEP] (102) appended.
// Explicit tokenizer.ggml.add_{bos,eos}_token / add_space_prefix keys override the defaults.
#include <optional>
#include <string>

#include "core/log.h"
#include "formats/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pelican {

namespace {

// String array elements; nullopt when the key is absent, error when it has another type.
Expected<std::optional<std::vector<std::string>>> string_array(const GgufFile& f, std::string_view key) {
    const GgufValue* v = f.find(key);
    if (!v) return std::optional<std::vector<std::string>>();
    if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING) {
        return make_error("{}: {} is not an array of strings", f.name(), key);
    }
    std::vector<std::string> out;
    out.reserve(v->arr.size());
    for (const GgufValue& e : v->arr) out.push_back(e.str);
    return std::optional<std::vector<std::string>>(std::move(out));
}

// Bool stored as bool or integer; nullopt when absent or of another type.
std::optional<bool> flag(const GgufFile& f, std::string_view key) {
    const GgufValue* v = f.find(key);
    if (!v || v->type == GgufType::ARRAY || v->type == GgufType::STRING) return std::nullopt;
    auto i = v->as_int();
    if (!i) return std::nullopt;
    return *i != 0;
}

// Reads an optional token id; out-of-range values keep `id` unchanged with a warning.
void read_id(const GgufFile& f, std::string_view key, size_t n_tokens, int32_t& id) {
    const GgufValue* v = f.find(key);
    if (!v || v->type == GgufType::ARRAY || v->type == GgufType::STRING) return;
    auto i = v->as_int();
    if (!i) return;
    if (*i < 0 || static_cast<uint64_t>(*i) >= n_tokens) {
        log_warn("{}: {} = {} is outside the vocabulary of {} tokens; ignored", f.name(), key, *i, n_tokens);
        return;
    }
    id = static_cast<int32_t>(*i);
}

// llama.cpp's built-in ids, kept only when they exist in this vocabulary.
int32_t default_id(int32_t id, size_t n_tokens) {
    return id >= 0 && static_cast<size_t>(id) < n_tokens ? id : -1;
}

Status read_merges(const GgufFile& f, TokenizerSpec& spec) {
    PELICAN_ASSIGN(auto merges, string_array(f, "tokenizer.ggml.merges"));
    if (!merges) return make_error("{}: BPE tokenizer without tokenizer.ggml.merges", f.name());
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const std::string& m = (*merges)[i];
        // Split at the first space after the first byte (a part may itself start with a space).
        const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (sp == std::string::npos) {
            return make_error("{}: tokenizer.ggml.merges[{}] = \"{}\" is not \"left right\"", f.name(), i, m);
        }
        spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    return {};
}

void configure_bpe(const GgufFile& f, TokenizerSpec& spec) {
    spec.kind = TokenizerKind::BPE;
    spec.pre_name = f.get_string("tokenizer.ggml.pre").value_or("");
    const PreTokenizerPreset* p = find_pretokenizer_preset(spec.pre_name);
    if (!p) {
        const std::string what = spec.pre_name.empty() ? "no tokenizer.ggml.pre"
                                                       : "unknown pre-tokenizer \"" + spec.pre_name + "\"";
        log_warn("{}: {}; using the GPT-2 regex (tokens may differ from the reference)", f.name(), what);
        p = &default_pretokenizer_preset();
    }
    spec.pre_regexes = p->regexes;
    spec.ignore_merges = p->ignore_merges;
    spec.add_bos = p->add_bos;
    spec.clean_spaces = p->clean_spaces;
    spec.normalize_nfc = p->normalize_nfc;
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
    const std::optional<std::string> model = f.get_string("tokenizer.ggml.model");
    if (!model) return make_error("{}: no tokenizer (tokenizer.ggml.model is missing)", f.name());

    TokenizerSpec spec;
    PELICAN_ASSIGN(auto tokens, string_array(f, "tokenizer.ggml.tokens"));
    if (!tokens || tokens->empty()) return make_error("{}: no tokenizer.ggml.tokens", f.name());
    spec.tokens = std::move(*tokens);
    const size_t n = spec.tokens.size();

    if (const GgufValue* v = f.find("tokenizer.ggml.scores")) {
        if (v->type != GgufType::ARRAY || v->arr.size() != n) {
            return make_error("{}: tokenizer.ggml.scores must be an array of {} numbers", f.name(), n);
        }
        spec.scores.reserve(n);
        for (const GgufValue& e : v->arr) {
            auto x = e.as_float();
            if (!x) return make_error("{}: tokenizer.ggml.scores holds a non-number", f.name());
            spec.scores.push_back(static_cast<float>(*x));
        }
    }
    if (const GgufValue* v = f.find("tokenizer.ggml.token_type")) {
        if (v->type != GgufType::ARRAY || v->arr.size() != n) {
            return make_error("{}: tokenizer.ggml.token_type must be an array of {} integers", f.name(), n);
        }
        spec.types.reserve(n);
        for (const GgufValue& e : v->arr) {
            auto t = e.as_int();
            if (!t) return make_error("{}: tokenizer.ggml.token_type holds a non-integer", f.name());
            spec.types.push_back(*t >= 0 && *t <= 6 ? static_cast<TokenType>(*t) : TokenType::Undefined);
        }
    }

    bool add_sep = false;
    if (*model == "gpt2") {
        configure_bpe(f, spec);
        PELICAN_TRY(read_merges(f, spec));
    } else if (*model == "llama") {
        spec.kind = TokenizerKind::SPM;
        spec.add_bos = true;
        spec.add_space_prefix = true;
        spec.bos_id = default_id(1, n);
        spec.eos_id = default_id(2, n);
        spec.unk_id = default_id(0, n);
    } else if (*model == "bert") {
        spec.kind = TokenizerKind::WordPiece;
        spec.lowercase = true;
        spec.add_bos = true;
        add_sep = true;
        spec.bos_id = spec.cls_id = default_id(101, n);
        spec.unk_id = default_id(100, n);
        spec.sep_id = default_id(102, n);
        spec.pad_id = default_id(0, n);
        spec.mask_id = default_id(103, n);
    } else {
        return make_error("{}: unsupported tokenizer model \"{}\" (expected gpt2, llama or bert)", f.name(),
                          *model);
    }

    read_id(f, "tokenizer.ggml.bos_token_id", n, spec.bos_id);
    read_id(f, "tokenizer.ggml.eos_token_id", n, spec.eos_id);
    read_id(f, "tokenizer.ggml.unknown_token_id", n, spec.unk_id);
    read_id(f, "tokenizer.ggml.seperator_token_id", n, spec.sep_id);  // sic, llama.cpp's key
    read_id(f, "tokenizer.ggml.separator_token_id", n, spec.sep_id);
    read_id(f, "tokenizer.ggml.padding_token_id", n, spec.pad_id);
    read_id(f, "tokenizer.ggml.cls_token_id", n, spec.cls_id);
    read_id(f, "tokenizer.ggml.mask_token_id", n, spec.mask_id);

    if (auto b = flag(f, "tokenizer.ggml.add_bos_token")) spec.add_bos = *b;
    if (auto b = flag(f, "tokenizer.ggml.add_eos_token")) spec.add_eos = *b;
    if (auto b = flag(f, "tokenizer.ggml.add_sep_token")) add_sep = *b;
    if (auto b = flag(f, "tokenizer.ggml.add_space_prefix")) spec.add_space_prefix = *b;
    if (add_sep && spec.sep_id >= 0 && (spec.eos_id < 0 || spec.eos_id == spec.sep_id)) {
        spec.eos_id = spec.sep_id;  // WordPiece "[CLS] text [SEP]": SEP plays the EOS role
        spec.add_eos = true;
    }

    spec.chat_template = f.get_string("tokenizer.chat_template").value_or("");
    return from_spec(std::move(spec));
}

}  // namespace pelican
