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
    // Appends the ids of one pre-token (raw bytes).
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }

    struct Merge {
        int32_t rank;
        int32_t id;  // token produced by the merge
    };

    const TokenizerSpec& spec_;
    PreTokenizer pre_;
    std::unordered_map<std::string, int32_t> token_to_id_;
    std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, result
    int32_t byte_id_[256];                        // token of each byte's GPT-2 character, or -1
    size_t skipped_merges_ = 0;
};

}  // namespace pelican
