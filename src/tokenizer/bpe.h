// Byte-level BPE (GPT-2 family): regex pre-tokenizer, bytes mapped to the GPT-2 alphabet,
// then merges applied lowest rank first (leftmost on ties), as HF tokenizers' BPE model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pelican {

class BpeModel final : public TokenizerModel {
public:
    static Expected<std::unique_ptr<BpeModel>> create(const TokenizerSpec& spec);

    void encode_fragment(std::string_view text, bool first_fragment,
                         std::vector<int32_t>& out) const override;
    std::string decode_token(int32_t id) const override;

    // Merges whose parts or result are not tokens (they can never apply); for diagnostics.
    size_t n_skipped_merges() const { return skipped_merges_; }

private:
    explicit BpeModel(const TokenizerSpec& spec) : spec_(spec) {}
    // Symbols of a word being merged: a linked list over byte positions (id -2: merged away).
    struct Sym {
        int32_t id, prev, next;
    };
    // A candidate merge of symbols `left` and `right` (ids checked when popped: stale ones skip).
    struct Cand {
        int32_t rank, left, right, left_id, right_id, merged_id;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    // Buffers reused across the words of one call (encode stays thread-safe).
    struct Scratch {
        std::string mapped;
        std::vector<Sym> syms;
        std::vector<Cand> heap;  // min-heap on (rank, left)
    };
    // Appends the ids of one pre-token (raw bytes).
    void encode_word(std::string_view word, Scratch& sc, std::vector<int32_t>& out) const;

    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }

    struct Merge {
        int32_t rank;
        int32_t id;  // token produced by the merge
    };

    // Open-addressing hash map (left id, right id) -> Merge; a few times faster than
    // std::unordered_map on the merge loop's lookups.
    class MergeMap {
    public:
        void build(const std::vector<std::pair<uint64_t, Merge>>& entries);  // first entry per key wins
        const Merge* find(uint64_t key) const {
            if (keys_.empty()) return nullptr;
            for (size_t i = slot(key);; i = (i + 1) & mask_) {
                if (keys_[i] == key) return &vals_[i];
                if (keys_[i] == kEmpty) return nullptr;
            }
        }

    private:
        static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are >= 0, so never a real key
        size_t slot(uint64_t key) const {
            return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
        }
        std::vector<uint64_t> keys_;
        std::vector<Merge> vals_;
        size_t mask_ = 0;
        int shift_ = 64;
    };

    const TokenizerSpec& spec_;
    PreTokenizer pre_;
    std::unordered_map<std::string, int32_t> token_to_id_;
    MergeMap merges_;
    int32_t byte_id_[256];  // token of each byte's GPT-2 character, or -1
    size_t skipped_merges_ = 0;
};

}  // namespace pelican
