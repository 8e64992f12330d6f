// BERT's basic tokenizer as Hugging Face tokenizers runs it (BertNormalizer + BertPreTokenizer):
//
//   clean:      drop NUL, U+FFFD and control characters (categories C*, except \t \n \r);
//               whitespace -> ' '
//   CJK:        every CJK ideograph becomes its own word
//   lowercase:  (when set) NFD, drop nonspacing marks (Mn), then lowercase each character
//   split:      on whitespace (removed) and on punctuation (kept, one char per word): Unicode P*
//               categories plus every ASCII non-alphanumeric printable character
//
// Malformed UTF-8 decodes to U+FFFD, which the clean step drops.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pelican {

// UTF-8 -> code points; each malformed sequence (bad lead/continuation, overlong, surrogate,
// > U+10FFFF) becomes one U+FFFD and decoding resumes at the next byte.
std::vector<uint32_t> utf8_to_codepoints(std::string_view text);

// Words of `text` after BERT normalization and pre-tokenization, each as UTF-8.
std::vector<std::string> bert_pre_tokenize(std::string_view text, bool lowercase);

}  // namespace pelican
