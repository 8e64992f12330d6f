// Finds added tokens in text: UserDefined tokens always, Control/Unknown ones only when
// special-token parsing is on. Leftmost match first, longest at that position (as HF's
// added-token splitter). A byte trie over the token texts.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace pelican {

struct SpecialMatcher {
    struct Match {
        size_t pos = 0;  // byte offset of the token text in the searched text
        size_t len = 0;  // bytes
        int32_t id = -1;
    };

    static SpecialMatcher build(const TokenizerSpec& spec);

    // First match at or after `from`; id -1 when there is none. A Control/Unknown token must not
    // overlap any of `plain` (sorted, disjoint byte ranges of untrusted text).
    Match find(std::string_view text, size_t from, bool parse_special,
               std::span<const TextRange> plain = {}) const;
    bool empty() const { return nodes_.size() <= 1; }

private:
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), sorted by byte
        int32_t id = -1;                                    // token ending here
        bool always = false;                                // matched even without parse_special
    };
    int32_t child(int32_t node, uint8_t b) const;

    std::vector<Node> nodes_;          // nodes_[0] is the root
    std::array<int32_t, 256> root_{};  // root's children by byte (-1: none)
    bool any_always_ = false;
};

}  // namespace pelican
