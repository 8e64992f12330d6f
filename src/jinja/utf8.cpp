#include "jinja/utf8.h"

#include <algorithm>

#include "jinja/budget.h"

#include "core/utf8.h"

#include <utf8proc.h>

namespace pelican::jinja {

std::u32string utf8_decode(std::string_view s) {
    charge_chars(s.size());
    check_room(s.size() * sizeof(char32_t), "string too large to process (decoded to code points)");
    return pelican::utf8_decode_all(s);
}

void utf8_append(std::string& out, char32_t cp) { pelican::utf8_append(out, static_cast<uint32_t>(cp)); }

std::string utf8_encode(std::u32string_view s) {
    charge_chars(s.size());
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) utf8_append(out, c);
    return out;
}

size_t utf8_length(std::string_view s) {
    charge_bytes(s.size());
    size_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;
    return n;
}

static utf8proc_category_t cat(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

bool py_isspace(char32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85) return true;
    if (c < 0x80) return false;
    auto k = cat(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool py_isprintable(char32_t c) {
    if (c == ' ') return true;
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    switch (cat(c)) {
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO:
        case UTF8PROC_CATEGORY_CN:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
        case UTF8PROC_CATEGORY_ZS:
            return false;
        default:
            return true;
    }
}

char32_t py_lower(char32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t py_upper(char32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
bool py_isalpha(char32_t c) {
    auto k = cat(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}
bool py_isdigit(char32_t c) { return cat(c) == UTF8PROC_CATEGORY_ND; }
bool py_isalnum(char32_t c) {
    auto k = cat(c);
    return py_isalpha(c) || k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL ||
           k == UTF8PROC_CATEGORY_NO;
}
bool py_islower(char32_t c) { return cat(c) == UTF8PROC_CATEGORY_LL; }
bool py_isupper(char32_t c) {
    auto k = cat(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT;
}

std::string py_str_lower(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : utf8_decode(s)) utf8_append(out, py_lower(c));
    return out;
}

std::string py_str_upper(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : utf8_decode(s)) utf8_append(out, py_upper(c));
    return out;
}

// A word starts after any character that is not cased (Python: previous char not a letter).
std::string py_str_title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (char32_t c : utf8_decode(s)) {
        bool cased = py_islower(c) || py_isupper(c);
        utf8_append(out, prev_cased ? py_lower(c) : py_upper(c));
        prev_cased = cased;
    }
    return out;
}

std::string py_str_capitalize(std::string_view s) {
    std::string out;
    bool first = true;
    for (char32_t c : utf8_decode(s)) {
        utf8_append(out, first ? py_upper(c) : py_lower(c));
        first = false;
    }
    return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
    std::u32string u = utf8_decode(s);
    std::u32string set;  // sorted: a lookup costs log(chars), not chars
    if (chars) {
        set = utf8_decode(*chars);
        std::sort(set.begin(), set.end());
    }
    auto strip_it = [&](char32_t c) {
        return chars ? std::binary_search(set.begin(), set.end(), c) : py_isspace(c);
    };
    size_t b = 0, e = u.size();
    if (left)
        while (b < e && strip_it(u[b])) ++b;
    if (right)
        while (e > b && strip_it(u[e - 1])) --e;
    return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

}  // namespace pelican::jinja
