// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, ...).
#include <cmath>
#include <functional>
#include <unordered_map>

#include <fmt/format.h>

#include "jinja/interp.h"
#include "jinja/utf8.h"

namespace pelican::jinja {
namespace {

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const Value& arg0(const CallArgs& a, const char* test) {
    if (a.pos.empty()) fail(fmt::format("test '{}' needs an argument", test));
    return a.pos[0];
}

bool all_cased(const std::string& s, bool upper) {
    bool any = false;
    for (char32_t c : utf8_decode(s)) {
        if (upper ? py_islower(c) : py_isupper(c)) return false;
        if (py_islower(c) || py_isupper(c)) any = true;
    }
    return any;
}

const std::unordered_map<std::string, TestFn>& tests() {
    static const std::unordered_map<std::string, TestFn> t = [] {
        std::unordered_map<std::string, TestFn> m;
        using K = Value::Kind;
        m["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
        m["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
        m["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
        m["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
        m["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
        m["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
        m["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
        m["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
        m["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };
        m["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
        m["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict(); };
        m["callable"] = [](const Value& v, const CallArgs&) { return v.is_function(); };
        // Python: iter() works. Undefined iterates as empty.
        m["iterable"] = [](const Value& v, const CallArgs&) {
            return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined() || v.kind() == K::Iter;
        };
        // Python: len() and __getitem__ exist.
        m["sequence"] = [](const Value& v, const CallArgs&) {
            return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
        };
        m["escaped"] = [](const Value&, const CallArgs&) { return false; };
        m["lower"] = [](const Value& v, const CallArgs&) { return all_cased(py_str(v), false); };
        m["upper"] = [](const Value& v, const CallArgs&) { return all_cased(py_str(v), true); };
        m["odd"] = [](const Value& v, const CallArgs&) {
            if (!v.is_int() && !v.is_bool()) v.require(), fail("odd test needs an integer");
            return v.as_int() % 2 != 0;
        };
        m["even"] = [](const Value& v, const CallArgs&) {
            if (!v.is_int() && !v.is_bool()) v.require(), fail("even test needs an integer");
            return v.as_int() % 2 == 0;
        };
        m["divisibleby"] = [](const Value& v, const CallArgs& a) {
            Value m = binary_op("%", v, arg0(a, "divisibleby"));
            return py_equal(m, Value::integer(0));
        };
        m["sameas"] = [](const Value& v, const CallArgs& a) {
            const Value& o = arg0(a, "sameas");
            if (v.is_none() || v.is_bool() || v.is_undefined()) return v.kind() == o.kind() && py_equal(v, o);
            return v.kind() == o.kind() && py_equal(v, o);
        };
        m["in"] = [](const Value& v, const CallArgs& a) { return contains(arg0(a, "in"), v); };
        TestFn eq = [](const Value& v, const CallArgs& a) { return py_equal(v, arg0(a, "eq")); };
        TestFn ne = [](const Value& v, const CallArgs& a) { return !py_equal(v, arg0(a, "ne")); };
        TestFn lt = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "lt"), "<") < 0; };
        TestFn le = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "le"), "<=") <= 0; };
        TestFn gt = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "gt"), ">") > 0; };
        TestFn ge = [](const Value& v, const CallArgs& a) { return py_compare(v, arg0(a, "ge"), ">=") >= 0; };
        for (const char* n : {"eq", "equalto", "=="}) m[n] = eq;
        for (const char* n : {"ne", "!="}) m[n] = ne;
        for (const char* n : {"lt", "lessthan", "<"}) m[n] = lt;
        for (const char* n : {"le", "<="}) m[n] = le;
        for (const char* n : {"gt", "greaterthan", ">"}) m[n] = gt;
        for (const char* n : {"ge", ">="}) m[n] = ge;
        return m;
    }();
    return t;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(const std::string& name, const Value& input, const CallArgs& args, int line) {
    charge(1);
    auto it = tests().find(name);
    if (it == tests().end()) {
        if (name == "filter" || name == "test") {
            const Value& n = arg0(args, name.c_str());
            if (name == "test") return n.is_string() && has_test(n.str());
            if (!n.is_string()) return false;
            try {
                apply_filter(n.str(), Value::string(""), CallArgs{}, line);
            } catch (const RenderError& e) {
                return e.message.rfind("No filter named", 0) != 0;
            }
            return true;
        }
        fail(fmt::format("No test named '{}'.", name));
    }
    return it->second(input, args);
}

}  // namespace pelican::jinja
