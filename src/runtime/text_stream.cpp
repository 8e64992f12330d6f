// Streaming detokenization with stop strings (see text_stream.h).
#include "runtime/text_stream.h"

#include <algorithm>
#include <array>

#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace pelican {

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
    size_t safe = pending_.size();
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
    pending_ += repair_.push(token_piece(id));
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
    // An unfinished sequence at the end becomes U+FFFD, as transformers' decode makes it. (A stop
    // string cannot begin inside it: stop strings are matched on well-formed text.)
    pending_ += repair_.finish();
    for (const std::string& s : stop_) {
        const size_t cut = pending_.find(s);
        if (cut != std::string::npos) {
            stopped_ = true;
            pending_.resize(cut);
        }
    }
    std::string out = std::move(pending_);
    pending_.clear();
    emitted_ += out;
    return out;
}

}  // namespace pelican
