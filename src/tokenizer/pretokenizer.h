// Regex pre-tokenizer for byte-level BPE: a sequence of PCRE2 regexes, each splitting the
// pieces of the previous one into matches and the text between them (HF Split, Isolated).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pelican {

struct PreTokenizerPreset {
    std::vector<std::string> regexes;  // applied in sequence
    bool ignore_merges = false;        // llama-3 style: whole pre-token wins when it is a token
    bool add_bos = false;              // llama.cpp's default for this pre-tokenizer
    bool clean_spaces = true;          // clean_up_tokenization_spaces default
    bool normalize_nfc = false;        // HF normalizer NFC (Qwen2)
};

// Regexes and flags for a GGUF tokenizer.ggml.pre name ("gpt-2", "llama-bpe", "qwen2", ...);
// nullptr for unknown names.
const PreTokenizerPreset* find_pretokenizer_preset(std::string_view pre_name);
// The regex list llama.cpp uses for pre "default" / unknown names (GPT-2 style).
const PreTokenizerPreset& default_pretokenizer_preset();

class PreTokenizer {
public:
    // Compiles every regex once (UTF + UCP, JIT when available). Errors name the bad regex.
    static Expected<PreTokenizer> create(const std::vector<std::string>& regexes);

    PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;
    ~PreTokenizer();

    // Splits `text` into non-empty pieces whose concatenation is `text`. Thread-safe.
    // Invalid UTF-8 never crashes: invalid bytes end up in the pieces between matches.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace pelican
