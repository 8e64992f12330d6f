// Splits a template into jinja2's token stream, applying HF's whitespace rules
// (trim_blocks, lstrip_blocks, `-`/`+` modifiers, single trailing newline dropped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pelican::jinja {

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    Tok type;
    std::string text;  // Data text, name, decoded string literal, operator
    int line = 1;
    int64_t ival = 0;
    double fval = 0;
};

// Throws RenderError("template line N: ...") on malformed input.
std::vector<Token> lex_template(std::string_view source);

const char* tok_name(Tok t);

}  // namespace pelican::jinja
