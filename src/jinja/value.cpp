#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jinja/utf8.h"

namespace pelican::jinja {

void fail(std::string message) { throw RenderError{std::move(message), false}; }

Value Value::list(List items) {
    Value v = make(Kind::List);
    v.list_ = std::make_shared<List>(std::move(items));
    return v;
}
Value Value::tuple(List items) {
    Value v = make(Kind::Tuple);
    v.list_ = std::make_shared<List>(std::move(items));
    return v;
}
Value Value::iter(List items, std::string type_name) {
    Value v = make(Kind::Iter);
    v.list_ = std::make_shared<List>(std::move(items));
    v.str_ = std::move(type_name);
    return v;
}
Value Value::dict(std::shared_ptr<Dict> d) {
    Value v = make(Kind::Dict);
    v.dict_ = std::move(d);
    return v;
}
Value Value::dict() { return dict(std::make_shared<Dict>()); }
Value Value::object(std::string type_name, std::shared_ptr<Dict> attrs) {
    Value v = make(Kind::Object);
    v.str_ = std::move(type_name);
    v.dict_ = std::move(attrs);
    return v;
}
Value Value::function(std::shared_ptr<Callable> fn) {
    Value v = make(Kind::Function);
    v.fn_ = std::move(fn);
    return v;
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined:
        case Kind::None:
            return false;
        case Kind::Bool:
        case Kind::Int:
            return i_ != 0;
        case Kind::Float:
            return f_ != 0;
        case Kind::String:
            return !str_.empty();
        case Kind::List:
        case Kind::Tuple:
            return !list_->empty();
        case Kind::Dict:
            return !dict_->entries.empty();
        default:
            return true;
    }
}

void Value::fail_undefined() const { fail(str_.empty() ? std::string("value is undefined") : str_); }

std::string Value::type_name() const {
    switch (kind_) {
        case Kind::Undefined:
            return "Undefined";
        case Kind::None:
            return "NoneType";
        case Kind::Bool:
            return "bool";
        case Kind::Int:
            return "int";
        case Kind::Float:
            return "float";
        case Kind::String:
            return "str";
        case Kind::List:
            return "list";
        case Kind::Tuple:
            return "tuple";
        case Kind::Dict:
            return "dict";
        case Kind::Object:
        case Kind::Iter:
            return str_;
        case Kind::Function:
            return "function";
    }
    return "object";
}

Value Value::from_json(const nlohmann::ordered_json& j) {
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null:
            return none();
        case nlohmann::ordered_json::value_t::boolean:
            return boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
            return integer(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            auto u = j.get<uint64_t>();
            if (u > static_cast<uint64_t>(INT64_MAX)) return number(static_cast<double>(u));
            return integer(static_cast<int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float:
            return number(j.get<double>());
        case nlohmann::ordered_json::value_t::string:
            return string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            List items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e));
            return list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            auto d = std::make_shared<Dict>();
            d->entries.reserve(j.size());
            for (auto it = j.begin(); it != j.end(); ++it)
                d->entries.emplace_back(string(it.key()), from_json(*it));
            return dict(std::move(d));
        }
        default:
            return none();
    }
}

const Value* Dict::find(const Value& key) const {
    for (const auto& [k, v] : entries)
        if (py_equal(k, key)) return &v;
    return nullptr;
}
const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : entries)
        if (k.is_string() && k.str() == key) return &v;
    return nullptr;
}
void Dict::set(const Value& key, Value v) {
    for (auto& [k, old] : entries)
        if (py_equal(k, key)) {
            old = std::move(v);
            return;
        }
    entries.emplace_back(key, std::move(v));
}

std::vector<Value> CallArgs::bind(const char* fn_name, std::initializer_list<const char*> names) const {
    std::vector<Value> out(names.size());
    if (pos.size() > names.size())
        fail(fmt::format("{}() takes at most {} arguments ({} given)", fn_name, names.size(), pos.size()));
    for (size_t i = 0; i < pos.size(); ++i) out[i] = pos[i];
    for (const auto& [k, v] : kw) {
        size_t i = 0;
        for (const char* n : names) {
            if (k == n) break;
            ++i;
        }
        if (i == names.size()) fail(fmt::format("{}() got an unexpected keyword argument '{}'", fn_name, k));
        if (i < pos.size()) fail(fmt::format("{}() got multiple values for argument '{}'", fn_name, k));
        out[i] = v;
    }
    return out;
}

bool py_equal(const Value& a, const Value& b) {
    using K = Value::Kind;
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case K::Undefined:
        case K::None:
            return true;
        case K::String:
            return a.str() == b.str();
        case K::List:
        case K::Tuple: {
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!py_equal(x[i], y[i])) return false;
            return true;
        }
        case K::Dict: {
            const auto &x = a.dict_ref().entries, &y = b.dict_ref().entries;
            if (x.size() != y.size()) return false;
            for (const auto& [k, v] : x) {
                const Value* o = b.dict_ref().find(k);
                if (!o || !py_equal(v, *o)) return false;
            }
            return true;
        }
        case K::Object:
            return a.dict_ptr() == b.dict_ptr();
        case K::Function:
            return &a.fn() == &b.fn();
        default:
            return false;
    }
}

int py_compare(const Value& a, const Value& b, const char* op) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            double x = a.as_float(), y = b.as_float();
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
        int c = a.str().compare(b.str());  // UTF-8 byte order equals code point order
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.kind() == b.kind() && a.is_list()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (py_equal(x[i], y[i])) continue;
            return py_compare(x[i], y[i], op);
        }
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    if (a.is_undefined()) a.fail_undefined();
    if (b.is_undefined()) b.fail_undefined();
    fail(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(),
                     b.type_name()));
}

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
    std::u32string u = utf8_decode(s);
    bool has_single = u.find(U'\'') != std::u32string::npos;
    bool has_double = u.find(U'"') != std::u32string::npos;
    char q = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, q);
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
            utf8_append(out, c);
        }
    }
    out.push_back(q);
    return out;
}

std::string html_escape(const std::string& s) {
    std::string out;
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
    return out;
}

std::string py_repr(const Value& v) {
    using K = Value::Kind;
    switch (v.kind()) {
        case K::String:
            return py_string_repr(v.str());
        case K::List:
        case K::Tuple: {
            bool tup = v.kind() == K::Tuple;
            std::string out = tup ? "(" : "[";
            const auto& xs = v.items();
            for (size_t i = 0; i < xs.size(); ++i) {
                if (i) out += ", ";
                out += py_repr(xs[i]);
            }
            if (tup && xs.size() == 1) out += ",";
            out += tup ? ")" : "]";
            return out;
        }
        case K::Dict: {
            std::string out = "{";
            bool first = true;
            for (const auto& [k, x] : v.dict_ref().entries) {
                if (!first) out += ", ";
                first = false;
                out += py_repr(k) + ": " + py_repr(x);
            }
            return out + "}";
        }
        case K::Undefined:
            return "Undefined";
        default:
            return py_str(v);
    }
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
        case K::Object: {
            if (v.str() == "Namespace") {
                Value d = Value::dict(v.dict_ptr());
                return "<Namespace " + py_repr(d) + ">";
            }
            return "<" + v.str() + " object>";
        }
        case K::Function:
            return "<function " + v.fn().name + ">";
        case K::Iter:
            return "<" + v.str() + " object>";
        default:
            return py_repr(v);
    }
}

}  // namespace pelican::jinja
