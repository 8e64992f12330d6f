// Python str operations that need more than a line: split, replace, splitlines, number parsing,
// % formatting and str.format. Lengths and widths count code points. Results are built within the
// render's memory limit and their work is charged to its step budget (budget.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace pelican::jinja {

// Substring search charged to the render's budget per byte scanned and per candidate compared, so
// that a worst-case search (n * m byte compares) is paid for in steps. npos when absent.
size_t find_text(std::string_view hay, std::string_view needle, size_t pos);
size_t rfind_text(std::string_view hay, std::string_view needle);  // last occurrence

std::optional<int64_t> parse_py_int(const std::string& s, int base);  // int(s, base)
std::optional<double> parse_py_float(const std::string& s);           // float(s)

std::vector<std::string> py_splitlines(const std::string& s, bool keepends = false);
// sep == nullptr: split on whitespace runs. maxsplit < 0: unlimited.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                  bool from_right);
std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count);
std::string py_center(const std::string& s, int64_t width);
std::string py_percent_format(const std::string& fmt, const List& args);         // "%s" % args
std::string py_str_format(const std::string& fmt, const CallArgs& args);         // str.format
int64_t py_find(const std::string& s, const std::string& sub, bool from_right);  // code point index or -1
int64_t py_count(const std::string& s, const std::string& sub);

}  // namespace pelican::jinja
