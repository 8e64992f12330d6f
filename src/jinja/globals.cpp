// Global functions: jinja2's range/dict/namespace plus HF's raise_exception and strftime_now.
#include <ctime>

#include <fmt/format.h>

#include "jinja/interp.h"

namespace pelican::jinja {
namespace {

Value make_fn(std::string name, std::function<Value(const CallArgs&)> f) {
    auto c = std::make_shared<Callable>();
    c->name = std::move(name);
    c->call = std::move(f);
    return Value::function(std::move(c));
}

int64_t int_arg(const Value& v, const char* fn) {
    if (!v.is_int() && !v.is_bool()) {
        v.require();
        fail(fmt::format("'{}' object cannot be interpreted as an integer ({})", v.type_name(), fn));
    }
    return v.as_int();
}

Value do_range(const CallArgs& a) {
    if (!a.kw.empty()) fail("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) fail("range expected 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
        stop = int_arg(a.pos[0], "range");
    } else {
        start = int_arg(a.pos[0], "range");
        stop = int_arg(a.pos[1], "range");
        if (a.pos.size() == 3) step = int_arg(a.pos[2], "range");
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    // Element count computed up front (in 128-bit to avoid overflow) so nothing is allocated for huge ranges.
    __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    __int128 mag = step > 0 ? step : -static_cast<__int128>(step);
    __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
    const __int128 bytes = count * static_cast<__int128>(sizeof(Value)) + kObjectBytes;  // < 2^64 * 2^7
    const size_t need = bytes > static_cast<__int128>(SIZE_MAX) ? SIZE_MAX : static_cast<size_t>(bytes);
    if (const Budget* b = Budget::current(); b && need > b->max_bytes() - b->held())
        b->check_room(need, fmt::format("range too big (range() of {} items)", static_cast<uint64_t>(count)));
    List out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.push_back(Value::integer(start + k * step));
    return Value::list(std::move(out));
}

std::shared_ptr<Dict> dict_from_args(const CallArgs& a, const char* fn) {
    if (a.pos.size() > 1) fail(fmt::format("{} expected at most 1 positional argument", fn));
    const bool copy = !a.pos.empty() && a.pos[0].is_dict();
    auto d = copy ? std::make_shared<Dict>(a.pos[0].dict_ref()) : std::make_shared<Dict>();
    if (!a.pos.empty() && !copy) {
        for (const auto& pair : iterate(a.pos[0])) {
            List kv = iterate(pair);
            if (kv.size() != 2) fail(fmt::format("{}: sequence element has wrong length", fn));
            d->set(kv[0], kv[1]);
        }
    }
    for (const auto& [k, v] : a.kw) d->set(Value::string(k), v);
    return d;
}

}  // namespace

void install_globals(Scope& scope, Interp& interp) {
    scope.vars["range"] = make_fn("range", do_range);
    scope.vars["dict"] =
        make_fn("dict", [](const CallArgs& a) { return Value::dict(dict_from_args(a, "dict")); });
    Interp* in = &interp;
    scope.vars["namespace"] = make_fn("namespace", [in](const CallArgs& a) {
        std::shared_ptr<Dict> attrs = dict_from_args(a, "namespace");
        in->keep_namespace(attrs);
        return Value::object("Namespace", std::move(attrs));
    });
    scope.vars["raise_exception"] = make_fn("raise_exception", [](const CallArgs& a) -> Value {
        std::string msg = a.pos.empty() ? "" : py_str(a.pos[0]);
        throw RenderError{std::move(msg), true};
    });
    scope.vars["strftime_now"] = make_fn("strftime_now", [in](const CallArgs& a) {
        if (a.pos.empty() || !a.pos[0].is_string()) fail("strftime_now() needs a format string");
        std::time_t t = in->now ? *in->now : std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        const std::string& f = a.pos[0].str();
        if (f.empty()) return Value::string("");
        const size_t cap = add_sat(mul_sat(f.size(), 16), 64);
        check_room(cap, "strftime_now result too large");
        std::string buf(cap, '\0');
        size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
        if (n == 0) fail("strftime_now: formatted time too long");
        buf.resize(n);
        return Value::string(std::move(buf));
    });
}

}  // namespace pelican::jinja
