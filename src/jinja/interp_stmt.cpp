// Statement execution: output, if/for/set/macro/filter blocks, scopes and loop controls.
//
// Scoping follows jinja2: every for-loop iteration and every macro call gets a fresh child
// scope (assignments there never leak out; namespace() objects are how templates carry state);
// if-blocks do not open a scope. Macros see their defining scope live (values at call time).
#include <fmt/format.h>

#include "jinja/interp.h"

namespace pelican::jinja {
namespace {

Value apply_chain(Interp& in, const Expr& chain, Value input);

struct ScopeGuard {
    std::shared_ptr<Scope>& slot;
    std::shared_ptr<Scope> saved;
    ScopeGuard(std::shared_ptr<Scope>& s, std::shared_ptr<Scope> next) : slot(s), saved(s) {
        slot = std::move(next);
    }
    ~ScopeGuard() { slot = saved; }
};

std::shared_ptr<Scope> child_of(const std::shared_ptr<Scope>& parent) {
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    return s;
}

}  // namespace

Interp::Interp(std::optional<std::time_t> t) : now(t) {}

Interp::~Interp() {
    for (auto& w : macro_scopes_)
        if (auto s = w.lock()) s->vars.clear();
}

FrameGuard::FrameGuard(Interp& i) : in(i) {
    if (++in.frames_ > kMaxFrames) {
        --in.frames_;
        fail("template nested too deeply at run time (recursion limit)");
    }
}
FrameGuard::~FrameGuard() { --in.frames_; }

void Interp::step() {
    if (++steps_ > kMaxSteps) fail("template ran too long (step limit reached)");
}

void Interp::write(const std::string& s) {
    if (out_->size() + s.size() > kMaxOutputBytes) fail("template output too large");
    *out_ += s;
}

std::string Interp::render(const Body& body, const Value& ctx) {
    auto globals = std::make_shared<Scope>();
    install_globals(*globals, *this);
    auto context = child_of(globals);
    if (ctx.is_dict())
        for (const auto& [k, v] : ctx.dict_ref().entries)
            if (k.is_string()) context->vars[k.str()] = v;
    scope_ = child_of(context);
    macro_scopes_.push_back(scope_);
    std::string out;
    out_ = &out;
    exec_body(body);
    out_ = nullptr;
    return out;
}

std::string Interp::capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
        exec_body(body);
    } catch (...) {
        out_ = saved;
        throw;
    }
    out_ = saved;
    return buf;
}

Interp::Flow Interp::exec_body(const Body& body) {
    for (const auto& s : body) {
        Flow f = exec(*s);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interp::Flow Interp::exec(const Stmt& s) {
    FrameGuard frame(*this);
    step();
    try {
        switch (s.k) {
            case Stmt::K::Text:
                write(s.text);
                break;
            case Stmt::K::Print:
                write(py_str(eval(*s.expr)));
                break;
            case Stmt::K::If:
                for (const auto& [cond, body] : s.branches)
                    if (eval(*cond).truthy()) return exec_body(body);
                return exec_body(s.else_body);
            case Stmt::K::For:
                exec_for(s);
                break;
            case Stmt::K::Set:
                exec_set(s);
                break;
            case Stmt::K::SetBlock: {
                Value v = Value::string(capture(s.body));
                if (s.expr) v = apply_chain(*this, *s.expr, std::move(v));
                scope_->vars[s.targets[0]] = std::move(v);
                break;
            }
            case Stmt::K::Macro:
                define_macro(s);
                break;
            case Stmt::K::FilterBlock:
                write(py_str(apply_chain(*this, *s.expr, Value::string(capture(s.body)))));
                break;
            case Stmt::K::Break:
                return Flow::Break;
            case Stmt::K::Continue:
                return Flow::Continue;
            case Stmt::K::Scope:
                return exec_body(s.body);
        }
    } catch (RenderError& e) {
        if (!e.raised && e.message.rfind("template line ", 0) != 0)
            e.message = fmt::format("template line {}: {}", s.line, e.message);
        throw;
    }
    return Flow::Normal;
}

void Interp::exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    if (!s.attr.empty()) {
        const Value* ns = scope_->lookup(s.targets[0]);
        if (!ns || !ns->is_object() || ns->str() != "Namespace")
            fail("cannot assign attribute on non-namespace object");
        ns->dict_ref().set(Value::string(s.attr), std::move(v));
        return;
    }
    if (s.targets.size() == 1) {
        scope_->vars[s.targets[0]] = std::move(v);
        return;
    }
    List items = iterate(v);
    if (items.size() != s.targets.size())
        fail(fmt::format("cannot unpack {} values into {} names", items.size(), s.targets.size()));
    for (size_t i = 0; i < items.size(); ++i) scope_->vars[s.targets[i]] = items[i];
}

void Interp::exec_for(const Stmt& s) {
    Value seq = eval(*s.expr);
    List items = iterate(seq);
    auto bind = [&](Scope& sc, const Value& item) {
        if (s.targets.size() == 1) {
            sc.vars[s.targets[0]] = item;
            return;
        }
        List parts = iterate(item);
        if (parts.size() != s.targets.size())
            fail(fmt::format("cannot unpack {} values into {} names", parts.size(), s.targets.size()));
        for (size_t i = 0; i < parts.size(); ++i) sc.vars[s.targets[i]] = parts[i];
    };
    if (s.cond) {  // `for x in xs if cond`: filter first, loop.length counts the kept items
        List kept;
        for (const auto& item : items) {
            step();
            ScopeGuard g(scope_, child_of(scope_));
            bind(*scope_, item);
            if (eval(*s.cond).truthy()) kept.push_back(item);
        }
        items = std::move(kept);
    }
    const Value* outer_loop = scope_->lookup("loop");
    Value parent_loop = outer_loop ? *outer_loop : Value();
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
        step();
        ScopeGuard g(scope_, child_of(scope_));
        auto attrs = std::make_shared<Dict>();
        auto set = [&](const char* k, Value v) {
            attrs->entries.emplace_back(Value::string(k), std::move(v));
        };
        set("index", Value::integer(i + 1));
        set("index0", Value::integer(i));
        set("revindex", Value::integer(n - i));
        set("revindex0", Value::integer(n - i - 1));
        set("first", Value::boolean(i == 0));
        set("last", Value::boolean(i == n - 1));
        set("length", Value::integer(n));
        set("depth", Value::integer(1));
        set("depth0", Value::integer(0));
        set("previtem",
            i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
        set("nextitem",
            i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
        auto cyc = std::make_shared<Callable>();
        cyc->name = "cycle";
        cyc->call = [i](const CallArgs& a) -> Value {
            if (a.pos.empty()) fail("no items for cycling given");
            return a.pos[static_cast<size_t>(i) % a.pos.size()];
        };
        set("cycle", Value::function(cyc));
        scope_->vars["loop"] = Value::object("LoopContext", attrs);
        bind(*scope_, items[static_cast<size_t>(i)]);
        Flow f = exec_body(s.body);
        if (f == Flow::Break) break;
    }
    (void)parent_loop;
    if (n == 0) exec_body(s.else_body);
}

void Interp::define_macro(const Stmt& s) {
    auto fn = std::make_shared<Callable>();
    fn->name = s.name;
    std::shared_ptr<Scope> defining = scope_;
    macro_scopes_.push_back(defining);
    const Stmt* def = &s;
    fn->call = [this, def, defining](const CallArgs& args) -> Value {
        if (++call_depth_ > kMaxCallDepth) {
            --call_depth_;
            fail("maximum macro recursion depth exceeded");
        }
        step();
        struct DepthDec {
            int& d;
            ~DepthDec() { --d; }
        } dec{call_depth_};
        auto sc = child_of(defining);
        const auto& params = def->params;
        if (args.pos.size() > params.size())
            fail(fmt::format("macro '{}' takes not more than {} argument(s)", def->name, params.size()));
        std::vector<bool> given(params.size(), false);
        for (size_t i = 0; i < args.pos.size(); ++i) {
            sc->vars[params[i].first] = args.pos[i];
            given[i] = true;
        }
        for (const auto& [k, v] : args.kw) {
            size_t i = 0;
            while (i < params.size() && params[i].first != k) ++i;
            if (i == params.size())
                fail(fmt::format("macro '{}' takes no keyword argument '{}'", def->name, k));
            sc->vars[k] = v;
            given[i] = true;
        }
        ScopeGuard g(scope_, sc);
        for (size_t i = 0; i < params.size(); ++i) {
            if (given[i]) continue;
            sc->vars[params[i].first] =
                params[i].second
                    ? eval(*params[i].second)
                    : Value::undefined(fmt::format("parameter '{}' was not provided", params[i].first));
        }
        return Value::string(capture(def->body));
    };
    scope_->vars[s.name] = Value::function(fn);
}

namespace {
Value apply_chain(Interp& in, const Expr& chain, Value input) {
    if (chain.a) input = apply_chain(in, *chain.a, std::move(input));
    CallArgs args;
    for (const auto& a : chain.args) args.pos.push_back(in.eval(*a));
    for (const auto& [k, a] : chain.kwargs) args.kw.emplace_back(k, in.eval(*a));
    return apply_filter(chain.name, input, args, chain.line);
}
}  // namespace

}  // namespace pelican::jinja
