// Tokenizer: text <-> token ids, exact to the reference implementations.
//
// encode() first splits the text on added/special tokens (only when parse_special is set;
// user-defined added tokens are always matched, as in HF and llama.cpp), then runs the model
// (SPM, byte-level BPE or WordPiece) on each plain fragment.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace pelican {

class GgufFile;
struct SpecialMatcher;

// The algorithm behind one TokenizerKind, run on a fragment that holds no special tokens.
class TokenizerModel {
public:
    virtual ~TokenizerModel() = default;
    // Appends the ids of `text` to `out`. `text` is a fragment between special tokens.
    // `first_fragment` is true for a fragment that starts the input or directly follows an added
    // token (SPM adds its space prefix there, as llama.cpp does).
    virtual void encode_fragment(std::string_view text, bool first_fragment,
                                 std::vector<int32_t>& out) const = 0;
    // Text of one token as it reads in the output ("▁the" -> " the", "Ġ" -> " ", "<0x0A>" -> "\n" bytes).
    virtual std::string decode_token(int32_t id) const = 0;
};

// Model factories (one file each: spm.cpp, bpe.cpp, wordpiece.cpp). `spec` outlives the model.
Expected<std::unique_ptr<TokenizerModel>> make_spm_model(const TokenizerSpec& spec);
Expected<std::unique_ptr<TokenizerModel>> make_bpe_model(const TokenizerSpec& spec);
Expected<std::unique_ptr<TokenizerModel>> make_wordpiece_model(const TokenizerSpec& spec);

struct EncodeOptions {
    bool add_special = false;    // add BOS/EOS as the spec says (add_bos / add_eos)
    bool parse_special = false;  // match control/special token texts in the input as single ids
    // With parse_special: ranges of untrusted text (a chat message's content inside a rendered
    // template) where control/special token texts are NOT matched: a control token is recognized
    // only when its text overlaps none of them. User-defined added tokens are matched everywhere,
    // as without parse_special. Sorted by begin, not overlapping.
    std::span<const TextRange> plain_ranges = {};
};

class Tokenizer {
public:
    static Expected<Tokenizer> from_spec(TokenizerSpec spec);
    static Expected<Tokenizer> from_gguf(const GgufFile& file);
    // A tokenizer.json file, or an HF folder holding tokenizer.json (+ tokenizer_config.json).
    static Expected<Tokenizer> from_hf(const std::string& path);
    // Any of: GGUF file, tokenizer.json, HF folder.
    static Expected<Tokenizer> load(const std::string& path);

    // Thread-safe (const, no caches). Never fails: bytes that are no token map to unk or are dropped.
    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const;
    // Control tokens print their text unless skip_special; out-of-range ids are skipped.
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
    std::string token_text(int32_t id) const;  // raw stored text of a token
    // Where `text` holds control/unknown token texts that parse_special would match, in order.
    std::vector<TextRange> find_special_texts(std::string_view text) const;
    // True for ids of control or unknown tokens (those only parse_special matches).
    bool is_special(int32_t id) const;

    const TokenizerSpec& spec() const { return *spec_; }
    int32_t n_vocab() const { return static_cast<int32_t>(spec_->tokens.size()); }

private:
    std::shared_ptr<const TokenizerSpec> spec_;
    std::shared_ptr<const TokenizerModel> model_;
    std::shared_ptr<const SpecialMatcher> specials_;
};

}  // namespace pelican
