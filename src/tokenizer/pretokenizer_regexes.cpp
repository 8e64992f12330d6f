// Pre-tokenizer regex lists per GGUF tokenizer.ggml.pre name, as the reference Hugging Face
// tokenizer.json files define them (Split / ByteLevel / Digits / Punctuation steps written as
// regexes applied in sequence). PCRE2 syntax; compiled with UTF + UCP.
#include <string_view>
#include <utility>

#include "tokenizer/pretokenizer.h"

namespace pelican {
namespace {

// GPT-2's ByteLevel regex.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama-3 (tiktoken cl100k style): case-insensitive contractions, digits in groups of <= 3.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: as llama-3 but single digits.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek-LLM letter class (cased letters of many scripts), written as code points because
// several of them (U+1FBE, U+2126, U+212A, ...) change under NFC and must not be normalized.
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// GPT-2's regex without the final \s+ alternative (llama.cpp's lists for these families).
constexpr const char* kGpt2NoTail =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

PreTokenizerPreset make(std::vector<std::string> r, bool ignore_merges = false, bool add_bos = false,
                        bool clean_spaces = true, bool nfc = false) {
    PreTokenizerPreset p;
    p.regexes = std::move(r);
    p.ignore_merges = ignore_merges;
    p.add_bos = add_bos;
    p.clean_spaces = clean_spaces;
    p.normalize_nfc = nfc;
    return p;
}

struct Named {
    std::string_view name;
    PreTokenizerPreset preset;
};

const std::vector<Named>& presets() {
    static const std::vector<Named> list = [] {
        const auto gpt2 = make({kGpt2});
        const auto llama3 = make({kLlama3}, /*ignore_merges=*/true, /*add_bos=*/true);
        const auto qwen2 = make({kQwen2}, false, false, /*clean_spaces=*/false, /*nfc=*/true);
        // StarCoder / Refact: Digits(individual) then ByteLevel.
        const auto starcoder = make({R"(\p{N})", kGpt2});
        std::vector<Named> v = {
            {"gpt-2", gpt2},
            {"gpt2", gpt2},
            {"phi-2", gpt2},
            {"mpt", gpt2},
            {"olmo", gpt2},
            {"gpt-neox", gpt2},
            {"jais", gpt2},
            {"llama-bpe", llama3},
            {"llama3", llama3},
            {"llama-v3", llama3},
            {"falcon3", llama3},
            {"dbrx", make({kLlama3})},
            {"smaug-bpe", make({kLlama3})},
            {"qwen2", qwen2},
            {"deepseek-r1-qwen", qwen2},
            {"stablelm2", make({kQwen2})},
            {"starcoder", starcoder},
            {"refact", starcoder},
            {"smollm", make({R"(\p{N})", kGpt2}, false, false, false)},
            // DeepSeek-Coder: Split [\r\n], letters, punctuation, CJK, Digits(individual).
            {"deepseek-coder", make({R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"},
                                    false, false, false)},
            // DeepSeek-LLM: Split [\r\n], letters, punctuation, trailing spaces, CJK, Digits.
            {"deepseek-llm",
             make({R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"},
                  false, false, false)},
            // Falcon: Punctuation (contiguous), ByteLevel, then groups of three ASCII digits.
            {"falcon", make({R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTail, R"([0-9][0-9][0-9])"})},
            // llama.cpp's "default" list (used by old BPE conversions).
            {"default", make({R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTail, R"(\p{N}+)", R"([0-9][0-9][0-9])"})},
        };
        return v;
    }();
    return list;
}

}  // namespace

const PreTokenizerPreset* find_pretokenizer_preset(std::string_view pre_name) {
    for (const auto& p : presets()) {
        if (p.name == pre_name) return &p.preset;
    }
    return nullptr;
}

const PreTokenizerPreset& default_pretokenizer_preset() { return *find_pretokenizer_preset("gpt-2"); }

}  // namespace pelican
