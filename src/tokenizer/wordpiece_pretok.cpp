#include "tokenizer/wordpiece_pretok.h"

#include <utf8proc.h>

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
    for (uint32_t c : cps) append_utf8(c, utf8);
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
    const auto* p = reinterpret_cast<const uint8_t*>(text.data());
    const size_t n = text.size();
    for (size_t i = 0; i < n;) {
        const uint8_t b = p[i];
        size_t len = 0;
        uint32_t cp = 0, min = 0;
        if (b < 0x80) {
            out.push_back(b);
            ++i;
            continue;
        } else if ((b & 0xE0) == 0xC0) {
            len = 2, cp = b & 0x1F, min = 0x80;
        } else if ((b & 0xF0) == 0xE0) {
            len = 3, cp = b & 0x0F, min = 0x800;
        } else if ((b & 0xF8) == 0xF0) {
            len = 4, cp = b & 0x07, min = 0x10000;
        }
        bool ok = len != 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; ++k) {
            ok = (p[i + k] & 0xC0) == 0x80;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        out.push_back(ok ? cp : kReplacement);
        i += ok ? len : 1;
    }
    return out;
}

void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
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
            append_utf8(c, cur);
            flush();
        } else {
            append_utf8(c, cur);
        }
    }
    flush();
    return words;
}

}  // namespace pelican
