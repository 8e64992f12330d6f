#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "core/log.h"
#include "tokenizer/unicode.h"

namespace pelican {

Expected<std::unique_ptr<BpeModel>> BpeModel::create(const TokenizerSpec& spec) {
    std::unique_ptr<BpeModel> m(new BpeModel(spec));
    const size_t n = spec.tokens.size();
    if (n == 0) return make_error("BPE tokenizer has no tokens");
    if (n > static_cast<size_t>(INT32_MAX)) return make_error("BPE tokenizer has too many tokens ({})", n);
    if (spec.pre_regexes.empty()) return make_error("BPE tokenizer has no pre-tokenizer regexes");
    PELICAN_ASSIGN(m->pre_, PreTokenizer::create(spec.pre_regexes));

    m->token_to_id_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        // First id wins on duplicates (some vocabs repeat texts among added tokens).
        m->token_to_id_.emplace(spec.tokens[i], static_cast<int32_t>(i));
    }
    const ByteUnicode& bu = byte_unicode();
    for (int b = 0; b < 256; ++b) {
        auto it = m->token_to_id_.find(bu.byte_to_utf8[b]);
        m->byte_id_[b] = it == m->token_to_id_.end() ? -1 : it->second;
    }

    std::vector<std::pair<uint64_t, Merge>> entries;
    entries.reserve(spec.merges.size());
    std::string joined;
    for (size_t r = 0; r < spec.merges.size(); ++r) {
        const auto& [a, b] = spec.merges[r];
        auto ia = m->token_to_id_.find(a);
        auto ib = m->token_to_id_.find(b);
        joined.assign(a).append(b);
        auto ij = m->token_to_id_.find(joined);
        if (ia == m->token_to_id_.end() || ib == m->token_to_id_.end() || ij == m->token_to_id_.end()) {
            ++m->skipped_merges_;
            continue;
        }
        entries.push_back({pair_key(ia->second, ib->second), Merge{static_cast<int32_t>(r), ij->second}});
    }
    m->merges_.build(entries);  // the first (lowest-rank) occurrence of a pair wins
    if (m->skipped_merges_ > 0) {
        log_debug("BPE: {} of {} merges reference texts that are not tokens; ignored", m->skipped_merges_,
                  spec.merges.size());
    }
    return m;
}

void BpeModel::MergeMap::build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
    size_t cap = 16;
    shift_ = 60;
    while (cap < entries.size() * 2) cap <<= 1, --shift_;
    mask_ = cap - 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, Merge{0, 0});
    for (const auto& [key, merge] : entries) {
        size_t i = slot(key);
        while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
        if (keys_[i] == key) continue;
        keys_[i] = key;
        vals_[i] = merge;
    }
}

Expected<std::unique_ptr<TokenizerModel>> make_bpe_model(const TokenizerSpec& spec) {
    PELICAN_ASSIGN(auto m, BpeModel::create(spec));
    return std::unique_ptr<TokenizerModel>(std::move(m));
}

void BpeModel::encode_fragment(std::string_view text, bool /*first_fragment*/,
                               std::vector<int32_t>& out) const {
    std::string normalized;
    if (spec_.normalize_nfc) {
        normalized = utf8_nfc(text);
        text = normalized;
    }
    std::vector<std::string_view> words;
    pre_.split(text, words);
    Scratch sc;
    for (std::string_view w : words) encode_word(w, sc, out);
}

void BpeModel::encode_word(std::string_view word, Scratch& sc, std::vector<int32_t>& out) const {
    const ByteUnicode& bu = byte_unicode();
    if (spec_.ignore_merges || word.size() == 1) {
        sc.mapped.clear();
        for (unsigned char c : word) sc.mapped += bu.byte_to_utf8[c];
        auto it = token_to_id_.find(sc.mapped);
        if (it != token_to_id_.end()) {
            out.push_back(it->second);
            return;
        }
    }

    // Symbols form a doubly linked list over byte positions; merged-away symbols get id -2.
    const int32_t n = static_cast<int32_t>(word.size());
    auto& syms = sc.syms;
    auto& heap = sc.heap;
    syms.resize(static_cast<size_t>(n));
    heap.clear();
    for (int32_t i = 0; i < n; ++i) {
        syms[i] = {byte_id_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
    }
    auto push_pair = [&](int32_t left) {
        if (left < 0) return;
        const int32_t right = syms[left].next;
        if (right < 0) return;
        const int32_t a = syms[left].id, b = syms[right].id;
        if (a < 0 || b < 0) return;
        const Merge* mg = merges_.find(pair_key(a, b));
        if (!mg) return;
        heap.push_back({mg->rank, left, right, a, b, mg->id});
        std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
        const Cand c = heap.back();
        heap.pop_back();
        Sym& l = syms[c.left];
        if (l.id != c.left_id || l.next != c.right || syms[c.right].id != c.right_id) continue;  // stale
        Sym& r = syms[c.right];
        l.id = c.merged_id;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.left;
        r.id = -2;
        push_pair(l.prev);
        push_pair(c.left);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) {
        const int32_t id = syms[i].id;
        if (id >= 0) {
            out.push_back(id);
        } else if (spec_.unk_id >= 0) {
            out.push_back(spec_.unk_id);  // a byte whose character is not a token
        }
    }
}

std::string BpeModel::decode_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= spec_.tokens.size()) return {};
    const std::string& text = spec_.tokens[id];
    const TokenType t = static_cast<size_t>(id) < spec_.types.size() ? spec_.types[id] : TokenType::Normal;
    if (t == TokenType::UserDefined || t == TokenType::Control || t == TokenType::Unknown) return text;
    return byte_level_decode(text);
}

}  // namespace pelican
