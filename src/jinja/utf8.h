// UTF-8 helpers for the Jinja interpreter: Python str semantics count code points, so
// lengths, indexing and slicing go through u32 strings. Invalid bytes decode to U+FFFD.
#pragma once

#include <string>
#include <string_view>

namespace pelican::jinja {

std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);  // code points

bool py_isspace(char32_t c);  // Python str.isspace() for one code point
bool py_isprintable(char32_t c);
char32_t py_lower(char32_t c);
char32_t py_upper(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalnum(char32_t c);
bool py_islower(char32_t c);
bool py_isupper(char32_t c);

std::string py_str_lower(std::string_view s);
std::string py_str_upper(std::string_view s);
std::string py_str_title(std::string_view s);       // Python str.title()
std::string py_str_capitalize(std::string_view s);  // Python str.capitalize()

// Python str.strip/lstrip/rstrip; chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace pelican::jinja
