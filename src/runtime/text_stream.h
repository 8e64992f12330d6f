// Incremental detokenization for streaming: turns generated token ids into text pieces that are
// safe to print — well-formed UTF-8 only (an unfinished character is held until its bytes arrive;
// ill-formed bytes become U+FFFD, as transformers' decode does), and never text that might be the
// start of a stop string. Control tokens produce no text.
//
//   TokenTextStream s(&tokenizer, {"\n\nUser:"});
//   std::string piece = s.push(id);   // may be "" (held back)
//   if (s.stopped()) ...              // a stop string appeared; piece holds the text before it
//   std::string rest = s.finish();    // held-back text at the end
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/utf8.h"

namespace pelican {

class Tokenizer;

class TokenTextStream {
public:
    // tok may be nullptr (then every piece is empty). Empty stop strings are ignored.
    TokenTextStream(const Tokenizer* tok, std::vector<std::string> stop);

    // Text a token adds to the output, as the tokenizer decodes it after earlier text (SPM's
    // leading space kept, control tokens skipped).
    std::string token_piece(int32_t id) const;

    // Appends a token; returns the text that became safe to emit.
    std::string push(int32_t id);
    // True once a stop string has been seen; push() then returns nothing more.
    bool stopped() const { return stopped_; }
    // The text held back (a stop-string prefix; an unfinished UTF-8 sequence as U+FFFD) unless
    // stopped. A stop string completed by that text still stops (stopped() turns true).
    std::string finish();
    // Everything emitted so far (cut before the stop string).
    const std::string& text() const { return emitted_; }

private:
    size_t safe_length() const;  // bytes of pending_ that can be emitted

    const Tokenizer* tok_;
    std::vector<std::string> stop_;
    int32_t anchor_ = -1;    // a plain token decoded before each piece (see token_piece)
    size_t anchor_len_ = 0;  // bytes of the anchor's own text
    Utf8Repair repair_;      // bytes of an unfinished character
    std::string pending_;    // decoded (well-formed UTF-8), not yet emitted
    std::string emitted_;
    bool stopped_ = false;
};

}  // namespace pelican
