// WordPiece (BERT, bert-bge): bert_pre_tokenize() splits the text into words, then each word is cut
// greedily into the longest vocab pieces, left to right (HF tokenizers' WordPiece model). A word
// longer than 100 characters, or one with a position no piece matches, becomes a single unk.
//
// Two vocab conventions, detected from the token list:
//   HF:    word-initial pieces are plain ("hello"), continuations carry "##" ("##ing")
//   GGUF:  llama.cpp's converter rewrites them: word-initial pieces carry "▁" ("▁hello"),
//          continuations are plain ("ing"); "[...]" tokens are kept as they are
// Decode rule (decode_token): GGUF: "▁" -> " ", other text as stored; HF: "##x" -> "x", a
// normal token -> " " + text. Either way a decoded sequence reads " hello world" (the words,
// each after one space; the caller trims the leading one). Control/unknown/user-defined
// tokens decode to their stored text.
#include <algorithm>
#include <unordered_map>

#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece_pretok.h"

namespace pelican {
namespace {

constexpr std::string_view kPhantom = "\xE2\x96\x81";  // "▁" U+2581
constexpr std::string_view kHashes = "##";
constexpr size_t kMaxWordChars = 100;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

class WordPieceModel final : public TokenizerModel {
public:
    explicit WordPieceModel(const TokenizerSpec& spec) : spec_(spec) {
        size_t n_phantom = 0, n_hashes = 0;
        ids_.reserve(spec.tokens.size() * 2);
        for (size_t i = 0; i < spec.tokens.size(); ++i) {
            const std::string& t = spec.tokens[i];
            ids_.emplace(t, static_cast<int32_t>(i));  // the first of duplicates wins, as HF's vocab map
            max_token_bytes_ = std::max(max_token_bytes_, t.size());
            n_phantom += starts_with(t, kPhantom) && t.size() > kPhantom.size();
            n_hashes += starts_with(t, kHashes) && t.size() > kHashes.size();
        }
        phantom_ = n_phantom > n_hashes;
        first_prefix_ = phantom_ ? kPhantom : std::string_view{};
        cont_prefix_ = phantom_ ? std::string_view{} : kHashes;
        unk_id_ = spec.unk_id >= 0 ? spec.unk_id : find("[UNK]");
    }

    void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
        for (const std::string& word : bert_pre_tokenize(text, spec_.lowercase)) encode_word(word, out);
    }

    std::string decode_token(int32_t id) const override {
        if (id < 0 || static_cast<size_t>(id) >= spec_.tokens.size()) return {};
        const std::string& t = spec_.tokens[id];
        const TokenType type =
            static_cast<size_t>(id) < spec_.types.size() ? spec_.types[id] : TokenType::Normal;
        if (type == TokenType::Control || type == TokenType::Unknown || type == TokenType::UserDefined)
            return t;
        // (appends, not " " + t: GCC 12 -O3 flags that with a false -Wrestrict)
        std::string r;
        if (phantom_) {
            if (!starts_with(t, kPhantom)) return t;
            r += ' ';
            r.append(t, kPhantom.size());
        } else {
            if (starts_with(t, kHashes)) return t.substr(kHashes.size());
            r += ' ';
            r += t;
        }
        return r;
    }

private:
    int32_t find(std::string_view s) const {
        auto it = ids_.find(s);
        return it == ids_.end() ? -1 : it->second;
    }

    void encode_word(const std::string& word, std::vector<int32_t>& out) const {
        // Byte offsets of character boundaries: bounds[k] starts character k; bounds.back() == size.
        std::vector<size_t> bounds;
        for (size_t i = 0; i < word.size(); ++i)
            if ((static_cast<uint8_t>(word[i]) & 0xC0) != 0x80) bounds.push_back(i);
        bounds.push_back(word.size());
        const size_t n_chars = bounds.size() - 1;

        const size_t mark = out.size();
        bool ok = n_chars <= kMaxWordChars;
        std::string piece;
        for (size_t start = 0; ok && start < n_chars;) {
            const std::string_view prefix = start == 0 ? first_prefix_ : cont_prefix_;
            int32_t id = -1;
            size_t end = n_chars;
            for (; end > start; --end) {
                const size_t len = bounds[end] - bounds[start];
                if (len + prefix.size() > max_token_bytes_) continue;
                piece.assign(prefix);
                piece.append(word, bounds[start], len);
                id = find(piece);
                if (id >= 0) break;
            }
            if (id < 0) {
                ok = false;
                break;
            }
            out.push_back(id);
            start = end;
        }
        if (!ok) {
            out.resize(mark);
            if (unk_id_ >= 0) out.push_back(unk_id_);
        }
    }

    const TokenizerSpec& spec_;
    std::unordered_map<std::string_view, int32_t> ids_;  // views into spec_.tokens
    size_t max_token_bytes_ = 0;
    bool phantom_ = false;  // GGUF "▁word"/"piece" convention instead of HF "word"/"##piece"
    std::string_view first_prefix_, cont_prefix_;
    int32_t unk_id_ = -1;
};

}  // namespace

Expected<std::unique_ptr<TokenizerModel>> make_wordpiece_model(const TokenizerSpec& spec) {
    if (spec.tokens.empty()) return make_error("WordPiece tokenizer: empty vocabulary");
    if (!spec.types.empty() && spec.types.size() != spec.tokens.size())
        return make_error("WordPiece tokenizer: {} token types for {} tokens", spec.types.size(),
                          spec.tokens.size());
    if (spec.unk_id >= static_cast<int64_t>(spec.tokens.size()))
        return make_error("WordPiece tokenizer: unk id {} outside the vocabulary of {}", spec.unk_id,
                          spec.tokens.size());
    return std::unique_ptr<TokenizerModel>(new WordPieceModel(spec));
}

}  // namespace pelican
