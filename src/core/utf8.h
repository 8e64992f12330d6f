// UTF-8 decoding and encoding shared by the tokenizers and the Jinja interpreter.
// Strict: overlongs, surrogates and code points above U+10FFFF are invalid.
#pragma once

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

// Decodes a whole string; each invalid byte becomes U+FFFD (one per byte, as Python's "replace").
std::u32string utf8_decode_all(std::string_view s);

}  // namespace pelican
