// Methods of built-in values (str, dict, list) as the immutable sandbox exposes them:
// mutating methods (list.append, dict.update, ...) resolve to an Undefined that raises
// jinja2's SecurityError message when called.
#include <algorithm>

#include <fmt/format.h>

#include "jinja/interp.h"
#include "jinja/str_util.h"
#include "jinja/utf8.h"

namespace pelican::jinja {
namespace {

using Method = Value (*)(const Value& self, const CallArgs& a);

Value bound(const Value& self, const std::string& name, Method m) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->call = [self, m](const CallArgs& a) {
        charge(1);  // and what the method does: scans, copies and results are charged where they happen
        return m(self, a);
    };
    return Value::function(std::move(c));
}

std::string need_str(const Value& v, const char* what) {
    if (!v.is_string()) {
        v.require();
        fail(fmt::format("{} must be str, not {}", what, v.type_name()));
    }
    return v.str();
}

const std::string* opt_chars(const Value& v, std::string& buf) {
    if (v.is_undefined() || v.is_none()) return nullptr;
    buf = need_str(v, "strip arg");
    return &buf;
}

Value str_list(std::vector<std::string> parts) {
    check_room(mul_sat(parts.size(), sizeof(Value) + kObjectBytes), "list of strings too large");
    List out;
    out.reserve(parts.size());
    for (auto& p : parts) out.push_back(Value::string(std::move(p)));
    return Value::list(std::move(out));
}

Value affix_check(const Value& self, const CallArgs& a, bool prefix) {
    auto p = a.bind(prefix ? "startswith" : "endswith", {"prefix"});
    List cands = p[0].kind() == Value::Kind::Tuple ? p[0].items() : List{p[0]};
    const std::string& s = self.str();
    for (const auto& c : cands) {
        std::string x = need_str(c, prefix ? "startswith arg" : "endswith arg");
        bool hit = x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0
                                                   : s.compare(s.size() - x.size(), x.size(), x) == 0);
        if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
}

Value split_impl(const Value& self, const CallArgs& a, bool right) {
    auto p = a.bind(right ? "rsplit" : "split", {"sep", "maxsplit"});
    std::string sep;
    const std::string* sp = nullptr;
    if (!p[0].is_undefined() && !p[0].is_none()) sep = need_str(p[0], "sep"), sp = &sep;
    int64_t maxsplit = p[1].is_undefined() ? -1 : p[1].as_int();
    return str_list(py_split(self.str(), sp, maxsplit, right));
}

template <bool (*Pred)(char32_t)>
Value char_class(const Value& self, const CallArgs&) {
    std::u32string u = utf8_decode(self.str());
    if (u.empty()) return Value::boolean(false);
    return Value::boolean(std::all_of(u.begin(), u.end(), Pred));
}

Value cased_check(const Value& self, bool upper) {
    bool any = false;
    for (char32_t c : utf8_decode(self.str())) {
        if (upper ? py_islower(c) : py_isupper(c)) return Value::boolean(false);
        if (py_islower(c) || py_isupper(c)) any = true;
    }
    return Value::boolean(any);
}

Value str_method(const Value& self, const std::string& name) {
    static const std::vector<std::pair<const char*, Method>> table = {
        {"startswith", [](const Value& s, const CallArgs& a) { return affix_check(s, a, true); }},
        {"endswith", [](const Value& s, const CallArgs& a) { return affix_check(s, a, false); }},
        {"split", [](const Value& s, const CallArgs& a) { return split_impl(s, a, false); }},
        {"rsplit", [](const Value& s, const CallArgs& a) { return split_impl(s, a, true); }},
        {"strip",
         [](const Value& s, const CallArgs& a) {
             std::string b;
             return Value::string(py_strip(s.str(), opt_chars(a.bind("strip", {"chars"})[0], b), true, true));
         }},
        {"lstrip",
         [](const Value& s, const CallArgs& a) {
             std::string b;
             return Value::string(
                 py_strip(s.str(), opt_chars(a.bind("lstrip", {"chars"})[0], b), true, false));
         }},
        {"rstrip",
         [](const Value& s, const CallArgs& a) {
             std::string b;
             return Value::string(
                 py_strip(s.str(), opt_chars(a.bind("rstrip", {"chars"})[0], b), false, true));
         }},
        {"upper", [](const Value& s, const CallArgs&) { return Value::string(py_str_upper(s.str())); }},
        {"lower", [](const Value& s, const CallArgs&) { return Value::string(py_str_lower(s.str())); }},
        {"casefold", [](const Value& s, const CallArgs&) { return Value::string(py_str_lower(s.str())); }},
        {"title", [](const Value& s, const CallArgs&) { return Value::string(py_str_title(s.str())); }},
        {"capitalize",
         [](const Value& s, const CallArgs&) { return Value::string(py_str_capitalize(s.str())); }},
        {"replace",
         [](const Value& s, const CallArgs& a) {
             auto p = a.bind("replace", {"old", "new", "count"});
             int64_t count = p[2].is_undefined() ? -1 : p[2].as_int();
             return Value::string(py_replace(s.str(), need_str(p[0], "replace arg 1"),
                                             need_str(p[1], "replace arg 2"), count));
         }},
        {"find",
         [](const Value& s, const CallArgs& a) {
             return Value::integer(py_find(s.str(), need_str(a.bind("find", {"sub"})[0], "find arg"), false));
         }},
        {"rfind",
         [](const Value& s, const CallArgs& a) {
             return Value::integer(
                 py_find(s.str(), need_str(a.bind("rfind", {"sub"})[0], "rfind arg"), true));
         }},
        {"index",
         [](const Value& s, const CallArgs& a) {
             int64_t i = py_find(s.str(), need_str(a.bind("index", {"sub"})[0], "index arg"), false);
             if (i < 0) fail("substring not found");
             return Value::integer(i);
         }},
        {"rindex",
         [](const Value& s, const CallArgs& a) {
             int64_t i = py_find(s.str(), need_str(a.bind("rindex", {"sub"})[0], "rindex arg"), true);
             if (i < 0) fail("substring not found");
             return Value::integer(i);
         }},
        {"count",
         [](const Value& s, const CallArgs& a) {
             return Value::integer(py_count(s.str(), need_str(a.bind("count", {"sub"})[0], "count arg")));
         }},
        {"format",
         [](const Value& s, const CallArgs& a) { return Value::string(py_str_format(s.str(), a)); }},
        {"join",
         [](const Value& s, const CallArgs& a) {
             TextBuilder out("joined string too large");
             size_t i = 0;
             for (const auto& x : iterate(a.bind("join", {"iterable"})[0].require())) {
                 if (!x.is_string())
                     fail(fmt::format("sequence item {}: expected str instance, {} found", i, x.type_name()));
                 if (i++) out += s.str();
                 out += x.str();
             }
             return Value::string(out.take());
         }},
        {"splitlines",
         [](const Value& s, const CallArgs& a) {
             return str_list(py_splitlines(s.str(), a.bind("splitlines", {"keepends"})[0].truthy()));
         }},
        {"isdigit", char_class<py_isdigit>},
        {"isdecimal", char_class<py_isdigit>},
        {"isnumeric", char_class<py_isdigit>},
        {"isalpha", char_class<py_isalpha>},
        {"isalnum", char_class<py_isalnum>},
        {"isspace", char_class<py_isspace>},
        {"islower", [](const Value& s, const CallArgs&) { return cased_check(s, false); }},
        {"isupper", [](const Value& s, const CallArgs&) { return cased_check(s, true); }},
        {"center",
         [](const Value& s, const CallArgs& a) {
             return Value::string(py_center(s.str(), a.bind("center", {"width"})[0].require().as_int()));
         }},
        {"removeprefix",
         [](const Value& s, const CallArgs& a) {
             std::string x = need_str(a.bind("removeprefix", {"prefix"})[0], "prefix");
             return Value::string(s.str().compare(0, x.size(), x) == 0 ? s.str().substr(x.size()) : s.str());
         }},
        {"removesuffix",
         [](const Value& s, const CallArgs& a) {
             std::string x = need_str(a.bind("removesuffix", {"suffix"})[0], "suffix");
             const std::string& t = s.str();
             bool hit =
                 !x.empty() && x.size() <= t.size() && t.compare(t.size() - x.size(), x.size(), x) == 0;
             return Value::string(hit ? t.substr(0, t.size() - x.size()) : t);
         }},
        {"partition",
         [](const Value& s, const CallArgs& a) {
             std::string x = need_str(a.bind("partition", {"sep"})[0], "sep");
             size_t p = find_text(s.str(), x, 0);
             if (p == std::string::npos) return Value::tuple({s, Value::string(""), Value::string("")});
             return Value::tuple({Value::string(s.str().substr(0, p)), Value::string(x),
                                  Value::string(s.str().substr(p + x.size()))});
         }},
    };
    for (const auto& [n, m] : table)
        if (name == n) return bound(self, name, m);
    return Value();
}

Value unsafe(const Value& obj, const std::string& name) {
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
}

}  // namespace

std::optional<Value> get_method(const Value& obj, const std::string& name) {
    if (obj.is_string()) {
        Value m = str_method(obj, name);
        if (m.is_function()) return m;
        return std::nullopt;
    }
    if (obj.is_dict()) {
        if (name == "get")
            return bound(obj, name, [](const Value& s, const CallArgs& a) {
                auto p = a.bind("get", {"key", "default"});
                if (const Value* v = s.dict_ref().find(p[0])) return *v;
                return p[1].is_undefined() ? Value::none() : p[1];
            });
        if (name == "keys")
            return bound(obj, name, [](const Value& s, const CallArgs&) { return Value::list(iterate(s)); });
        if (name == "values")
            return bound(obj, name, [](const Value& s, const CallArgs&) {
                List out;
                for (const auto& [k, v] : s.dict_ref().entries) out.push_back(v);
                return Value::list(std::move(out));
            });
        if (name == "items")
            return bound(obj, name, [](const Value& s, const CallArgs&) {
                List out;
                for (const auto& [k, v] : s.dict_ref().entries) out.push_back(Value::tuple({k, v}));
                return Value::list(std::move(out));
            });
        if (name == "copy")
            return bound(obj, name, [](const Value& s, const CallArgs&) {
                return Value::dict(std::make_shared<Dict>(s.dict_ref()));
            });
        for (const char* n : {"pop", "popitem", "setdefault", "update", "clear"})
            if (name == n) return unsafe(obj, name);
        return std::nullopt;
    }
    if (obj.is_list()) {
        if (name == "index")
            return bound(obj, name, [](const Value& s, const CallArgs& a) {
                auto p = a.bind("index", {"value"});
                charge(s.items().size());
                for (size_t i = 0; i < s.items().size(); ++i)
                    if (py_equal(s.items()[i], p[0])) return Value::integer(static_cast<int64_t>(i));
                fail(fmt::format("{} is not in list", py_repr(p[0])));
            });
        if (name == "count")
            return bound(obj, name, [](const Value& s, const CallArgs& a) {
                auto p = a.bind("count", {"value"});
                charge(s.items().size());
                int64_t n = 0;
                for (const auto& x : s.items()) n += py_equal(x, p[0]);
                return Value::integer(n);
            });
        if (name == "copy" && obj.kind() == Value::Kind::List)
            return bound(obj, name, [](const Value& s, const CallArgs&) { return Value::list(s.items()); });
        if (obj.kind() == Value::Kind::List)
            for (const char* n : {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})
                if (name == n) return unsafe(obj, name);
        return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace pelican::jinja
