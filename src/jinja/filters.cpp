// jinja2's built-in filters plus HF's tojson override. Sequence-producing filters that are
// generators in jinja2 (map, select*, reject*, unique, items, batch, reverse) return Iter values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include <fmt/format.h>

#include "jinja/interp.h"
#include "jinja/json_dump.h"
#include "jinja/str_util.h"
#include "jinja/utf8.h"

namespace pelican::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

bool opt_bool(const Value& v, bool dflt) { return v.is_undefined() ? dflt : v.truthy(); }

// jinja2 make_attrgetter: "a.b.0" walks getitem per dotted part (digit parts are ints).
Value attr_path(const Value& item, const Value& attribute) {
    if (attribute.is_int()) return get_item(item, attribute);
    Value cur = item;
    std::string path = py_str(attribute);
    size_t b = 0;
    while (true) {
        size_t e = path.find('.', b);
        std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
        bool digits = !part.empty() &&
                      std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
        if (e == std::string::npos) break;
        b = e + 1;
    }
    return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value::string(py_str_lower(v.str()));
    return v;
}

size_t py_len(const Value& v) {
    if (v.is_string()) return utf8_length(v.str());
    if (v.is_list()) return v.items().size();
    if (v.is_dict()) return v.dict_ref().entries.size();
    if (v.is_undefined()) return 0;
    fail(fmt::format("object of type '{}' has no len()", v.type_name()));
}

Value do_round(const Value& v, const CallArgs& a) {
    auto p = a.bind("round", {"precision", "method"});
    int64_t prec = p[0].is_undefined() ? 0 : p[0].as_int();
    std::string method = p[1].is_undefined() ? "common" : py_str(p[1]);
    if (method != "common" && method != "ceil" && method != "floor")
        fail("method must be common, ceil or floor");
    v.require();
    if (!v.is_number()) fail(fmt::format("type {} doesn't define __round__ method", v.type_name()));
    if (method == "common") {
        if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays int for n >= 0
        if (prec < 0 || prec > 300) fail("round: unsupported precision");
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), v.as_float());  // half-even, exact
        return Value::number(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(prec));
    double x = v.as_float() * scale;
    return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value do_tojson(const Value& v, const CallArgs& a) {
    auto p = a.bind("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonDumpOptions o;
    o.ensure_ascii = opt_bool(p[0], false);
    if (p[1].is_int()) {
        o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(p[1].as_int(), 0, 1000)), ' ');
    } else if (p[1].is_string()) {
        o.indent = p[1].str();
    } else if (!p[1].is_undefined() && !p[1].is_none()) {
        fail("tojson: indent must be an int or a string");
    }
    if (!p[2].is_undefined() && !p[2].is_none()) {
        if (!p[2].is_list() || p[2].items().size() != 2) fail("tojson: separators must be a pair of strings");
        o.item_sep = py_str(p[2].items()[0]);
        o.key_sep = py_str(p[2].items()[1]);
    }
    o.sort_keys = opt_bool(p[3], false);
    return Value::string(py_json_dumps(v, o));
}

Value select_or_reject(const Value& seq, const CallArgs& a, bool select, bool by_attr, const char* name) {
    if (!seq.truthy()) return Value::iter({});  // jinja2: `if value:` guards the loop
    size_t first_test_arg = by_attr ? 1 : 0;
    Value attribute;
    if (by_attr) {
        if (a.pos.empty()) fail(fmt::format("{}() needs an attribute name", name));
        attribute = a.pos[0];
    }
    bool has_test = a.pos.size() > first_test_arg;
    std::string test = has_test ? py_str(a.pos[first_test_arg]) : "";
    CallArgs targs;
    for (size_t i = first_test_arg + 1; i < a.pos.size(); ++i) targs.pos.push_back(a.pos[i]);
    targs.kw = a.kw;
    List out;
    for (const auto& item : iterate(seq)) {
        Value x = by_attr ? attr_path(item, attribute) : item;
        bool ok = has_test ? apply_test(test, x, targs, 0) : x.truthy();
        if (ok == select) out.push_back(item);
    }
    return Value::iter(std::move(out));
}

Value do_map(const Value& seq, const CallArgs& a) {
    List out;
    if (!seq.truthy()) return Value::iter({});
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, v] : a.kw) {
        if (k == "attribute")
            attribute = &v;
        else if (k == "default")
            dflt = &v;
    }
    if (attribute) {
        for (const auto& item : iterate(seq)) {
            Value x = attr_path(item, *attribute);
            if (x.is_undefined() && dflt) x = *dflt;
            out.push_back(std::move(x));
        }
        return Value::iter(std::move(out));
    }
    if (a.pos.empty()) fail("map requires a filter argument");
    std::string filter = py_str(a.pos[0]);
    CallArgs fargs{List(a.pos.begin() + 1, a.pos.end()), a.kw};
    for (const auto& item : iterate(seq)) out.push_back(apply_filter(filter, item, fargs, 0));
    return Value::iter(std::move(out));
}

// Comparisons of a sort of n items: n * log2(n).
void charge_sort(size_t n) {
    size_t log2 = 1;
    while ((size_t{1} << log2) < n && log2 < 63) ++log2;
    charge(mul_sat(n, log2));
}

Value do_sort(const Value& v, const CallArgs& a) {
    auto p = a.bind("sort", {"reverse", "case_sensitive", "attribute"});
    bool reverse = opt_bool(p[0], false), cs = opt_bool(p[1], false);
    List items = iterate(v);
    charge_sort(items.size());
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& it : items)
        keyed.emplace_back(sort_key(p[2].is_undefined() || p[2].is_none() ? it : attr_path(it, p[2]), cs),
                           it);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? py_compare(y.first, x.first) < 0 : py_compare(x.first, y.first) < 0;
    });
    List out;
    for (auto& [k, x] : keyed) out.push_back(std::move(x));
    return Value::list(std::move(out));
}

Value do_dictsort(const Value& v, const CallArgs& a) {
    auto p = a.bind("dictsort", {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) fail("You can only sort by either \"key\" or \"value\"");
    bool cs = opt_bool(p[0], false), reverse = opt_bool(p[2], false);
    std::string by = p[1].is_undefined() ? "key" : py_str(p[1]);
    if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
    size_t pos = by == "key" ? 0 : 1;
    List items;
    for (const auto& [k, x] : v.dict_ref().entries) items.push_back(Value::tuple({k, x}));
    charge_sort(items.size());
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
        return reverse ? py_compare(ky, kx) < 0 : py_compare(kx, ky) < 0;
    });
    return Value::list(std::move(items));
}

Value do_min_max(const Value& v, const CallArgs& a, bool is_max) {
    auto p = a.bind(is_max ? "max" : "min", {"case_sensitive", "attribute"});
    bool cs = opt_bool(p[0], false);
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& x) {
        return sort_key(p[1].is_undefined() || p[1].is_none() ? x : attr_path(x, p[1]), cs);
    };
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
        int c = py_compare(key(items[i]), key(items[best]));
        if (is_max ? c > 0 : c < 0) best = i;
    }
    return items[best];
}

Value do_unique(const Value& v, const CallArgs& a) {
    auto p = a.bind("unique", {"case_sensitive", "attribute"});
    bool cs = opt_bool(p[0], false);
    List out, seen;
    for (const auto& x : iterate(v)) {
        Value k = sort_key(p[1].is_undefined() || p[1].is_none() ? x : attr_path(x, p[1]), cs);
        charge(seen.size());
        bool dup = false;
        for (const auto& s : seen)
            if (py_equal(s, k)) dup = true;
        if (dup) continue;
        seen.push_back(k);
        out.push_back(x);
    }
    return Value::iter(std::move(out));
}

Value do_int(const Value& v, const CallArgs& a) {
    auto p = a.bind("int", {"default", "base"});
    Value dflt = p[0].is_undefined() ? Value::integer(0) : p[0];
    int base = p[1].is_undefined() ? 10 : static_cast<int>(p[1].as_int());
    v.require();
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
        double d = v.as_float();
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
        return Value::integer(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
        charge_bytes(v.str().size());
        if (auto i = parse_py_int(v.str(), base)) return Value::integer(*i);
        if (auto f = parse_py_float(v.str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
            return Value::integer(static_cast<int64_t>(*f));
    }
    return dflt;
}

Value do_float(const Value& v, const CallArgs& a) {
    auto p = a.bind("float", {"default"});
    Value dflt = p[0].is_undefined() ? Value::number(0.0) : p[0];
    v.require();
    if (v.is_number()) return Value::number(v.as_float());
    if (v.is_string()) {
        charge_bytes(v.str().size());
        if (auto f = parse_py_float(v.str())) return Value::number(*f);
    }
    return dflt;
}

Value do_indent(const Value& v, const CallArgs& a) {
    auto p = a.bind("indent", {"width", "first", "blank"});
    std::string ind =
        p[0].is_string()
            ? p[0].str()
            : std::string(
                  p[0].is_undefined() ? 4 : static_cast<size_t>(std::clamp<int64_t>(p[0].as_int(), 0, 1000)),
                  ' ');
    bool first = opt_bool(p[1], false), blank = opt_bool(p[2], false);
    std::vector<std::string> lines = py_splitlines(py_str(v) + "\n");
    TextBuilder rv("indented string too large");  // each line gains up to 1000 bytes: checked as it grows
    if (first) rv += ind;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) {
            if (i) rv.push_back('\n'), rv += ind;
            rv += lines[i];
        }
    } else {
        if (!lines.empty()) rv += lines[0];
        for (size_t i = 1; i < lines.size(); ++i) {
            rv.push_back('\n');
            if (!lines[i].empty()) rv += ind;
            rv += lines[i];
        }
    }
    return Value::string(rv.take());
}

Value do_title(const Value& v) {
    // jinja2 splits at runs of [-\s({[<] and capitalises each piece's first character.
    std::u32string u = utf8_decode(py_str(v));
    std::string out;
    bool start = true;
    for (char32_t c : u) {
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
        if (sep) {
            utf8_append(out, c);
            start = true;
        } else {
            utf8_append(out, start ? py_upper(c) : py_lower(c));
            start = false;
        }
    }
    return Value::string(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& filters() {
    static const std::unordered_map<std::string, FilterFn> f = [] {
        std::unordered_map<std::string, FilterFn> m;
        auto str_arg = [](const CallArgs& a, size_t i, const char* dflt) {
            return i < a.pos.size() ? py_str(a.pos[i]) : std::string(dflt);
        };
        m["default"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("default", {"default_value", "boolean"});
            bool boolean = opt_bool(p[1], false);
            if (v.is_undefined() || (boolean && !v.truthy()))
                return p[0].is_undefined() ? Value::string("") : p[0];
            return v;
        };
        m["d"] = m["default"];
        m["length"] = [](const Value& v, const CallArgs&) {
            return Value::integer(static_cast<int64_t>(py_len(v)));
        };
        m["count"] = m["length"];
        // Lists are read in place, other iterables listed first.
        m["first"] = [](const Value& v, const CallArgs&) {
            const bool seq = v.is_list() || v.kind() == Value::Kind::Iter;
            const Value xs = seq ? v : Value::list(iterate(v));
            return xs.items().empty() ? Value::undefined("No first item, sequence was empty.")
                                      : xs.items().front();
        };
        m["last"] = [](const Value& v, const CallArgs&) {
            if (v.kind() == Value::Kind::Iter)
                fail(fmt::format("'{}' object is not reversible", v.type_name()));
            const Value xs = v.is_list() ? v : Value::list(iterate(v));
            return xs.items().empty() ? Value::undefined("No last item, sequence was empty.")
                                      : xs.items().back();
        };
        m["join"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("join", {"d", "attribute"});
            std::string sep = p[0].is_undefined() ? "" : py_str(p[0]);
            TextBuilder out("joined string too large");
            bool first = true;
            for (const auto& x : iterate(v)) {
                if (!first) out += sep;
                first = false;
                const Value& item = p[1].is_undefined() || p[1].is_none() ? x : attr_path(x, p[1]);
                if (item.is_string())
                    out += item.str();
                else
                    out += py_str(item);
            }
            return Value::string(out.take());
        };
        m["trim"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("trim", {"chars"});
            std::string chars = p[0].is_undefined() || p[0].is_none() ? "" : py_str(p[0]);
            return Value::string(
                py_strip(py_str(v), p[0].is_undefined() || p[0].is_none() ? nullptr : &chars, true, true));
        };
        m["upper"] = [](const Value& v, const CallArgs&) { return Value::string(py_str_upper(py_str(v))); };
        m["lower"] = [](const Value& v, const CallArgs&) { return Value::string(py_str_lower(py_str(v))); };
        m["capitalize"] = [](const Value& v, const CallArgs&) {
            return Value::string(py_str_capitalize(py_str(v)));
        };
        m["title"] = [](const Value& v, const CallArgs&) { return do_title(v); };
        m["replace"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("replace", {"old", "new", "count"});
            int64_t count = p[2].is_undefined() || p[2].is_none() ? -1 : p[2].as_int();
            return Value::string(py_replace(py_str(v), py_str(p[0]), py_str(p[1]), count));
        };
        m["list"] = [](const Value& v, const CallArgs&) { return Value::list(iterate(v)); };
        m["string"] = [](const Value& v, const CallArgs&) { return Value::string(py_str(v)); };
        m["safe"] = [](const Value& v, const CallArgs&) { return Value::markup(py_str(v)); };
        m["escape"] = [](const Value& v, const CallArgs&) {
            return v.is_markup() ? v : Value::markup(html_escape(py_str(v)));
        };
        m["e"] = m["escape"];
        m["forceescape"] = m["escape"];
        m["int"] = do_int;
        m["float"] = do_float;
        m["abs"] = [](const Value& v, const CallArgs&) {
            v.require();
            if (v.is_float()) return Value::number(std::fabs(v.as_float()));
            if (v.is_int() || v.is_bool()) {
                if (v.as_int() == INT64_MIN) fail("integer overflow");
                return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
            }
            fail(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
        };
        m["round"] = do_round;
        m["tojson"] = do_tojson;
        m["items"] = [](const Value& v, const CallArgs&) {
            if (v.is_undefined()) return Value::iter({});
            if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
            List out;
            for (const auto& [k, x] : v.dict_ref().entries) out.push_back(Value::tuple({k, x}));
            return Value::iter(std::move(out));
        };
        m["dictsort"] = do_dictsort;
        m["select"] = [](const Value& v, const CallArgs& a) {
            return select_or_reject(v, a, true, false, "select");
        };
        m["reject"] = [](const Value& v, const CallArgs& a) {
            return select_or_reject(v, a, false, false, "reject");
        };
        m["selectattr"] = [](const Value& v, const CallArgs& a) {
            return select_or_reject(v, a, true, true, "selectattr");
        };
        m["rejectattr"] = [](const Value& v, const CallArgs& a) {
            return select_or_reject(v, a, false, true, "rejectattr");
        };
        m["map"] = do_map;
        m["unique"] = do_unique;
        m["sort"] = do_sort;
        m["reverse"] = [](const Value& v, const CallArgs&) {
            if (v.is_string()) return get_slice(v, Value(), Value(), Value::integer(-1));
            if (v.kind() == Value::Kind::Iter) {
                List xs = v.items();
                std::reverse(xs.begin(), xs.end());
                return Value::list(std::move(xs));
            }
            List xs = iterate(v);
            std::reverse(xs.begin(), xs.end());
            return Value::iter(std::move(xs),
                               v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
        };
        m["sum"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("sum", {"attribute", "start"});
            Value acc = p[1].is_undefined() ? Value::integer(0) : p[1];
            for (const auto& x : iterate(v))
                acc = binary_op("+", acc, p[0].is_undefined() || p[0].is_none() ? x : attr_path(x, p[0]));
            return acc;
        };
        m["min"] = [](const Value& v, const CallArgs& a) { return do_min_max(v, a, false); };
        m["max"] = [](const Value& v, const CallArgs& a) { return do_min_max(v, a, true); };
        m["batch"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("batch", {"linecount", "fill_with"});
            int64_t n = p[0].require().as_int();
            if (n <= 0) fail("batch: linecount must be positive");
            List out, cur;
            for (const auto& x : iterate(v)) {
                cur.push_back(x);
                if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
            }
            if (!cur.empty()) {
                if (!p[1].is_undefined() && !p[1].is_none()) {
                    check_room(mul_sat(static_cast<size_t>(n), sizeof(Value)), "batch too large");
                    while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
                }
                out.push_back(Value::list(std::move(cur)));
            }
            return Value::iter(std::move(out));
        };
        m["indent"] = do_indent;
        m["wordcount"] = [](const Value& v, const CallArgs&) {
            int64_t n = 0;
            bool in_word = false;
            for (char32_t c : utf8_decode(py_str(v))) {
                bool w = py_isalnum(c) || c == '_';
                if (w && !in_word) ++n;
                in_word = w;
            }
            return Value::integer(n);
        };
        m["center"] = [](const Value& v, const CallArgs& a) {
            auto p = a.bind("center", {"width"});
            return Value::string(py_center(py_str(v), p[0].is_undefined() ? 80 : p[0].as_int()));
        };
        m["format"] = [](const Value& v, const CallArgs& a) {
            return Value::string(py_percent_format(py_str(v), a.pos));
        };
        m["attr"] = [str_arg](const Value& v, const CallArgs& a) { return get_attr(v, str_arg(a, 0, "")); };
        return m;
    }();
    return f;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args, int line) {
    (void)line;
    charge(1);  // and what the filter does: scans, copies and results are charged where they happen
    auto it = filters().find(name);
    if (it == filters().end()) fail(fmt::format("No filter named '{}'.", name));
    return it->second(input, args);
}

}  // namespace pelican::jinja
