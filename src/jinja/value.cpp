#include "jinja/value.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jinja/utf8.h"

namespace pelican::jinja {

void fail(std::string message) { throw RenderError{std::move(message), false}; }

const std::string& empty_text() {
    static const std::string empty;
    return empty;
}

StrBox::StrBox(std::string s) : text(std::move(s)) {
    // Short strings live inside the std::string object (SSO capacity 15).
    held.resize(kObjectBytes + (text.capacity() > 15 ? text.capacity() + 1 : 0), "string too large");
}

ListBox::ListBox(List xs) : items(std::move(xs)) {
    charge(items.size());
    for (const Value& x : items) depth = std::max(depth, x.depth() + 1);
    if (depth > kMaxValueDepth)
        fail(fmt::format("value nested too deeply (lists / dicts more than {} levels deep)", kMaxValueDepth));
    held.resize(kObjectBytes + items.capacity() * sizeof(Value), "list too large");
}

void Value::set_text(std::string s) {
    if (s.empty())
        str_.reset();
    else
        str_ = std::make_shared<const StrBox>(std::move(s));
}

Value Value::make_list(Kind k, List items) {
    Value v = make(k);
    v.list_ = std::make_shared<const ListBox>(std::move(items));
    return v;
}
Value Value::list(List items) { return make_list(Kind::List, std::move(items)); }
Value Value::tuple(List items) { return make_list(Kind::Tuple, std::move(items)); }
Value Value::iter(List items, std::string type_name) {
    Value v = make_list(Kind::Iter, std::move(items));
    v.set_text(std::move(type_name));
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
    v.set_text(std::move(type_name));
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
            return str_ != nullptr;
        case Kind::List:
        case Kind::Tuple:
            return !list_->items.empty();
        case Kind::Dict:
            return !dict_->entries.empty();
        default:
            return true;
    }
}

void Value::fail_undefined() const { fail(str_ ? str_->text : std::string("value is undefined")); }

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
            return str();
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
            d->sync();
            return dict(std::move(d));
        }
        default:
            return none();
    }
}

namespace {

size_t entries_bytes(size_t capacity) { return kObjectBytes + capacity * sizeof(std::pair<Value, Value>); }

[[noreturn]] void too_deep() {
    fail(fmt::format("value nested too deeply (lists / dicts more than {} levels deep)", kMaxValueDepth));
}

}  // namespace

const Value* Dict::find(const Value& key) const {
    charge(entries.size());
    for (const auto& [k, v] : entries)
        if (py_equal(k, key)) return &v;
    return nullptr;
}
const Value* Dict::find(std::string_view key) const {
    charge(entries.size());
    for (const auto& [k, v] : entries)
        if (k.is_string() && k.str() == key) return &v;
    return nullptr;
}
void Dict::set(const Value& key, Value v) {
    uint32_t d = std::max({depth, key.depth() + 1, v.depth() + 1});
    if (d > kMaxValueDepth) too_deep();
    charge(entries.size());
    for (auto& [k, old] : entries)
        if (py_equal(k, key)) {
            old = std::move(v);
            depth = d;
            return;
        }
    if (entries.size() == entries.capacity())  // hold the grown storage before allocating it
        held.resize(entries_bytes(std::max<size_t>(4, 2 * entries.capacity())), "dict too large");
    entries.emplace_back(key, std::move(v));
    depth = d;
}
void Dict::sync() {
    charge(entries.size());
    for (const auto& [k, v] : entries) depth = std::max({depth, k.depth() + 1, v.depth() + 1});
    if (depth > kMaxValueDepth) too_deep();
    held.resize(entries_bytes(entries.capacity()), "dict too large");
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
            if (a.str().size() != b.str().size()) return false;
            charge_bytes(a.str().size());
            return a.str() == b.str();
        case K::List:
        case K::Tuple: {
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            charge(x.size());
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
        charge_bytes(std::min(a.str().size(), b.str().size()));
        int c = a.str().compare(b.str());  // UTF-8 byte order equals code point order
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.kind() == b.kind() && a.is_list()) {
        const auto &x = a.items(), &y = b.items();
        charge(std::min(x.size(), y.size()));
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

}  // namespace pelican::jinja
