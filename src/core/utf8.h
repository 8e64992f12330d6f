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

// Streaming UTF-8 repair for text that arrives in pieces (detokenized byte tokens): push() returns
// the well-formed text that can be decided so far and holds back an unfinished trailing sequence;
// finish() flushes it. Ill-formed input becomes U+FFFD, one per maximal subpart of an ill-formed
// sequence (the Unicode practice that Python's decode(errors="replace") and Rust's
// String::from_utf8_lossy follow, so the text equals transformers' decode of the same bytes).
class Utf8Repair {
public:
    std::string push(std::string_view bytes);
    // The held-back tail as U+FFFD (nothing when there is none); the stream starts over.
    std::string finish();
    bool holding() const { return !tail_.empty(); }

private:
    std::string tail_;  // an unfinished but so far well-formed sequence (at most 3 bytes)
};

// The whole of s repaired at once (push + finish).
std::string utf8_repair(std::string_view s);

}  // namespace pelican
