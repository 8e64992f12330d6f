// NFC and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"  // utf8_decode, utf8_append, utf8_valid

namespace pelican {

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
