#include "tokenizer/special_matcher.h"

#include <algorithm>

namespace pelican {

SpecialMatcher SpecialMatcher::build(const TokenizerSpec& spec) {
    SpecialMatcher m;
    m.nodes_.emplace_back();
    m.root_.fill(-1);
    for (size_t id = 0; id < spec.tokens.size() && id < spec.types.size(); ++id) {
        const TokenType t = spec.types[id];
        const bool always = t == TokenType::UserDefined;
        if (!always && t != TokenType::Control && t != TokenType::Unknown) continue;
        const std::string& text = spec.tokens[id];
        if (text.empty()) continue;
        int32_t node = 0;
        for (unsigned char b : text) {
            int32_t next = m.child(node, b);
            if (next < 0) {
                next = static_cast<int32_t>(m.nodes_.size());
                m.nodes_.emplace_back();
                auto& ch = m.nodes_[node].children;
                ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1})),
                          std::make_pair(b, next));
                if (node == 0) m.root_[b] = next;
            }
            node = next;
        }
        Node& end = m.nodes_[node];
        // Duplicate texts: the first id wins, but "always" spreads to the text.
        if (end.id < 0) end.id = static_cast<int32_t>(id);
        end.always = end.always || always;
        m.any_always_ = m.any_always_ || always;
    }
    return m;
}

int32_t SpecialMatcher::child(int32_t node, uint8_t b) const {
    if (node == 0) return root_[b];
    const auto& ch = nodes_[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1}));
    return it != ch.end() && it->first == b ? it->second : -1;
}

namespace {

// True when [b, e) overlaps one of the sorted, disjoint ranges.
bool overlaps(std::span<const TextRange> ranges, size_t b, size_t e) {
    // The first range that ends after b; it overlaps when it begins before e.
    auto it = std::upper_bound(ranges.begin(), ranges.end(), b,
                               [](size_t pos, const TextRange& r) { return pos < r.end; });
    return it != ranges.end() && it->begin < e;
}

}  // namespace

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, size_t from, bool parse_special,
                                           std::span<const TextRange> plain) const {
    Match best;
    if (empty() || (!parse_special && !any_always_)) return best;
    for (size_t pos = from; pos < text.size(); ++pos) {
        int32_t node = root_[static_cast<uint8_t>(text[pos])];
        for (size_t i = pos + 1; node >= 0; ++i) {
            const Node& n = nodes_[node];
            if (n.id >= 0 && (n.always || (parse_special && !overlaps(plain, pos, i))))
                best = {pos, i - pos, n.id};
            if (i >= text.size()) break;
            node = child(node, static_cast<uint8_t>(text[i]));
        }
        if (best.id >= 0) return best;
    }
    return best;
}

}  // namespace pelican
