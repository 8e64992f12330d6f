// Streaming detokenization with stop strings (see text_stream.h).
#include "runtime/text_stream.h"

#include <algorithm>
#include <array>

#include "tokenizer/tokenizer.h"

namespace pelican {

size_t utf8_complete_prefix(const std::string& s) {
    // Walk back over at most 3 continuation bytes to the last lead byte.
    const size_t n = s.size();
    for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte
        size_t need = 1;
        if ((c & 0xE0) == 0xC0)
            need = 2;
        else if ((c & 0xF0) == 0xE0)
            need = 3;
        else if ((c & 0xF8) == 0xF0)
            need = 4;
        return need > back ? n - back : n;
    }
    return n;
}

TokenTextStream::TokenTextStream(const Tokenizer* tok, std::vector<std::string> stop) : tok_(tok) {
    for (auto& s : stop)
        if (!s.empty()) stop_.push_back(std::move(s));
    if (!tok_) return;
    // Anchor: a plain token whose text starts with a letter, so the SPM "strip the first leading
    // space" rule applies to it and not to the piece after it.
    const TokenizerSpec& spec = tok_->spec();
    for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
        if (spec.types[static_cast<size_t>(id)] != TokenType::Normal) continue;
        const std::array<int32_t, 1> one{id};
        const std::string text = tok_->decode(one, true);
        if (text.empty() || static_cast<unsigned char>(text[0]) >= 0x80 || text[0] == ' ') continue;
        anchor_ = id;
        anchor_len_ = text.size();
        break;
    }
}

std::string TokenTextStream::token_piece(int32_t id) const {
    if (!tok_) return {};
    if (anchor_ < 0) {
        const std::array<int32_t, 1> one{id};
        return tok_->decode(one, true);
    }
    const std::array<int32_t, 2> two{anchor_, id};
    std::string s = tok_->decode(two, true);
    return s.size() >= anchor_len_ ? s.substr(anchor_len_) : std::string();
}

size_t TokenTextStream::safe_length() const {
    size_t safe = utf8_complete_prefix(pending_);
    // Hold back a suffix that is a proper prefix of some stop string.
    for (const std::string& s : stop_) {
        const size_t max_k = std::min(s.size() - 1, pending_.size());
        for (size_t k = max_k; k > 0; --k) {
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                safe = std::min(safe, pending_.size() - k);
                break;
            }
        }
    }
    return safe;
}

std::string TokenTextStream::push(int32_t id) {
    if (stopped_) return {};
    pending_ += token_piece(id);
    // A stop string may straddle earlier emitted text only within the held-back part, which
    // pending_ still holds; search there.
    size_t cut = std::string::npos;
    for (const std::string& s : stop_) cut = std::min(cut, pending_.find(s));
    std::string out;
    if (cut != std::string::npos) {
        stopped_ = true;
        out = pending_.substr(0, cut);
        pending_.clear();
    } else {
        const size_t n = safe_length();
        out = pending_.substr(0, n);
        pending_.erase(0, n);
    }
    emitted_ += out;
    return out;
}

std::string TokenTextStream::finish() {
    if (stopped_) return {};
    std::string out = std::move(pending_);
    pending_.clear();
    emitted_ += out;
    return out;
}

}  // namespace pelican
