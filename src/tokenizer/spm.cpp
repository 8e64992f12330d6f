// SentencePiece-style BPE (llama-spm, phi-3), as llama.cpp's SPM tokenizer runs it:
//
//   1. prepend " " when add_space_prefix is set and this is the first fragment; every ' ' -> "▁" (U+2581)
//   2. split into UTF-8 characters (see char_len for malformed input, which ends up as byte tokens)
//   3. repeatedly merge the adjacent pair whose concatenation is a vocab token of highest score
//      (ties: leftmost), with a priority queue over bigrams and a linked list of symbols
//   4. emit each final symbol: its token if it is one, else one <0xXX> token per byte, else unk.
//
// Every merge creates a vocab token, so a final symbol that is not a token is always a single
// unmerged character: splitting such a symbol back "via its merges" (llama.cpp's rev_merge) can
// never apply, and step 4 goes straight to byte fallback.
#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁" U+2581
constexpr size_t kMaxChunk = size_t{1} << 28;        // bytes

// Bytes of the character at s[off]: the length its lead byte announces when the continuation bytes
// are there, else 1 (a malformed byte stands alone and later becomes a byte token). Identical to
// llama.cpp's split on valid UTF-8; on invalid input it never swallows a following character.
size_t char_len(std::string_view s, size_t off) {
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    const size_t n = kLen[static_cast<uint8_t>(s[off]) >> 4];
    if (off + n > s.size()) return 1;
    for (size_t i = 1; i < n; ++i)
        if ((static_cast<uint8_t>(s[off + i]) & 0xC0) != 0x80) return 1;
    return n;
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
        index_pairs();
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
        // the heap top is the "largest": highest score, then the smallest left index
        bool operator()(const Bigram& a, const Bigram& b) const {
            return a.score < b.score || (a.score == b.score && a.left > b.left);
        }
    };

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

    // Scratch space reused across the chunks of one call.
    struct Work {
        std::vector<Symbol> syms;
        std::vector<Bigram> heap;  // max-heap by BigramOrder
    };

    void try_add_bigram(std::string_view s, Work& w, int32_t left, int32_t right) const {
        if (left < 0 || right < 0) return;
        const uint32_t size = w.syms[left].n + w.syms[right].n;
        const int32_t id = find(s.substr(w.syms[left].off, size));
        if (id < 0) return;
        w.heap.push_back(Bigram{left, right, score_of(id), size});
        std::push_heap(w.heap.begin(), w.heap.end(), BigramOrder{});
    }

    // Packs one character (<= 4 bytes) into an integer: a key for pairs_.
    static uint64_t char_key(std::string_view s, size_t off, size_t n) {
        uint64_t k = n;
        for (size_t i = 0; i < n; ++i) k = (k << 8) | static_cast<uint8_t>(s[off + i]);
        return k;
    }
    // A collision only means a missed cut (slower, never different).
    static uint64_t pair_key(uint64_t a, uint64_t b) { return (a * 0x9E3779B97F4A7C15ull) ^ b; }

    // Every pair of adjacent characters inside a token. A symbol can only span the boundary between two
    // characters whose pair is listed (every symbol is a token or one character), so the text is cut
    // into independent chunks at all other boundaries: same result, far smaller queues.
    void index_pairs() {
        for (const std::string& t : spec_.tokens) {
            uint64_t prev = 0;
            for (size_t off = 0; off < t.size();) {
                const size_t n = char_len(t, off);
                const uint64_t cur = char_key(t, off, n);
                if (off > 0) pairs_.insert(pair_key(prev, cur));
                prev = cur;
                off += n;
            }
        }
    }

    void encode_escaped(std::string_view s, std::vector<int32_t>& out) const {
        Work w;
        size_t chunk = 0;
        uint64_t prev = 0;
        for (size_t off = 0; off < s.size();) {
            const size_t n = char_len(s, off);
            const uint64_t cur = char_key(s, off, n);
            // (A chunk is also cut at kMaxChunk bytes so symbol offsets fit 32 bits; only inputs
            // with no natural cut for 256 MiB are affected.)
            if (off > chunk && (off - chunk >= kMaxChunk || !pairs_.count(pair_key(prev, cur)))) {
                encode_chunk(s.substr(chunk, off - chunk), w, out);
                chunk = off;
            }
            prev = cur;
            off += n;
        }
        encode_chunk(s.substr(chunk), w, out);
    }

    void encode_chunk(std::string_view s, Work& w, std::vector<int32_t>& out) const {
        if (s.empty()) return;
        auto& syms = w.syms;
        syms.clear();
        w.heap.clear();
        for (size_t off = 0; off < s.size();) {
            const size_t n = char_len(s, off);
            const auto idx = static_cast<int32_t>(syms.size());
            syms.push_back(Symbol{idx - 1, off + n == s.size() ? -1 : idx + 1, static_cast<uint32_t>(off),
                                  static_cast<uint32_t>(n)});
            off += n;
        }
        for (size_t i = 1; i < syms.size(); ++i)
            try_add_bigram(s, w, static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

        while (!w.heap.empty()) {
            std::pop_heap(w.heap.begin(), w.heap.end(), BigramOrder{});
            const Bigram b = w.heap.back();
            w.heap.pop_back();
            Symbol& l = syms[b.left];
            Symbol& r = syms[b.right];
            // Stale entry: a side was merged away or grew since this pair was queued.
            if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
            l.n += r.n;
            r.n = 0;
            l.next = r.next;
            if (r.next >= 0) syms[r.next].prev = b.left;
            try_add_bigram(s, w, l.prev, b.left);
            try_add_bigram(s, w, b.left, l.next);
        }

        for (int32_t i = 0; i >= 0; i = syms[i].next) emit(s, syms[i], out);
    }

    void emit(std::string_view s, const Symbol& sym, std::vector<int32_t>& out) const {
        const std::string_view text = s.substr(sym.off, sym.n);
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
    std::unordered_set<uint64_t> pairs_;                 // pair_key of adjacent characters inside tokens
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
