// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pelican {

// Decodes one code point at s[pos]. Returns the code point and sets `len` to the bytes consumed
// (1..4). Invalid or truncated sequences decode as -1 with len = 1, so callers always advance.
int32_t utf8_decode(std::string_view s, size_t pos, size_t& len);

// Appends the UTF-8 encoding of `cp` (0..0x10FFFF; surrogates/out-of-range encode U+FFFD).
void utf8_append(std::string& out, uint32_t cp);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points > 0x10FFFF).
bool utf8_valid(std::string_view s);

// NFC normalization (utf8proc). Invalid UTF-8 input is returned unchanged.
std::string utf8_nfc(std::string_view s);

// GPT-2 byte-level alphabet: every byte 0..255 maps to one printable code point
// ('!'..'~', '¡'..'¬', '®'..'ÿ' map to themselves; the rest to U+0100.. in byte order).
struct ByteUnicode {
    std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point ("Ġ" for ' ')
    // Inverse: code point -> byte, or -1 for code points outside the alphabet. Index < 0x144.
    std::array<int16_t, 0x144> cp_to_byte;
};
const ByteUnicode& byte_unicode();

// Maps a byte-level token text back to raw bytes ("Ġthe" -> " the"). Code points outside the
// alphabet are copied through as their UTF-8 (added tokens are stored raw).
std::string byte_level_decode(std::string_view token_text);

}  // namespace pelican
