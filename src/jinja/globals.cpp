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
    if (count > static_cast<__int128>(kMaxSequence)) fail("range too big");
    List out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.push_back(Value::integer(start + k * step));
    return Value::list(std::move(out));
}

std::shared_ptr<Dict> dict_from_args(const CallArgs& a, const char* fn) {
    auto d = std::make_shared<Dict>();
    if (a.pos.size() > 1) fail(fmt::format("{} expected at most 1 positional argument", fn));
    if (!a.pos.empty()) {
        const Value& src = a.pos[0];
        if (src.is_dict()) {
            d->entries = src.dict_ref().entries;
        } else {
            for (const auto& pair : iterate(src)) {
                List kv = iterate(pair);
                if (kv.size() != 2) fail(fmt::format("{}: sequence element has wrong length", fn));
                d->set(kv[0], kv[1]);
            }
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
    scope.vars["namespace"] = make_fn("namespace", [](const CallArgs& a) {
        return Value::object("Namespace", dict_from_args(a, "namespace"));
    });
    scope.vars["raise_exception"] = make_fn("raise_exception", [](const CallArgs& a) -> Value {
        std::string msg = a.pos.empty() ? "" : py_str(a.pos[0]);
        throw RenderError{std::move(msg), true};
    });
    Interp* in = &interp;
    scope.vars["strftime_now"] = make_fn("strftime_now", [in](const CallArgs& a) {
        if (a.pos.empty() || !a.pos[0].is_string()) fail("strftime_now() needs a format string");
        std::time_t t = in->now ? *in->now : std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        const std::string& f = a.pos[0].str();
        if (f.empty()) return Value::string("");
        std::string buf(f.size() * 16 + 64, '\0');
        size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
        if (n == 0) fail("strftime_now: formatted time too long");
        buf.resize(n);
        return Value::string(std::move(buf));
    });
}

}  // namespace pelican::jinja
