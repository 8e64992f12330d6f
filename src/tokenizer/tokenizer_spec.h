// Everything a tokenizer needs, independent of the file it came from (GGUF metadata or
// Hugging Face tokenizer.json + tokenizer_config.json). Loaders fill it; models consume it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pelican {

// A byte range [begin, end) of a text (EncodeOptions::plain_ranges).
struct TextRange {
    size_t begin = 0, end = 0;
};

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,  // added tokens matched verbatim in the text
    Unused = 5,
    Byte = 6,  // SentencePiece byte-fallback tokens "<0x41>"
};

enum class TokenizerKind {
    SPM,        // SentencePiece BPE (llama-spm, phi-3): scores-driven merges, "▁" for spaces, byte fallback
    BPE,        // byte-level BPE (gpt-2 family): regex pre-tokenizer + byte-to-unicode + ranked merges
    WordPiece,  // BERT WordPiece (bert-bge): basic tokenizer + greedy longest-match "##" pieces
};

struct TokenizerSpec {
    TokenizerKind kind = TokenizerKind::BPE;
    std::vector<std::string> tokens;  // id -> token text as stored ("▁the", "Ġthe", "##ing", "<0x0A>")
    std::vector<float> scores;        // SPM piece scores; empty when the format has none
    std::vector<TokenType> types;     // id -> type; Normal when the format has none
    std::vector<std::pair<std::string, std::string>> merges;  // BPE merges, rank order (0 = first)

    // BPE pre-tokenizer: regexes applied in sequence (each splits the pieces of the previous one,
    // keeping matches and the text between them, as HF's Split(behavior=Isolated)).
    std::vector<std::string> pre_regexes;
    std::string pre_name;  // GGUF tokenizer.ggml.pre ("llama-bpe", "qwen2", ...) or "" if unknown

    int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
    int32_t sep_id = -1, cls_id = -1, mask_id = -1;
    bool add_bos = false;           // encode(add_special=true) prepends BOS
    bool add_eos = false;           // encode(add_special=true) appends EOS
    bool add_space_prefix = false;  // SPM: prepend "▁" (a space) to the text
    bool byte_fallback = true;      // SPM: unknown chars become <0xXX> byte tokens
    bool ignore_merges = false;     // BPE (llama-3): a pre-token that is itself a token is emitted whole
    bool lowercase = false;         // WordPiece: BertNormalizer lowercase + strip accents
    bool clean_spaces = false;      // decode: clean_up_tokenization_spaces
    bool normalize_nfc = false;     // BPE: NFC-normalize text before pre-tokenizing (HF Qwen2 normalizer)

    std::string chat_template;       // Jinja source, "" when absent
    std::string bos_text, eos_text;  // token texts for templates ("<s>", "<|im_end|>")
};

}  // namespace pelican
