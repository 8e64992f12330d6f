#include "tokenizer/unicode.h"

#include <cstdlib>

#include <utf8proc.h>

namespace pelican {

int32_t utf8_decode(std::string_view s, size_t pos, size_t& len) {
    len = 1;
    const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
    const size_t left = s.size() - pos;
    const unsigned char c = p[0];
    if (c < 0x80) return c;
    int n = 0;
    int32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return -1;
    }
    if (left < static_cast<size_t>(n)) return -1;
    for (int i = 1; i < n; ++i) {
        if ((p[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    len = static_cast<size_t>(n);
    return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
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

bool utf8_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        size_t len = 0;
        if (utf8_decode(s, i, len) < 0) return false;
        i += len;
    }
    return true;
}

std::string utf8_nfc(std::string_view s) {
    if (s.empty() || !utf8_valid(s)) return std::string(s);
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                static_cast<utf8proc_ssize_t>(s.size()), &out,
                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0 || out == nullptr) {
        std::free(out);
        return std::string(s);
    }
    std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return r;
}

namespace {

ByteUnicode build_byte_unicode() {
    ByteUnicode t;
    t.cp_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(next++);
        utf8_append(t.byte_to_utf8[b], cp);
        t.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
}

}  // namespace

const ByteUnicode& byte_unicode() {
    static const ByteUnicode table = build_byte_unicode();
    return table;
}

std::string byte_level_decode(std::string_view text) {
    const ByteUnicode& bu = byte_unicode();
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        size_t len = 0;
        const int32_t cp = utf8_decode(text, i, len);
        if (cp >= 0 && cp < static_cast<int32_t>(bu.cp_to_byte.size()) && bu.cp_to_byte[cp] >= 0) {
            out += static_cast<char>(bu.cp_to_byte[cp]);
        } else {
            out.append(text.substr(i, len));
        }
        i += len;
    }
    return out;
}

}  // namespace pelican
