// SentencePiece-style BPE (llama-spm, phi-3), as llama.cpp's SPM tokenizer runs it:
//
//   1. prepend " " when add_space_prefix is set and this is the first fragment; every ' ' -> "▁" (U+2581)
//   2. split into UTF-8 characters (a lead byte's length, clipped to the text: malformed input still
//      moves forward and ends up as byte tokens)
//   3. repeatedly merge the adjacent pair whose concatenation is a vocab token of highest score
//      (ties: leftmost), with a priority queue over bigrams and a linked list of symbols
//   4. emit each final symbol: its token if it is one, else one <0xXX> token per byte, else unk.
//
// Every merge creates a vocab token, so a final symbol that is not a token is always a single
// unmerged character: splitting such a symbol back "via its merges" (llama.cpp's rev_merge) can
// never apply, and step 4 goes straight to byte fallback.
#include <algorithm>
#include <array>
#include <queue>
#include <string>
#include <unordered_map>

#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁" U+2581

// Bytes of the UTF-8 sequence that starts with `lead` (1 for stray continuation bytes).
size_t utf8_seq_len(uint8_t lead) {
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[lead >> 4];
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

class SpmModel final : public TokenizerModel {
public:
    explicit SpmModel(const TokenizerSpec& spec) : spec_(spec) {
        ids_.reserve(spec.tokens.size() * 2);
        // Later duplicates win, as in llama.cpp's token_to_id.
        for (size_t i = 0; i < spec.tokens.size(); ++i) ids_[spec.tokens[i]] = static_cast<int32_t>(i);
        static constexpr char kHex[] = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15]};
            int32_t id = find(std::string(name, sizeof(name)) + ">");
            if (id < 0) id = find(std::string(1, static_cast<char>(b)));
            byte_ids_[b] = id;
        }
    }

    void encode_fragment(std::string_view text, bool first_fragment,
                         std::vector<int32_t>& out) const override {
        if (text.empty()) return;
        std::string s;
        s.reserve(text.size() * 2 + kSpace.size());
        if (first_fragment && spec_.add_space_prefix) s += kSpace;
        for (char c : text) {
            if (c == ' ')
                s += kSpace;
            else
                s += c;
        }
        encode_escaped(s, out);
    }

    std::string decode_token(int32_t id) const override {
        if (id < 0 || static_cast<size_t>(id) >= spec_.tokens.size()) return {};
        const std::string& t = spec_.tokens[id];
        if (type_of(id) == TokenType::Byte) {
            // "<0xXX>" -> that raw byte
            if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
                const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
                if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
            }
            return t;
        }
        std::string r;
        r.reserve(t.size());
        for (size_t i = 0; i < t.size();) {
            if (t.compare(i, kSpace.size(), kSpace) == 0) {
                r += ' ';
                i += kSpace.size();
            } else {
                r += t[i++];
            }
        }
        return r;
    }

private:
    struct Symbol {
        int32_t prev, next;  // neighbours in the linked list; -1 at the ends
        uint32_t off, n;     // byte range in the escaped text; n == 0 once merged into its left neighbour
    };
    struct Bigram {
        int32_t left, right;  // symbol indices
        float score;          // score of the merged token
        uint32_t size;        // bytes of the merged text when queued (stale if either side changed)
    };
    struct BigramOrder {
        // priority_queue pops the "largest": highest score, then the smallest left index
        bool operator()(const Bigram& a, const Bigram& b) const {
            return a.score < b.score || (a.score == b.score && a.left > b.left);
        }
    };
    using Queue = std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder>;

    int32_t find(std::string_view s) const {
        auto it = ids_.find(s);
        return it == ids_.end() ? -1 : it->second;
    }
    TokenType type_of(int32_t id) const {
        return static_cast<size_t>(id) < spec_.types.size() ? spec_.types[id] : TokenType::Normal;
    }
    float score_of(int32_t id) const {
        return static_cast<size_t>(id) < spec_.scores.size() ? spec_.scores[id] : 0.0f;
    }

    void try_add_bigram(const std::string& s, const std::vector<Symbol>& syms, int32_t left, int32_t right,
                        Queue& queue) const {
        if (left < 0 || right < 0) return;
        const uint32_t size = syms[left].n + syms[right].n;
        const int32_t id = find(std::string_view(s).substr(syms[left].off, size));
        if (id < 0) return;
        queue.push(Bigram{left, right, score_of(id), size});
    }

    void encode_escaped(const std::string& s, std::vector<int32_t>& out) const {
        std::vector<Symbol> syms;
        syms.reserve(s.size());
        for (size_t off = 0; off < s.size();) {
            const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(s[off])), s.size() - off);
            const auto idx = static_cast<int32_t>(syms.size());
            syms.push_back(Symbol{idx - 1, off + n == s.size() ? -1 : idx + 1, static_cast<uint32_t>(off),
                                  static_cast<uint32_t>(n)});
            off += n;
        }

        std::vector<Bigram> storage;
        storage.reserve(syms.size());
        Queue queue(BigramOrder{}, std::move(storage));
        for (size_t i = 1; i < syms.size(); ++i)
            try_add_bigram(s, syms, static_cast<int32_t>(i - 1), static_cast<int32_t>(i), queue);

        while (!queue.empty()) {
            const Bigram b = queue.top();
            queue.pop();
            Symbol& l = syms[b.left];
            Symbol& r = syms[b.right];
            // Stale entry: a side was merged away or grew since this pair was queued.
            if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
            l.n += r.n;
            r.n = 0;
            l.next = r.next;
            if (r.next >= 0) syms[r.next].prev = b.left;
            try_add_bigram(s, syms, l.prev, b.left, queue);
            try_add_bigram(s, syms, b.left, l.next, queue);
        }

        for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) emit(s, syms[i], out);
    }

    void emit(const std::string& s, const Symbol& sym, std::vector<int32_t>& out) const {
        const std::string_view text = std::string_view(s).substr(sym.off, sym.n);
        const int32_t id = find(text);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
        bool all_bytes = spec_.byte_fallback;
        for (size_t j = 0; all_bytes && j < text.size(); ++j)
            all_bytes = byte_ids_[static_cast<uint8_t>(text[j])] >= 0;
        if (all_bytes) {
            for (char c : text) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
        } else if (spec_.unk_id >= 0) {
            out.push_back(spec_.unk_id);
        }
    }

    const TokenizerSpec& spec_;
    std::unordered_map<std::string_view, int32_t> ids_;  // views into spec_.tokens
    std::array<int32_t, 256> byte_ids_{};                // byte -> <0xXX> token (or its 1-char token), -1
};

}  // namespace

Expected<std::unique_ptr<TokenizerModel>> make_spm_model(const TokenizerSpec& spec) {
    if (spec.tokens.empty()) return make_error("SPM tokenizer: empty vocabulary");
    if (!spec.scores.empty() && spec.scores.size() != spec.tokens.size())
        return make_error("SPM tokenizer: {} scores for {} tokens", spec.scores.size(), spec.tokens.size());
    if (!spec.types.empty() && spec.types.size() != spec.tokens.size())
        return make_error("SPM tokenizer: {} token types for {} tokens", spec.types.size(),
                          spec.tokens.size());
    if (spec.unk_id >= static_cast<int64_t>(spec.tokens.size()))
        return make_error("SPM tokenizer: unk id {} outside the vocabulary of {}", spec.unk_id,
                          spec.tokens.size());
    return std::unique_ptr<TokenizerModel>(new SpmModel(spec));
}

}  // namespace pelican
