#include "jinja/str_util.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "jinja/utf8.h"

namespace pelican::jinja {

namespace {

// Whether `needle` sits at hay[at...]; compares kBytesPerStep-byte runs, a step each.
bool matches_at(std::string_view hay, std::string_view needle, size_t at) {
    for (size_t k = 0; k < needle.size(); k += kBytesPerStep) {
        const size_t len = std::min(kBytesPerStep, needle.size() - k);
        if (len == kBytesPerStep) charge(1);
        if (std::memcmp(hay.data() + at + k, needle.data() + k, len) != 0) return false;
    }
    return true;
}

// Bytes of a vector<string> of parts while it is built (before they become Values).
size_t parts_bytes(size_t n_parts, size_t text_bytes) {
    return add_sat(mul_sat(n_parts, sizeof(std::string) + kObjectBytes), text_bytes);
}

}  // namespace

size_t find_text(std::string_view hay, std::string_view needle, size_t pos) {
    if (pos > hay.size() || needle.size() > hay.size() - pos) return std::string_view::npos;
    if (needle.empty()) return pos;
    const size_t last = hay.size() - needle.size();  // last possible start
    size_t i = pos;
    while (i <= last) {
        const void* p = std::memchr(hay.data() + i, needle[0], last - i + 1);
        const size_t at = p ? static_cast<size_t>(static_cast<const char*>(p) - hay.data()) : last + 1;
        charge(1 + (at - i) / kBytesPerStep);  // the scan up to the candidate, and the candidate
        if (!p) break;
        if (matches_at(hay, needle, at)) return at;
        i = at + 1;
    }
    return std::string_view::npos;
}

size_t rfind_text(std::string_view hay, std::string_view needle) {
    if (needle.size() > hay.size()) return std::string_view::npos;
    if (needle.empty()) return hay.size();
    size_t end = hay.size() - needle.size() + 1;  // candidates are the starts < end
    while (end > 0) {
        const void* p = memrchr(hay.data(), needle[0], end);
        const size_t at = p ? static_cast<size_t>(static_cast<const char*>(p) - hay.data()) : 0;
        charge(1 + (end - at) / kBytesPerStep);
        if (!p) break;
        if (matches_at(hay, needle, at)) return at;
        end = at;
    }
    return std::string_view::npos;
}

std::optional<int64_t> parse_py_int(const std::string& s, int base) {
    std::string t = py_strip(s, nullptr, true, true);
    std::string digits;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] == '_' && i > 0 && i + 1 < t.size() && std::isalnum(static_cast<unsigned char>(t[i - 1])) &&
            std::isalnum(static_cast<unsigned char>(t[i + 1])))
            continue;
        digits.push_back(t[i]);
    }
    if (digits.empty() || base < 0 || base == 1 || base > 36) return std::nullopt;
    size_t i = (digits[0] == '+' || digits[0] == '-') ? 1 : 0;
    if (i >= digits.size()) return std::nullopt;
    if (base == 16 && digits.compare(i, 2, "0x") == 0) i += 2;
    for (size_t j = i; j < digits.size(); ++j)
        if (!std::isalnum(static_cast<unsigned char>(digits[j]))) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(digits.c_str(), &end, base == 0 ? 0 : base);
    if (errno == ERANGE || end == nullptr || *end != '\0') return std::nullopt;
    return static_cast<int64_t>(v);
}

std::optional<double> parse_py_float(const std::string& s) {
    std::string t = py_strip(s, nullptr, true, true);
    if (t.empty()) return std::nullopt;
    for (char c : t)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-'))
            return std::nullopt;
    std::string low = py_str_lower(t);
    size_t i = (low[0] == '+' || low[0] == '-') ? 1 : 0;
    std::string body = low.substr(i);
    if (body == "inf" || body == "infinity") return low[0] == '-' ? -INFINITY : INFINITY;
    if (body == "nan") return NAN;
    if (body.find_first_of("xp") != std::string::npos) return std::nullopt;  // no hex floats
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (end == nullptr || *end != '\0') return std::nullopt;
    return d;
}

static bool is_line_break(char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
    std::u32string u = utf8_decode(s);
    std::vector<std::string> out;
    Held held;
    size_t text = 0;
    auto add = [&](std::u32string_view part) {
        std::string t = utf8_encode(part);
        text += t.size();
        held.resize(parts_bytes(out.size() + 1, text), "list of lines too large");
        out.push_back(std::move(t));
    };
    size_t b = 0;
    for (size_t i = 0; i < u.size(); ++i) {
        if (!is_line_break(u[i])) continue;
        size_t e = i;
        if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
        add(std::u32string_view(u).substr(b, (keepends ? i + 1 : e) - b));
        b = i + 1;
    }
    if (b < u.size()) add(std::u32string_view(u).substr(b));
    return out;
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                  bool from_right) {
    std::vector<std::string> out;
    Held held;  // the parts while they are collected
    size_t text = 0;
    auto counted = [&](std::string part) {
        text += part.size();
        held.resize(parts_bytes(out.size() + 1, text), "list of split parts too large");
        return part;
    };
    // From the right, parts are collected last first and reversed at the end.
    auto add = [&](std::string part) { out.push_back(counted(std::move(part))); };
    if (sep) {
        if (sep->empty()) fail("empty separator");
        if (!from_right) {
            size_t b = 0;
            while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
                size_t p = find_text(s, *sep, b);
                if (p == std::string::npos) break;
                add(s.substr(b, p - b));
                b = p + sep->size();
            }
            add(s.substr(b));
        } else {
            size_t e = s.size();
            int64_t n = 0;
            while (maxsplit < 0 || n < maxsplit) {
                if (e < sep->size()) break;
                size_t p = rfind_text(std::string_view(s).substr(0, e), *sep);
                if (p == std::string::npos) break;
                add(s.substr(p + sep->size(), e - p - sep->size()));
                e = p;
                ++n;
            }
            add(s.substr(0, e));
            std::reverse(out.begin(), out.end());
        }
        return out;
    }
    std::u32string u = utf8_decode(s);
    if (!from_right) {
        size_t i = 0;
        while (true) {
            while (i < u.size() && py_isspace(u[i])) ++i;
            if (i >= u.size()) break;
            if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
                add(utf8_encode(std::u32string_view(u).substr(i)));  // remainder keeps its tail
                break;
            }
            size_t b = i;
            while (i < u.size() && !py_isspace(u[i])) ++i;
            add(utf8_encode(std::u32string_view(u).substr(b, i - b)));
        }
    } else {
        size_t i = u.size();
        while (true) {
            while (i > 0 && py_isspace(u[i - 1])) --i;
            if (i == 0) break;
            if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
                add(utf8_encode(std::u32string_view(u).substr(0, i)));
                break;
            }
            size_t e = i;
            while (i > 0 && !py_isspace(u[i - 1])) --i;
            add(utf8_encode(std::u32string_view(u).substr(i, e - i)));
        }
        std::reverse(out.begin(), out.end());
    }
    return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
    TextBuilder out("replaced string too large");
    int64_t n = 0;
    if (old.empty()) {
        std::u32string u = utf8_decode(s);
        std::string ch;
        for (size_t i = 0; i <= u.size(); ++i) {
            if (count < 0 || n < count) {
                out += rep;
                ++n;
            }
            if (i < u.size()) {
                ch.clear();
                utf8_append(ch, u[i]);
                out += ch;
            }
        }
        return out.take();
    }
    size_t b = 0;
    while (count < 0 || n < count) {
        size_t p = find_text(s, old, b);
        if (p == std::string::npos) break;
        out += std::string_view(s).substr(b, p - b);
        out += rep;
        b = p + old.size();
        ++n;
    }
    out += std::string_view(s).substr(b);
    return out.take();
}

std::string py_center(const std::string& s, int64_t width) {
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return s;
    int64_t marg = width - len;
    int64_t left = marg / 2 + (marg & width & 1);
    TextBuilder out("centered string too large");  // checks the width before allocating the padding
    out.append(static_cast<size_t>(left), ' ');
    out += s;
    out.append(static_cast<size_t>(marg - left), ' ');
    return out.take();
}

int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
    size_t p = from_right ? rfind_text(s, sub) : find_text(s, sub, 0);
    if (p == std::string::npos) return -1;
    return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p)));
}

int64_t py_count(const std::string& s, const std::string& sub) {
    if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t p = find_text(s, sub, 0); p != std::string::npos; p = find_text(s, sub, p + sub.size())) ++n;
    return n;
}

namespace {

// Pads `body` to `width` code points; align '<', '>' or '^'.
std::string pad(const std::string& body, int64_t width, char align, const std::string& fill) {
    int64_t len = static_cast<int64_t>(utf8_length(body));
    if (width <= len) return body;
    int64_t n = width - len;
    TextBuilder out("formatted string too large");
    auto rep = [&](int64_t k) {
        for (int64_t i = 0; i < k; ++i) out += fill;
    };
    if (align == '<') {
        out += body;
        rep(n);
    } else if (align == '^') {
        rep(n / 2);
        out += body;
        rep(n - n / 2);
    } else {
        rep(n);
        out += body;
    }
    return out.take();
}

// A width or precision written in a format spec; past kMaxFormatWidth it stays just above it (no
// overflow on a long run of digits), so that the caller's check rejects it.
constexpr int64_t kMaxFormatWidth = 10000;
int64_t parse_width(const std::string& f, size_t& i) {
    int64_t v = 0;
    while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])))
        v = std::min<int64_t>(v * 10 + (f[i++] - '0'), kMaxFormatWidth + 1);
    return v;
}

std::string format_number(const Value& v, char type, int precision) {
    if (type == 'd' || type == 'i') {
        if (v.is_float()) return std::to_string(static_cast<int64_t>(v.as_float()));
        return std::to_string(v.as_int());
    }
    if (type == 'f' || type == 'F')
        return fmt::format("{:.{}f}", v.as_float(), precision < 0 ? 6 : precision);
    if (type == 'e') return fmt::format("{:.{}e}", v.as_float(), precision < 0 ? 6 : precision);
    if (type == 'x') return fmt::format("{:x}", v.as_int());
    if (type == 'X') return fmt::format("{:X}", v.as_int());
    if (type == 'o') return fmt::format("{:o}", v.as_int());
    fail(fmt::format("unsupported format character '{}'", type));
}

}  // namespace

std::string py_percent_format(const std::string& f, const List& args) {
    TextBuilder out("formatted string too large");
    size_t ai = 0;
    for (size_t i = 0; i < f.size(); ++i) {
        if (f[i] != '%') {
            out.push_back(f[i]);
            continue;
        }
        if (++i >= f.size()) fail("incomplete format");
        if (f[i] == '%') {
            out.push_back('%');
            continue;
        }
        bool left = false, zero = false;
        while (i < f.size() && (f[i] == '-' || f[i] == '0' || f[i] == ' ' || f[i] == '+')) {
            if (f[i] == '-') left = true;
            if (f[i] == '0') zero = true;
            ++i;
        }
        int64_t width = parse_width(f, i);
        int precision = -1;
        if (i < f.size() && f[i] == '.') {
            ++i;
            precision = static_cast<int>(parse_width(f, i));
        }
        if (i >= f.size()) fail("incomplete format");
        if (width > kMaxFormatWidth) fail("format width too large");
        if (precision > kMaxFormatWidth) fail("format precision too large");
        char type = f[i];
        if (ai >= args.size()) fail("not enough arguments for format string");
        const Value& v = args[ai++];
        std::string body;
        if (type == 's')
            body = py_str(v);
        else if (type == 'r' || type == 'a')
            body = py_repr(v);
        else if (type == 'c')
            body = py_str(v);
        else {
            if (!v.is_number())
                fail(fmt::format("%{} format: a real number is required, not {}", type, v.type_name()));
            body = format_number(v, type, precision);
        }
        if (type == 's' && precision >= 0)
            body = utf8_encode(utf8_decode(body).substr(0, static_cast<size_t>(precision)));
        out += pad(body, width, left ? '<' : '>', zero && !left && type != 's' ? "0" : " ");
    }
    if (ai < args.size() && !(args.size() == 1 && args[0].is_dict()))
        fail("not all arguments converted during string formatting");
    return out.take();
}

std::string py_str_format(const std::string& f, const CallArgs& args) {
    TextBuilder out("formatted string too large");
    size_t auto_idx = 0;
    for (size_t i = 0; i < f.size(); ++i) {
        char c = f[i];
        if (c == '}') {
            if (i + 1 < f.size() && f[i + 1] == '}')
                ++i;
            else
                fail("Single '}' encountered in format string");
            out.push_back('}');
            continue;
        }
        if (c != '{') {
            out.push_back(c);
            continue;
        }
        if (i + 1 < f.size() && f[i + 1] == '{') {
            out.push_back('{');
            ++i;
            continue;
        }
        size_t e = f.find('}', i);
        if (e == std::string::npos) fail("Single '{' encountered in format string");
        std::string field = f.substr(i + 1, e - i - 1);
        i = e;
        std::string spec, conv;
        if (size_t p = field.find(':'); p != std::string::npos) spec = field.substr(p + 1), field.resize(p);
        if (size_t p = field.find('!'); p != std::string::npos) conv = field.substr(p + 1), field.resize(p);
        Value v;
        if (field.empty()) {
            if (auto_idx >= args.pos.size()) fail("Replacement index out of range for positional args tuple");
            v = args.pos[auto_idx++];
        } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
            size_t k = std::stoul(field);
            if (k >= args.pos.size()) fail("Replacement index out of range for positional args tuple");
            v = args.pos[k];
        } else {
            bool found = false;
            for (const auto& [k, x] : args.kw)
                if (k == field) v = x, found = true;
            if (!found) fail(fmt::format("'{}'", field));
        }
        std::string body = conv == "r" ? py_repr(v) : py_str(v);
        if (!spec.empty()) {
            size_t p = 0;
            std::string fill = " ";
            char align = v.is_number() ? '>' : '<';
            if (spec.size() >= 2 && (spec[1] == '<' || spec[1] == '>' || spec[1] == '^'))
                fill = spec.substr(0, 1), align = spec[1], p = 2;
            else if (spec[0] == '<' || spec[0] == '>' || spec[0] == '^')
                align = spec[0], p = 1;
            int64_t width = parse_width(spec, p);
            int precision = -1;
            if (p < spec.size() && spec[p] == '.') {
                ++p;
                precision = static_cast<int>(parse_width(spec, p));
                if (precision > kMaxFormatWidth) fail("format precision too large");
            }
            if (p < spec.size()) {
                if (!v.is_number())
                    fail(fmt::format("Unknown format code '{}' for object of type '{}'", spec[p],
                                     v.type_name()));
                body = format_number(v, spec[p], precision);
            } else if (precision >= 0 && v.is_float()) {
                body = fmt::format("{:.{}g}", v.as_float(), precision);
            }
            if (width > kMaxFormatWidth) fail("format width too large");
            body = pad(body, width, align, fill);
        }
        out += body;
    }
    return out.take();
}

}  // namespace pelican::jinja
