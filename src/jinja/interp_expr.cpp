// Expression evaluation and Python's operator semantics.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "jinja/interp.h"
#include "jinja/str_util.h"
#include "jinja/utf8.h"

namespace pelican::jinja {
namespace {

std::string obj_repr(const Value& v) { return v.is_none() ? "None" : v.type_name() + " object"; }

Value missing_attr(const Value& obj, const std::string& name) {
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", obj_repr(obj), name));
}
Value missing_item(const Value& obj, const Value& key) {
    if (key.is_string()) return missing_attr(obj, key.str());
    return Value::undefined(fmt::format("'{}' has no element {}", obj_repr(obj), py_repr(key)));
}

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
    if (a.is_undefined()) a.fail_undefined();
    if (b.is_undefined()) b.fail_undefined();
    fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

// Python ints are unbounded; ours are int64 and overflow is an error.
int64_t checked_op(char op, int64_t a, int64_t b) {
    int64_t r = 0;
    bool overflow = op == '+'   ? __builtin_add_overflow(a, b, &r)
                    : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                : __builtin_mul_overflow(a, b, &r);
    if (overflow) fail("integer overflow");
    return r;
}

Value repeat(const Value& seq, int64_t n) {
    if (n <= 0)
        return seq.is_string() ? Value::string("")
                               : (seq.kind() == Value::Kind::Tuple ? Value::tuple({}) : Value::list({}));
    const size_t count = static_cast<size_t>(n);
    if (seq.is_string()) {
        const std::string& s = seq.str();
        check_room(add_sat(mul_sat(s.size(), count), kObjectBytes), "string repetition too large");
        std::string out;
        out.reserve(s.size() * count);
        for (size_t i = 0; i < count; ++i) out += s;
        return Value::string(std::move(out));
    }
    const List& xs = seq.items();
    check_room(add_sat(mul_sat(mul_sat(xs.size(), count), sizeof(Value)), kObjectBytes),
               "sequence repetition too large");
    List out;
    out.reserve(xs.size() * count);
    for (size_t i = 0; i < count; ++i) out.insert(out.end(), xs.begin(), xs.end());
    return seq.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// str(a) + str(b), sized and checked before it is built.
Value concat_text(const Value& a, const Value& b) {
    std::string ta, tb;  // str() of non-strings
    const std::string& x = a.is_string() ? a.str() : (ta = py_str(a));
    const std::string& y = b.is_string() ? b.str() : (tb = py_str(b));
    check_room(add_sat(x.size() + y.size(), kObjectBytes), "string concatenation too large");
    std::string out;
    out.reserve(x.size() + y.size());
    out += x;
    out += y;
    return Value::string(std::move(out));
}

int64_t floor_div(int64_t a, int64_t b) {
    if (b == 0) fail("integer division or modulo by zero");
    if (a == std::numeric_limits<int64_t>::min() && b == -1) fail("integer overflow");
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
    if (b == 0) fail("integer division or modulo by zero");
    if (b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") return concat_text(a, b);
    bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
    bool nums = a.is_number() && b.is_number();
    if (op == "+") {
        if (ints) return Value::integer(checked_op('+', a.as_int(), b.as_int()));
        if (nums) return Value::number(a.as_float() + b.as_float());
        if (a.is_string() && b.is_string()) {
            if (a.is_markup() || b.is_markup()) {
                std::string x = a.is_markup() ? a.str() : html_escape(a.str());
                std::string y = b.is_markup() ? b.str() : html_escape(b.str());
                check_room(add_sat(x.size() + y.size(), kObjectBytes), "string concatenation too large");
                return Value::markup(x + y);
            }
            return concat_text(a, b);
        }
        if (a.is_list() && a.kind() == b.kind()) {
            const size_t n = a.items().size() + b.items().size();
            check_room(add_sat(mul_sat(n, sizeof(Value)), kObjectBytes), "list concatenation too large");
            List out;
            out.reserve(n);
            out.insert(out.end(), a.items().begin(), a.items().end());
            out.insert(out.end(), b.items().begin(), b.items().end());
            return a.kind() == Value::Kind::Tuple ? Value::tuple(std::move(out))
                                                  : Value::list(std::move(out));
        }
        if (a.is_string() && !b.is_undefined() && !a.is_undefined())
            fail(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
        if (a.is_list() && !b.is_undefined())
            fail(fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(),
                             a.type_name()));
        type_error("+", a, b);
    }
    if (op == "-") {
        if (ints) return Value::integer(checked_op('-', a.as_int(), b.as_int()));
        if (nums) return Value::number(a.as_float() - b.as_float());
        type_error("-", a, b);
    }
    if (op == "*") {
        if (ints) return Value::integer(checked_op('*', a.as_int(), b.as_int()));
        if (nums) return Value::number(a.as_float() * b.as_float());
        if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
        if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
        type_error("*", a, b);
    }
    if (op == "/") {
        if (!nums) type_error("/", a, b);
        if (b.as_float() == 0) fail("division by zero");
        return Value::number(a.as_float() / b.as_float());
    }
    if (op == "//") {
        if (ints) return Value::integer(floor_div(a.as_int(), b.as_int()));
        if (!nums) type_error("//", a, b);
        if (b.as_float() == 0) fail("float floor division by zero");
        return Value::number(std::floor(a.as_float() / b.as_float()));
    }
    if (op == "%") {
        if (ints) return Value::integer(floor_mod(a.as_int(), b.as_int()));
        if (nums) {
            double x = a.as_float(), y = b.as_float();
            if (y == 0) fail("float modulo");
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return Value::number(m);
        }
        if (a.is_string())
            return apply_filter("format", a,
                                CallArgs{b.kind() == Value::Kind::Tuple ? b.items() : List{b}, {}}, 0);
        type_error("%", a, b);
    }
    if (op == "**") {
        if (ints && b.as_int() >= 0) {
            int64_t base = a.as_int(), e = b.as_int(), acc = 1;
            while (e > 0) {
                if (e & 1) acc = checked_op('*', acc, base);
                e >>= 1;
                if (e) base = checked_op('*', base, base);
            }
            return Value::integer(acc);
        }
        if (nums) {
            if (a.as_float() == 0 && b.as_float() < 0) fail("0.0 cannot be raised to a negative power");
            return Value::number(std::pow(a.as_float(), b.as_float()));
        }
        type_error("** or pow()", a, b);
    }
    fail("unknown operator " + op);
}

bool contains(const Value& c, const Value& item) {
    if (c.is_string()) {
        if (!item.is_string())
            fail(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
        return find_text(c.str(), item.str(), 0) != std::string::npos;
    }
    if (c.is_list() || c.kind() == Value::Kind::Iter) {
        charge(c.items().size());
        for (const auto& x : c.items())
            if (py_equal(x, item)) return true;
        return false;
    }
    if (c.is_dict()) return c.dict_ref().find(item) != nullptr;
    if (c.is_undefined()) return false;
    fail(fmt::format("argument of type '{}' is not iterable", c.type_name()));
}

size_t scan_steps(const Value& v) {
    if (v.is_string()) return v.str().size() / kBytesPerStep;
    if (v.is_list() || v.kind() == Value::Kind::Iter) return v.items().size();
    if (v.is_dict() || v.is_object()) return v.dict_ref().entries.size();
    return 0;
}

List iterate(const Value& v) {
    charge(scan_steps(v));
    if (v.is_list() || v.kind() == Value::Kind::Iter) return v.items();
    if (v.is_dict()) {
        List keys;
        for (const auto& [k, x] : v.dict_ref().entries) keys.push_back(k);
        return keys;
    }
    if (v.is_string()) {
        // One string object per character: sized before decoding.
        check_room(mul_sat(utf8_length(v.str()), sizeof(Value) + kObjectBytes),
                   "list of characters too large");
        List chars;
        for (char32_t c : utf8_decode(v.str())) {
            std::string s;
            utf8_append(s, c);
            chars.push_back(Value::string(std::move(s)));
        }
        return chars;
    }
    if (v.is_undefined()) return {};
    fail(fmt::format("'{}' object is not iterable", v.type_name()));
}

Value get_attr(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
        case Value::Kind::Undefined:
            obj.fail_undefined();
        case Value::Kind::Dict: {
            if (auto m = get_method(obj, name)) return *m;
            if (const Value* v = obj.dict_ref().find(name)) return *v;
            return missing_attr(obj, name);
        }
        case Value::Kind::Object: {
            if (const Value* v = obj.dict_ref().find(name)) return *v;
            return missing_attr(obj, name);
        }
        default:
            if (auto m = get_method(obj, name)) return *m;
            return missing_attr(obj, name);
    }
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) obj.fail_undefined();
    if (obj.is_dict()) {
        if (const Value* v = obj.dict_ref().find(key)) return *v;
    } else if (obj.is_object()) {
        if (key.is_string())
            if (const Value* v = obj.dict_ref().find(key)) return *v;
    } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
            int64_t n = static_cast<int64_t>(obj.items().size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        } else {
            std::u32string u = utf8_decode(obj.str());
            int64_t n = static_cast<int64_t>(u.size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return Value::string(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
        }
    }
    if (key.is_string() && !obj.is_object())
        if (auto m = get_method(obj, key.str())) return *m;
    return missing_item(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
    if (obj.is_undefined()) obj.fail_undefined();
    auto as_index = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_undefined() || v.is_none()) return std::nullopt;
        if (v.is_int() || v.is_bool()) return v.as_int();
        fail("slice indices must be integers or None");
    };
    int64_t step = as_index(step_v).value_or(1);
    if (step == 0) fail("slice step cannot be zero");
    charge(scan_steps(obj));
    std::u32string u;
    int64_t n;
    if (obj.is_string()) {
        u = utf8_decode(obj.str());
        n = static_cast<int64_t>(u.size());
    } else if (obj.is_list()) {
        n = static_cast<int64_t>(obj.items().size());
    } else {
        fail(fmt::format("'{}' object is not subscriptable", obj.type_name()));
    }
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t i = *v;
        if (i < 0) {
            i += n;
            if (i < 0) i = step < 0 ? -1 : 0;
        } else if (i >= n) {
            i = step < 0 ? n - 1 : n;
        }
        return i;
    };
    int64_t b = clamp(as_index(start), step < 0 ? n - 1 : 0);
    int64_t e = clamp(as_index(stop), step < 0 ? -1 : n);
    // Indices b, b + step, ... before e; a step past the int64 range ends the walk.
    auto walk = [&](auto&& visit) {
        for (int64_t i = b; step > 0 ? i < e : i > e;) {
            visit(static_cast<size_t>(i));
            if (__builtin_add_overflow(i, step, &i)) break;
        }
    };
    if (obj.is_string()) {
        std::u32string r;
        walk([&](size_t i) { r.push_back(u[i]); });
        return Value::string(utf8_encode(r));
    }
    List r;
    walk([&](size_t i) { r.push_back(obj.items()[i]); });
    return obj.kind() == Value::Kind::Tuple ? Value::tuple(std::move(r)) : Value::list(std::move(r));
}

Value call_value(const Value& fn, const CallArgs& args) {
    if (fn.is_function()) return fn.fn().call(args);
    if (fn.is_undefined()) fn.fail_undefined();
    fail(fmt::format("'{}' object is not callable", fn.type_name()));
}

Value Interp::eval(const Expr& e) {
    FrameGuard frame(*this);
    step();
    switch (e.k) {
        case Expr::K::Literal:
            return e.lit;
        case Expr::K::Name: {
            if (const Value* v = scope_->lookup(e.name)) return *v;
            return Value::undefined(fmt::format("'{}' is undefined", e.name));
        }
        case Expr::K::List:
        case Expr::K::Tuple: {
            List items;
            for (const auto& a : e.args) items.push_back(eval(*a));
            return e.k == Expr::K::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
        }
        case Expr::K::Dict: {
            Value d = Value::dict();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2)
                d.dict_ref().set(eval(*e.args[i]), eval(*e.args[i + 1]));
            return d;
        }
        case Expr::K::Unary: {
            Value v = eval(*e.a);
            v.require();
            if (v.is_int() || v.is_bool()) {
                if (e.name == "+") return Value::integer(v.as_int());
                if (v.as_int() == std::numeric_limits<int64_t>::min()) fail("integer overflow");
                return Value::integer(-v.as_int());
            }
            if (v.is_float()) return Value::number(e.name == "-" ? -v.as_float() : v.as_float());
            fail(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
        }
        case Expr::K::Binary:
            return binary_op(e.name, eval(*e.a), eval(*e.b));
        case Expr::K::And: {
            Value a = eval(*e.a);
            return a.truthy() ? eval(*e.b) : a;
        }
        case Expr::K::Or: {
            Value a = eval(*e.a);
            return a.truthy() ? a : eval(*e.b);
        }
        case Expr::K::Not:
            return Value::boolean(!eval(*e.a).truthy());
        case Expr::K::Compare:
            return eval_compare(e);
        case Expr::K::Cond:
            if (eval(*e.b).truthy()) return eval(*e.a);
            if (e.c) return eval(*e.c);
            return e.lit;  // the Undefined the parser made
        case Expr::K::Attr:
            return get_attr(eval(*e.a), e.name);
        case Expr::K::Item:
            return get_item(eval(*e.a), eval(*e.b));
        case Expr::K::Slice: {
            Value obj = eval(*e.a);
            Value parts[3];
            for (size_t i = 0; i < 3; ++i)
                if (e.args[i]) parts[i] = eval(*e.args[i]);
            return get_slice(obj, parts[0], parts[1], parts[2]);
        }
        case Expr::K::Call:
            return eval_call(e);
        case Expr::K::Filter:
            return apply_filter_expr(e, e.a ? eval(*e.a) : Value());
        case Expr::K::Test: {
            Value v = eval(*e.a);
            CallArgs args;
            for (const auto& a : e.args) args.pos.push_back(eval(*a));
            for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
            return Value::boolean(apply_test(e.name, v, args, e.line) != e.negated);
        }
    }
    fail("bad expression");
}

Value Interp::eval_compare(const Expr& e) {
    Value left = eval(*e.a);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i]);
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==")
            r = py_equal(left, right);
        else if (op == "!=")
            r = !py_equal(left, right);
        else if (op == "in")
            r = contains(right, left);
        else if (op == "notin")
            r = !contains(right, left);
        else {
            int c = py_compare(left, right, op.c_str());
            r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
    }
    return Value::boolean(true);
}

Value Interp::eval_call(const Expr& e) {
    Value fn = eval(*e.a);
    CallArgs args;
    for (const auto& a : e.args) args.pos.push_back(eval(*a));
    for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
    return call_value(fn, args);
}

Value Interp::apply_filter_expr(const Expr& e, Value input) {
    CallArgs args;
    for (const auto& a : e.args) args.pos.push_back(eval(*a));
    for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
    return apply_filter(e.name, input, args, e.line);
}

}  // namespace pelican::jinja
