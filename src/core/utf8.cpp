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

namespace {

constexpr const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the sequence a lead byte starts and the allowed range of its second byte; len 0 for a
// byte that cannot start one (continuation bytes, C0/C1, F5..FF).
struct Lead {
    int len;
    uint8_t lo, hi;
};
Lead lead_of(uint8_t c) {
    if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
    if (c == 0xE0) return {3, 0xA0, 0xBF};
    if (c == 0xED) return {3, 0x80, 0x9F};
    if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
    if (c == 0xF0) return {4, 0x90, 0xBF};
    if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
    if (c == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// Repairs b into out; returns the offset of an unfinished trailing sequence (b.size() if none).
size_t repair_into(std::string_view b, std::string& out) {
    size_t i = 0;
    const size_t n = b.size();
    while (i < n) {
        const auto c = static_cast<uint8_t>(b[i]);
        if (c < 0x80) {
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        const Lead l = lead_of(c);
        if (l.len == 0) {
            out += kReplacement;
            ++i;
            continue;
        }
        int k = 1;
        for (; k < l.len; ++k) {
            if (i + static_cast<size_t>(k) >= n) return i;  // unfinished: decide with more bytes
            const auto d = static_cast<uint8_t>(b[i + static_cast<size_t>(k)]);
            const uint8_t lo = k == 1 ? l.lo : 0x80, hi = k == 1 ? l.hi : 0xBF;
            if (d < lo || d > hi) break;
        }
        if (k == l.len) {
            out.append(b.substr(i, static_cast<size_t>(k)));
        } else {
            out += kReplacement;  // the maximal subpart b[i, i + k)
        }
        i += static_cast<size_t>(k);
    }
    return n;
}

}  // namespace

std::string Utf8Repair::push(std::string_view bytes) {
    std::string in = std::move(tail_);
    in.append(bytes);
    std::string out;
    out.reserve(in.size());
    const size_t keep = repair_into(in, out);
    tail_ = in.substr(keep);
    return out;
}

std::string Utf8Repair::finish() {
    if (tail_.empty()) return {};
    tail_.clear();
    return kReplacement;  // an unfinished well-formed prefix is one maximal subpart
}

std::string utf8_repair(std::string_view s) {
    Utf8Repair r;
    std::string out = r.push(s);
    out += r.finish();
    return out;
}

}  // namespace pelican
