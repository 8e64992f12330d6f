#include "core/utf8.h"

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

std::u32string utf8_decode_all(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t len = 0;
        const int32_t cp = utf8_decode(s, i, len);
        out.push_back(cp < 0 ? char32_t{0xFFFD} : static_cast<char32_t>(cp));
        i += len;
    }
    return out;
}

}  // namespace pelican
