// Python's str() and repr() of Jinja values, and markupsafe's escape. Text is built through
// TextBuilder, so printing a value (a list shared many times over prints exponentially large) stays
// within the render's memory limit; dicts being printed are tracked as Python's repr does, so a
// namespace holding itself prints {...} instead of recursing forever.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "jinja/utf8.h"
#include "jinja/value.h"

namespace pelican::jinja {
namespace {

void append_code_point(TextBuilder& out, char32_t c) {
    std::string tmp;  // at most 4 bytes: no allocation
    utf8_append(tmp, c);
    out.append(tmp);
}

void string_repr(TextBuilder& out, const std::string& s) {
    std::u32string u = utf8_decode(s);
    bool has_single = u.find(U'\'') != std::u32string::npos;
    bool has_double = u.find(U'"') != std::u32string::npos;
    char q = (has_single && !has_double) ? '"' : '\'';
    out.push_back(q);
    for (char32_t c : u) {
        if (c == static_cast<char32_t>(q) || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (!py_isprintable(c)) {
            if (c < 0x100)
                out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
            else if (c < 0x10000)
                out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
            else
                out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
        } else {
            append_code_point(out, c);
        }
    }
    out.push_back(q);
}

struct Printer {
    TextBuilder out{"printed value too large"};
    std::vector<const Dict*> open;  // dicts being printed, innermost last
    uint32_t depth = 0;

    void enter() {
        if (++depth > kMaxValueDepth)
            fail(fmt::format("value nested too deeply to print (more than {} levels)", kMaxValueDepth));
    }

    void dict(const Dict& d) {
        if (std::find(open.begin(), open.end(), &d) != open.end()) {
            out += "{...}";  // Python's recursion guard
            return;
        }
        enter();
        open.push_back(&d);
        charge(d.entries.size());
        out += "{";
        bool first = true;
        for (const auto& [k, x] : d.entries) {
            if (!first) out += ", ";
            first = false;
            repr(k);
            out += ": ";
            repr(x);
        }
        out += "}";
        open.pop_back();
        --depth;
    }

    void repr(const Value& v) {
        using K = Value::Kind;
        switch (v.kind()) {
            case K::String:
                string_repr(out, v.str());
                return;
            case K::List:
            case K::Tuple: {
                enter();
                bool tup = v.kind() == K::Tuple;
                out += tup ? "(" : "[";
                const auto& xs = v.items();
                charge(xs.size());
                for (size_t i = 0; i < xs.size(); ++i) {
                    if (i) out += ", ";
                    repr(xs[i]);
                }
                if (tup && xs.size() == 1) out += ",";
                out += tup ? ")" : "]";
                --depth;
                return;
            }
            case K::Dict:
                dict(v.dict_ref());
                return;
            case K::Undefined:
                out += "Undefined";
                return;
            default:
                str(v);
        }
    }

    void str(const Value& v) {
        using K = Value::Kind;
        switch (v.kind()) {
            case K::Object:
                if (v.str() == "Namespace") {
                    out += "<Namespace ";
                    dict(v.dict_ref());
                    out += ">";
                } else {
                    out += "<" + v.str() + " object>";
                }
                return;
            case K::List:
            case K::Tuple:
            case K::Dict:
                repr(v);
                return;
            default:
                out += py_str(v);
        }
    }
};

}  // namespace

std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, r.ptr);  // "-d.ddde+XX"
    bool neg = sci[0] == '-';
    if (neg) sci.erase(0, 1);
    size_t epos = sci.find('e');
    int exp = std::stoi(sci.substr(epos + 1));
    std::string digits;
    for (size_t i = 0; i < epos; ++i)
        if (sci[i] != '.') digits.push_back(sci[i]);
    std::string out = neg ? "-" : "";
    if (exp < -4 || exp >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out.push_back('.'), out.append(digits, 1, std::string::npos);
        out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    } else if (exp < 0) {
        out += "0.";
        out.append(static_cast<size_t>(-exp - 1), '0');
        out += digits;
    } else {
        size_t point = static_cast<size_t>(exp) + 1;
        if (digits.size() <= point) {
            out += digits;
            out.append(point - digits.size(), '0');
            out += ".0";
        } else {
            out.append(digits, 0, point);
            out.push_back('.');
            out.append(digits, point, std::string::npos);
        }
    }
    return out;
}

std::string py_string_repr(const std::string& s) {
    TextBuilder out("string repr too large");
    string_repr(out, s);
    return out.take();
}

std::string html_escape(const std::string& s) {
    TextBuilder out("escaped string too large");
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return out.take();
}

std::string py_repr(const Value& v) {
    Printer p;
    p.repr(v);
    return p.out.take();
}

std::string py_str(const Value& v) {
    using K = Value::Kind;
    switch (v.kind()) {
        case K::Undefined:
            return "";
        case K::None:
            return "None";
        case K::Bool:
            return v.as_bool() ? "True" : "False";
        case K::Int:
            return std::to_string(v.as_int());
        case K::Float:
            return py_float_repr(v.as_float());
        case K::String:
            return v.str();
        case K::Function:
            return "<function " + v.fn().name + ">";
        case K::Iter:
            return "<" + v.str() + " object>";
        default: {
            Printer p;
            p.str(v);
            return p.out.take();
        }
    }
}

}  // namespace pelican::jinja
