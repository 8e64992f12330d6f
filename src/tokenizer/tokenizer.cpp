// Tokenizer: spec validation, added-token partitioning, BOS/EOS, decode.
#include "tokenizer/tokenizer.h"

#include "tokenizer/special_matcher.h"

namespace pelican {

namespace {

Status validate_spec(TokenizerSpec& spec) {
    const size_t n = spec.tokens.size();
    if (n == 0) return make_error("tokenizer has no tokens");
    if (n > static_cast<size_t>(INT32_MAX)) return make_error("tokenizer has too many tokens ({})", n);
    if (spec.types.empty()) spec.types.assign(n, TokenType::Normal);
    if (spec.types.size() != n) {
        return make_error("tokenizer has {} tokens but {} token types", n, spec.types.size());
    }
    if (!spec.scores.empty() && spec.scores.size() != n) {
        return make_error("tokenizer has {} tokens but {} scores", n, spec.scores.size());
    }
    const std::pair<const char*, int32_t*> ids[] = {
        {"bos", &spec.bos_id}, {"eos", &spec.eos_id}, {"unk", &spec.unk_id},   {"pad", &spec.pad_id},
        {"sep", &spec.sep_id}, {"cls", &spec.cls_id}, {"mask", &spec.mask_id},
    };
    for (const auto& [name, id] : ids) {
        if (*id < -1 || *id >= static_cast<int32_t>(n)) {
            return make_error("tokenizer {} token id {} is out of range (vocabulary has {} tokens)", name,
                              *id, n);
        }
    }
    if (spec.add_bos && spec.bos_id < 0) spec.add_bos = false;
    if (spec.add_eos && spec.eos_id < 0) spec.add_eos = false;
    if (spec.bos_text.empty() && spec.bos_id >= 0) spec.bos_text = spec.tokens[spec.bos_id];
    if (spec.eos_text.empty() && spec.eos_id >= 0) spec.eos_text = spec.tokens[spec.eos_id];
    return {};
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_spec(TokenizerSpec spec_in) {
    PELICAN_TRY(validate_spec(spec_in));
    Tokenizer tok;
    auto spec = std::make_shared<TokenizerSpec>(std::move(spec_in));
    tok.spec_ = spec;
    switch (spec->kind) {
        case TokenizerKind::BPE: {
            PELICAN_ASSIGN(tok.model_, make_bpe_model(*spec));
            break;
        }
        case TokenizerKind::SPM: {
            PELICAN_ASSIGN(tok.model_, make_spm_model(*spec));
            break;
        }
        case TokenizerKind::WordPiece: {
            PELICAN_ASSIGN(tok.model_, make_wordpiece_model(*spec));
            break;
        }
        default:
            return make_error("unknown tokenizer kind {}", static_cast<int>(spec->kind));
    }
    tok.specials_ = std::make_shared<const SpecialMatcher>(SpecialMatcher::build(*spec));
    return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (opt.add_special && spec_->add_bos) out.push_back(spec_->bos_id);
    // Raw fragments between added tokens; the SPM space prefix goes on a fragment that starts
    // the text or follows an added token (llama.cpp's behaviour).
    bool after_special = true;
    size_t pos = 0;
    while (pos < text.size()) {
        const SpecialMatcher::Match m = specials_->find(text, pos, opt.parse_special, opt.plain_ranges);
        const size_t end = m.id >= 0 ? m.pos : text.size();
        if (end > pos) {
            model_->encode_fragment(text.substr(pos, end - pos), after_special, out);
            after_special = false;
        }
        if (m.id < 0) break;
        out.push_back(m.id);
        after_special = true;
        pos = m.pos + m.len;
    }
    if (opt.add_special && spec_->add_eos) out.push_back(spec_->eos_id);
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string out;
    // SPM: the space prefix added by encode comes back on the first token; drop it once.
    bool strip_space = spec_->kind == TokenizerKind::SPM && spec_->add_space_prefix;
    for (int32_t id : ids) {
        if (id < 0 || id >= n_vocab()) continue;  // out-of-range ids are skipped
        const TokenType t = spec_->types[id];
        if (t == TokenType::Control && skip_special) continue;
        std::string piece = t == TokenType::Control ? spec_->tokens[id] : model_->decode_token(id);
        if (strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
        strip_space = false;
        out += piece;
    }
    return out;
}

std::vector<TextRange> Tokenizer::find_special_texts(std::string_view text) const {
    std::vector<TextRange> out;
    size_t pos = 0;
    while (pos < text.size()) {
        const SpecialMatcher::Match m = specials_->find(text, pos, /*parse_special=*/true);
        if (m.id < 0) break;
        if (is_special(m.id)) out.push_back({m.pos, m.pos + m.len});
        pos = m.pos + m.len;
    }
    return out;
}

bool Tokenizer::is_special(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return false;
    const TokenType t = spec_->types[static_cast<size_t>(id)];
    return t == TokenType::Control || t == TokenType::Unknown;
}

std::string Tokenizer::token_text(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return {};
    return spec_->tokens[id];
}

}  // namespace pelican
