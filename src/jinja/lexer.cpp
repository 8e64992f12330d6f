#include "jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "jinja/utf8.h"
#include "jinja/value.h"

namespace pelican::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

[[noreturn]] void lex_fail(int line, const std::string& what) {
    throw RenderError{fmt::format("template line {}: {}", line, what), false};
}

// Python str.rstrip() on whitespace (ASCII and the common Unicode spaces via decode).
std::string rstrip_ws(const std::string& s) { return py_strip(s, nullptr, false, true); }

class Lexer {
public:
    explicit Lexer(std::string src) : s_(std::move(src)) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < s_.size()) {
            size_t p = find_tag(pos_);
            std::string text = s_.substr(pos_, p - pos_);
            if (p == s_.size()) {
                emit_data(text);
                count_lines(pos_, p);
                pos_ = p;
                break;
            }
            char kind = s_[p + 1];  // '{', '%' or '#'
            char sign = p + 2 < s_.size() ? s_[p + 2] : 0;
            if (sign != '-' && sign != '+') sign = 0;
            if (sign == '-') {
                text = rstrip_ws(text);
            } else if (sign != '+' && kind != '{') {
                size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
                if (l_pos > 0 || line_starting) {
                    bool all_ws = l_pos < text.size();
                    for (size_t i = l_pos; i < text.size(); ++i)
                        if (!is_ws(text[i])) all_ws = false;
                    if (all_ws) text.resize(l_pos);
                }
            }
            emit_data(text);
            count_lines(pos_, p);
            pos_ = p + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                line_starting = comment();
            } else if (kind == '%' && raw_block(line_starting)) {
                // handled
            } else {
                line_starting = tag(kind == '%');
            }
        }
        out_.push_back(Token{Tok::Eof, "", line_, 0, 0});
        return std::move(out_);
    }

private:
    size_t find_tag(size_t from) const {
        for (size_t i = from; i + 1 < s_.size(); ++i)
            if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
        return s_.size();
    }
    void count_lines(size_t a, size_t b) {
        for (size_t i = a; i < b && i < s_.size(); ++i)
            if (s_[i] == '\n') ++line_;
    }
    void emit_data(const std::string& text) {
        if (!text.empty()) out_.push_back(Token{Tok::Data, text, line_, 0, 0});
    }
    // After an end delimiter: `-` strips all following whitespace; trim_blocks drops one newline.
    // Returns whether the consumed text ended with a newline (jinja2's line_starting).
    bool after_end(bool minus, bool trim) {
        size_t start = pos_;
        if (minus) {
            while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
        } else if (trim && pos_ < s_.size() && s_[pos_] == '\n') {
            ++pos_;
        }
        count_lines(start, pos_);
        return pos_ > start && s_[pos_ - 1] == '\n';
    }

    bool comment() {
        int start_line = line_;
        size_t e = s_.find("#}", pos_);
        if (e == std::string::npos) lex_fail(start_line, "unexpected end of template (unclosed comment)");
        bool minus = e > pos_ && s_[e - 1] == '-';
        bool plus = e > pos_ && s_[e - 1] == '+';
        count_lines(pos_, e);
        pos_ = e + 2;
        return after_end(minus, !plus);
    }

    // `{% raw %}...{% endraw %}`: pos_ is just after `{%` and its sign.
    bool raw_block(bool& line_starting) {
        size_t i = pos_;
        while (i < s_.size() && is_ws(s_[i])) ++i;
        if (s_.compare(i, 3, "raw") != 0) return false;
        i += 3;
        while (i < s_.size() && is_ws(s_[i])) ++i;
        bool minus = false;
        if (i < s_.size() && s_[i] == '-') minus = true, ++i;
        if (s_.compare(i, 2, "%}") != 0) return false;
        count_lines(pos_, i + 2);
        pos_ = i + 2;
        after_end(minus, true);
        // Find `{%[-+]? endraw [-]?%}`.
        for (size_t p = s_.find("{%", pos_); p != std::string::npos; p = s_.find("{%", p + 2)) {
            size_t j = p + 2;
            char sign = j < s_.size() && (s_[j] == '-' || s_[j] == '+') ? s_[j++] : 0;
            while (j < s_.size() && is_ws(s_[j])) ++j;
            if (s_.compare(j, 6, "endraw") != 0) continue;
            j += 6;
            while (j < s_.size() && is_ws(s_[j])) ++j;
            bool end_minus = false;
            if (j < s_.size() && s_[j] == '-') end_minus = true, ++j;
            if (s_.compare(j, 2, "%}") != 0) continue;
            std::string body = s_.substr(pos_, p - pos_);
            if (sign == '-') body = rstrip_ws(body);
            emit_data(body);
            count_lines(pos_, j + 2);
            pos_ = j + 2;
            line_starting = after_end(end_minus, true);
            return true;
        }
        lex_fail(line_, "unexpected end of template (missing endraw)");
    }

    // Tokens of one `{{ }}` or `{% %}` tag; pos_ is after the opener.
    bool tag(bool block) {
        out_.push_back(Token{block ? Tok::BlockBegin : Tok::VarBegin, "", line_, 0, 0});
        int depth = 0;
        const char close = block ? '%' : '}';
        while (true) {
            while (pos_ < s_.size() && is_ws(s_[pos_])) {
                if (s_[pos_] == '\n') ++line_;
                ++pos_;
            }
            if (pos_ >= s_.size()) lex_fail(line_, "unexpected end of template (unclosed tag)");
            if (depth == 0) {
                bool minus = s_[pos_] == '-' || s_[pos_] == '+';
                size_t q = pos_ + (minus ? 1 : 0);
                if (q + 1 < s_.size() && s_[q] == close && s_[q + 1] == '}') {
                    out_.push_back(Token{block ? Tok::BlockEnd : Tok::VarEnd, "", line_, 0, 0});
                    bool strip = s_[pos_] == '-';
                    bool plus = s_[pos_] == '+';
                    pos_ = q + 2;
                    return after_end(strip, block && !plus);
                }
            }
            char c = s_[pos_];
            if (is_name_start(c)) {
                size_t b = pos_;
                while (pos_ < s_.size() && (is_name_start(s_[pos_]) || is_digit(s_[pos_]))) ++pos_;
                out_.push_back(Token{Tok::Name, s_.substr(b, pos_ - b), line_, 0, 0});
            } else if (is_digit(c)) {
                number();
            } else if (c == '\'' || c == '"') {
                string_literal(c);
            } else {
                static const char* ops3[] = {"//", "**", "==", "!=", "<=", ">="};
                std::string op(1, c);
                for (const char* o : ops3)
                    if (s_.compare(pos_, 2, o) == 0) op = o;
                if (op.size() == 1 && std::string_view("+-*/%~<>=.,:|()[]{};").find(c) == std::string::npos)
                    lex_fail(line_, fmt::format("unexpected char '{}'", c));
                if (c == '(' || c == '[' || c == '{') ++depth;
                if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
                out_.push_back(Token{Tok::Op, op, line_, 0, 0});
                pos_ += op.size();
            }
        }
    }

    void number() {
        size_t b = pos_;
        auto digits = [&] {
            while (pos_ < s_.size() && (is_digit(s_[pos_]) ||
                                        (s_[pos_] == '_' && pos_ + 1 < s_.size() && is_digit(s_[pos_ + 1]))))
                ++pos_;
        };
        digits();
        bool is_float = false;
        if (pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
            ++pos_;
            digits();
            is_float = true;
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
            size_t q = pos_ + 1;
            if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
            if (q < s_.size() && is_digit(s_[q])) {
                pos_ = q;
                digits();
                is_float = true;
            }
        }
        std::string text;
        for (size_t i = b; i < pos_; ++i)
            if (s_[i] != '_') text.push_back(s_[i]);
        Token t{is_float ? Tok::Float : Tok::Int, text, line_, 0, 0};
        errno = 0;
        if (is_float) {
            t.fval = std::strtod(text.c_str(), nullptr);
        } else {
            t.ival = std::strtoll(text.c_str(), nullptr, 10);
            if (errno == ERANGE) lex_fail(line_, "integer literal too large");
        }
        out_.push_back(std::move(t));
    }

    // Python unicode-escape decoding of a quoted literal.
    void string_literal(char q) {
        int start_line = line_;
        ++pos_;
        std::string out;
        while (true) {
            if (pos_ >= s_.size()) lex_fail(start_line, "unexpected end of template (unterminated string)");
            char c = s_[pos_++];
            if (c == q) break;
            if (c == '\n') ++line_;
            if (c != '\\') {
                out.push_back(c);
                continue;
            }
            if (pos_ >= s_.size()) continue;
            char e = s_[pos_++];
            auto hex = [&](int n) -> bool {
                if (pos_ + static_cast<size_t>(n) > s_.size()) return false;
                uint32_t v = 0;
                for (int i = 0; i < n; ++i) {
                    char h = s_[pos_ + static_cast<size_t>(i)];
                    int d = is_digit(h)              ? h - '0'
                            : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                            : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                     : -1;
                    if (d < 0) return false;
                    v = v * 16 + static_cast<uint32_t>(d);
                }
                if (v > 0x10FFFF) return false;
                pos_ += static_cast<size_t>(n);
                utf8_append(out, v);
                return true;
            };
            switch (e) {
                case 'n':
                    out.push_back('\n');
                    break;
                case 't':
                    out.push_back('\t');
                    break;
                case 'r':
                    out.push_back('\r');
                    break;
                case '\\':
                    out.push_back('\\');
                    break;
                case '\'':
                    out.push_back('\'');
                    break;
                case '"':
                    out.push_back('"');
                    break;
                case 'a':
                    out.push_back('\a');
                    break;
                case 'b':
                    out.push_back('\b');
                    break;
                case 'f':
                    out.push_back('\f');
                    break;
                case 'v':
                    out.push_back('\v');
                    break;
                case '\n':
                    ++line_;
                    break;
                case 'x':
                    if (!hex(2)) lex_fail(line_, "invalid \\x escape in string");
                    break;
                case 'u':
                    if (!hex(4)) lex_fail(line_, "invalid \\u escape in string");
                    break;
                case 'U':
                    if (!hex(8)) lex_fail(line_, "invalid \\U escape in string");
                    break;
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t v = static_cast<uint32_t>(e - '0');
                        for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i)
                            v = v * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
                        utf8_append(out, v);
                    } else {
                        out.push_back('\\');
                        out.push_back(e);
                    }
            }
        }
        out_.push_back(Token{Tok::String, out, start_line, 0, 0});
    }

    std::string s_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> out_;
};

// jinja2 normalises newlines to "\n" and drops one trailing newline (keep_trailing_newline off).
std::string normalise(std::string_view src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out.push_back('\n');
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out.push_back(src[i]);
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

}  // namespace

std::vector<Token> lex_template(std::string_view source) { return Lexer(normalise(source)).run(); }

const char* tok_name(Tok t) {
    switch (t) {
        case Tok::Data:
            return "template data";
        case Tok::VarBegin:
            return "begin of print statement";
        case Tok::VarEnd:
            return "end of print statement";
        case Tok::BlockBegin:
            return "begin of statement block";
        case Tok::BlockEnd:
            return "end of statement block";
        case Tok::Name:
            return "name";
        case Tok::String:
            return "string";
        case Tok::Int:
            return "integer";
        case Tok::Float:
            return "float";
        case Tok::Op:
            return "operator";
        case Tok::Eof:
            return "end of template";
    }
    return "token";
}

}  // namespace pelican::jinja
