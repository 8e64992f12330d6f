#include "tokenizer/unicode.h"

#include <cstdlib>

#include <utf8proc.h>

namespace pelican {

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
