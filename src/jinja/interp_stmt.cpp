// Statement execution: output, if/for/set/macro/filter blocks, scopes and loop controls.
//
// Scoping follows jinja2: every for-loop iteration and every macro call gets a fresh child
// scope (assignments there never leak out; namespace() objects are how templates carry state);
// if-blocks do not open a scope. Macros see their defining scope live (values at call time).
#include <algorithm>
#include <optional>

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
    // Every namespace is still held here, so clearing one frees no other: no recursion, no cycle.
    for (auto& d : namespaces_) d->entries.clear();
    namespaces_.clear();
}

FrameGuard::FrameGuard(Interp& i) : in(i) {
    if (++in.frames_ > kMaxFrames) {
        --in.frames_;
        fail(fmt::format("template nested too deeply at run time (recursion limit: {} levels)", kMaxFrames));
    }
}
FrameGuard::~FrameGuard() { --in.frames_; }

void Interp::write(std::string_view s) { out_->append(s); }

void Interp::write_value(const Value& v) {
    if (v.is_string())
        write(v.str());
    else
        write(py_str(v));
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
    TextBuilder out("template output too large");
    out_ = &out;
    exec_body(body);
    out_ = nullptr;
    return out.take();
}

std::string Interp::capture(const Body& body) {
    TextBuilder buf("template output too large");  // a macro's or set block's output
    TextBuilder* saved = out_;
    out_ = &buf;
    try {
        exec_body(body);
    } catch (...) {
        out_ = saved;
        throw;
    }
    out_ = saved;
    return buf.take();
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
                write_value(eval(*s.expr));
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
                write_value(apply_chain(*this, *s.expr, Value::string(capture(s.body))));
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

namespace {

// jinja2's LoopContext: one object per loop, updated as the loop advances (as jinja2's is).
struct LoopObject {
    enum Field { Index, Index0, Revindex, Revindex0, First, Last, Length, Depth, Depth0, Prev, Next, Cycle };
    std::shared_ptr<Dict> attrs = std::make_shared<Dict>();
    std::shared_ptr<int64_t> index0 = std::make_shared<int64_t>(0);  // read by loop.cycle()
    Value object;

    LoopObject(int64_t n, uint32_t items_depth) {
        for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                              "depth0", "previtem", "nextitem", "cycle"})
            attrs->entries.emplace_back(Value::string(k), Value());
        attrs->entries[Length].second = Value::integer(n);
        attrs->entries[Depth].second = Value::integer(1);
        attrs->entries[Depth0].second = Value::integer(0);
        auto cyc = std::make_shared<Callable>();
        cyc->name = "cycle";
        cyc->call = [i = index0](const CallArgs& a) -> Value {
            if (a.pos.empty()) fail("no items for cycling given");
            return a.pos[static_cast<size_t>(*i) % a.pos.size()];
        };
        attrs->entries[Cycle].second = Value::function(cyc);
        attrs->sync();
        attrs->depth = std::max(attrs->depth, items_depth);  // previtem / nextitem: items of a list that deep
        object = Value::object("LoopContext", attrs);
    }

    void advance(const List& items, int64_t i) {
        const int64_t n = static_cast<int64_t>(items.size());
        auto& e = attrs->entries;
        using K = Value::Kind;
        *index0 = i;
        e[Index].second.set_scalar(K::Int, i + 1);
        e[Index0].second.set_scalar(K::Int, i);
        e[Revindex].second.set_scalar(K::Int, n - i);
        e[Revindex0].second.set_scalar(K::Int, n - i - 1);
        e[First].second.set_scalar(K::Bool, i == 0);
        e[Last].second.set_scalar(K::Bool, i == n - 1);
        e[Prev].second =
            i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
        e[Next].second =
            i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
    }
};

}  // namespace

void Interp::exec_for(const Stmt& s) {
    Value seq = eval(*s.expr);
    // Lists, tuples and iterators are walked in place (they are immutable); others become a list.
    if (!seq.is_list() && seq.kind() != Value::Kind::Iter) seq = Value::list(iterate(seq));
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
    // Every iteration runs in a fresh scope (its assignments do not leak into the next one). The
    // scope object is reused while nothing else holds it (a macro defined in the body does), emptied
    // of anything but the loop's own names, which are overwritten.
    std::shared_ptr<Scope> iter_scope;
    const size_t own_names = s.targets.size() + (s.uses_loop ? 1 : 0);
    auto fresh_scope = [&]() {
        if (iter_scope && iter_scope.use_count() == 1) {
            if (iter_scope->vars.size() > own_names) iter_scope->vars.clear();
        } else {
            iter_scope = child_of(scope_);
        }
        return iter_scope;
    };
    if (s.cond) {  // `for x in xs if cond`: filter first, loop.length counts the kept items
        List kept;
        for (const auto& item : seq.items()) {
            step();
            ScopeGuard g(scope_, fresh_scope());
            bind(*scope_, item);
            if (eval(*s.cond).truthy()) kept.push_back(item);
        }
        seq = Value::list(std::move(kept));
    }
    const List& items = seq.items();
    const int64_t n = static_cast<int64_t>(items.size());
    std::optional<LoopObject> loop;
    if (s.uses_loop) loop.emplace(n, seq.depth());
    for (int64_t i = 0; i < n; ++i) {
        step();
        ScopeGuard g(scope_, fresh_scope());
        if (loop) {
            loop->advance(items, i);
            scope_->vars["loop"] = loop->object;
        }
        bind(*scope_, items[static_cast<size_t>(i)]);
        Flow f = exec_body(s.body);
        if (f == Flow::Break) break;
    }
    if (n == 0) exec_body(s.else_body);
}

void Interp::define_macro(const Stmt& s) {
    auto fn = std::make_shared<Callable>();
    fn->name = s.name;
    std::shared_ptr<Scope> defining = scope_;
    if (macro_scopes_.size() >= macro_scopes_compact_at_) {  // a macro defined in a long loop
        std::erase_if(macro_scopes_, [](const std::weak_ptr<Scope>& w) { return w.expired(); });
        macro_scopes_compact_at_ = std::max<size_t>(64, 2 * macro_scopes_.size());
    }
    macro_scopes_.push_back(defining);
    const Stmt* def = &s;
    fn->call = [this, def, defining](const CallArgs& args) -> Value {
        if (++call_depth_ > kMaxCallDepth) {
            --call_depth_;
            fail(fmt::format("maximum macro recursion depth exceeded (macro calls nested {} deep)",
                             kMaxCallDepth));
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
