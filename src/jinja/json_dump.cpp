#include "jinja/json_dump.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "jinja/utf8.h"

namespace pelican::jinja {
namespace {

struct Dumper {
    const JsonDumpOptions& opt;
    std::string item_sep, key_sep;
    TextBuilder out{"tojson result too large"};  // shared sublists print many times over: checked as it grows
    int depth = 0;

    void newline(int level) {
        out.push_back('\n');
        for (int i = 0; i < level; ++i) out += *opt.indent;
    }

    void string(const std::string& s) {
        out.push_back('"');
        for (char32_t c : utf8_decode(s)) {
            switch (c) {
                case '"':
                    out += "\\\"";
                    break;
                case '\\':
                    out += "\\\\";
                    break;
                case '\n':
                    out += "\\n";
                    break;
                case '\r':
                    out += "\\r";
                    break;
                case '\t':
                    out += "\\t";
                    break;
                case '\b':
                    out += "\\b";
                    break;
                case '\f':
                    out += "\\f";
                    break;
                default:
                    if (c < 0x20) {
                        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
                    } else if (opt.ensure_ascii && c > 0x7E) {
                        if (c >= 0x10000) {
                            char32_t v = c - 0x10000;
                            out +=
                                fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                        } else {
                            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
                        }
                    } else {
                        std::string ch;  // at most 4 bytes: no allocation
                        utf8_append(ch, c);
                        out += ch;
                    }
            }
        }
        out.push_back('"');
    }

    static std::string float_text(double d) {
        if (std::isnan(d)) return "NaN";
        if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
        return py_float_repr(d);
    }

    std::string key_text(const Value& k) {
        if (k.is_string()) return k.str();
        if (k.is_bool()) return k.as_bool() ? "true" : "false";
        if (k.is_int()) return std::to_string(k.as_int());
        if (k.is_float()) return float_text(k.as_float());
        if (k.is_none()) return "null";
        fail(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
    }

    void value(const Value& v) {
        using K = Value::Kind;
        if (++depth > 512) fail("tojson: value nested too deeply");
        switch (v.kind()) {
            case K::None:
                out += "null";
                break;
            case K::Bool:
                out += v.as_bool() ? "true" : "false";
                break;
            case K::Int:
                out += std::to_string(v.as_int());
                break;
            case K::Float:
                out += float_text(v.as_float());
                break;
            case K::String:
                string(v.str());
                break;
            case K::List:
            case K::Tuple: {
                const auto& xs = v.items();
                charge(xs.size());
                if (xs.empty()) {
                    out += "[]";
                    break;
                }
                out.push_back('[');
                for (size_t i = 0; i < xs.size(); ++i) {
                    if (i) out += item_sep;
                    if (opt.indent) newline(depth);
                    value(xs[i]);
                }
                if (opt.indent) newline(depth - 1);
                out.push_back(']');
                break;
            }
            case K::Dict: {
                std::vector<std::pair<std::string, const Value*>> kv;
                for (const auto& [k, x] : v.dict_ref().entries) kv.emplace_back(key_text(k), &x);
                if (opt.sort_keys)
                    std::stable_sort(kv.begin(), kv.end(),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
                if (kv.empty()) {
                    out += "{}";
                    break;
                }
                out.push_back('{');
                for (size_t i = 0; i < kv.size(); ++i) {
                    if (i) out += item_sep;
                    if (opt.indent) newline(depth);
                    string(kv[i].first);
                    out += key_sep;
                    value(*kv[i].second);
                }
                if (opt.indent) newline(depth - 1);
                out.push_back('}');
                break;
            }
            default:
                fail(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
        }
        --depth;
    }
};

}  // namespace

std::string py_json_dumps(const Value& v, const JsonDumpOptions& opt) {
    Dumper d{opt, {}, {}};
    d.item_sep = opt.item_sep ? *opt.item_sep : (opt.indent ? "," : ", ");
    d.key_sep = opt.key_sep ? *opt.key_sep : ": ";
    d.value(v);
    return d.out.take();
}

}  // namespace pelican::jinja
