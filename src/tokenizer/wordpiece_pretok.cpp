#include "tokenizer/wordpiece_pretok.h"

#include <utf8proc.h>

#include "core/utf8.h"

namespace pelican {
namespace {

constexpr uint32_t kReplacement = 0xFFFD;

// Rust char::is_whitespace (Unicode White_Space), which HF's BERT code uses.
bool is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

// Categories Cc, Cf, Cs, Co, Cn; tab, newline and carriage return count as whitespace instead.
bool is_control(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO:
        case UTF8PROC_CATEGORY_CN:
            return true;
        default:
            return false;
    }
}

// Unicode P* categories, plus ASCII !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
bool is_punctuation(uint32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
        return true;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
        case UTF8PROC_CATEGORY_PC:
        case UTF8PROC_CATEGORY_PD:
        case UTF8PROC_CATEGORY_PS:
        case UTF8PROC_CATEGORY_PE:
        case UTF8PROC_CATEGORY_PI:
        case UTF8PROC_CATEGORY_PF:
        case UTF8PROC_CATEGORY_PO:
            return true;
        default:
            return false;
    }
}

// CJK Unified Ideographs blocks, as HF tokenizers' BertNormalizer lists them.
bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// NFD of `cps`, with nonspacing marks (Mn) removed.
std::vector<uint32_t> strip_accents(const std::vector<uint32_t>& cps) {
    std::string utf8;
    utf8.reserve(cps.size());
    for (uint32_t c : cps) utf8_append(utf8, c);
    const auto* src = reinterpret_cast<const utf8proc_uint8_t*>(utf8.data());
    const auto len = static_cast<utf8proc_ssize_t>(utf8.size());
    const auto opts = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE);
    const utf8proc_ssize_t n = utf8proc_decompose(src, len, nullptr, 0, opts);
    if (n < 0) return cps;  // cannot happen: utf8 was encoded from valid scalar values
    std::vector<utf8proc_int32_t> nfd(static_cast<size_t>(n));
    if (utf8proc_decompose(src, len, nfd.data(), n, opts) != n) return cps;
    std::vector<uint32_t> out;
    out.reserve(nfd.size());
    for (utf8proc_int32_t c : nfd)
        if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN) out.push_back(static_cast<uint32_t>(c));
    return out;
}

}  // namespace

std::vector<uint32_t> utf8_to_codepoints(std::string_view text) {
    std::vector<uint32_t> out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        size_t len = 0;
        const int32_t cp = utf8_decode(text, i, len);
        out.push_back(cp < 0 ? kReplacement : static_cast<uint32_t>(cp));
        i += len;
    }
    return out;
}

std::vector<std::string> bert_pre_tokenize(std::string_view text, bool lowercase) {
    // Normalizer: clean, isolate CJK with spaces, strip accents, lowercase (HF's order).
    std::vector<uint32_t> cps;
    cps.reserve(text.size());
    for (uint32_t c : utf8_to_codepoints(text)) {
        if (c == 0 || c == kReplacement || is_control(c)) continue;
        if (is_whitespace(c)) {
            cps.push_back(' ');
        } else if (is_cjk(c)) {
            cps.push_back(' ');
            cps.push_back(c);
            cps.push_back(' ');
        } else {
            cps.push_back(c);
        }
    }
    if (lowercase) {
        std::vector<uint32_t> lower;
        lower.reserve(cps.size());
        // Simple per-character mapping; the one unconditional multi-character lowercase (U+0130) never
        // gets here, as NFD has already split it into I + U+0307.
        for (uint32_t c : strip_accents(cps))
            lower.push_back(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
        cps = std::move(lower);
    }

    // Pre-tokenizer: whitespace separates words; each punctuation char is a word by itself.
    std::vector<std::string> words;
    std::string cur;
    auto flush = [&] {
        if (!cur.empty()) words.push_back(std::move(cur));
        cur.clear();
    };
    for (uint32_t c : cps) {
        if (is_whitespace(c)) {
            flush();
        } else if (is_punctuation(c)) {
            flush();
            utf8_append(cur, c);
            flush();
        } else {
            utf8_append(cur, c);
        }
    }
    flush();
    return words;
}

}  // namespace pelican
