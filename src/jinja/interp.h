// Tree-walking evaluator. Internal failures throw RenderError; Template::render converts them.
// Work and memory are charged to the Budget that Template::render installs (budget.h).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace pelican::jinja {

// Recursion guards, so that no template overflows the C++ stack (time and memory: budget.h).
constexpr int kMaxCallDepth = 256;  // nested macro calls
constexpr int kMaxFrames = 2000;    // nested statements + expressions at run time

struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
    const Value* lookup(const std::string& name) const {
        for (const Scope* s = this; s; s = s->parent.get()) {
            auto it = s->vars.find(name);
            if (it != s->vars.end()) return &it->second;
        }
        return nullptr;
    }
};

class Interp;
// Counts one level of evaluator recursion; throws before the C++ stack can overflow.
struct FrameGuard {
    explicit FrameGuard(Interp& in);
    ~FrameGuard();
    Interp& in;
};

class Interp {
public:
    Interp(std::optional<std::time_t> now);
    ~Interp();

    // Renders `body` with `ctx` (an object) as the template's variables.
    std::string render(const Body& body, const Value& ctx);

    Value eval(const Expr& e);
    void step() { charge(1); }
    // Keeps a namespace's attributes alive until the render ends. Namespaces are the only mutable
    // values, so chains and cycles of them can be built; holding them all and clearing them at the
    // end frees them without recursing through a chain and without leaking a cycle.
    void keep_namespace(std::shared_ptr<Dict> attrs) { namespaces_.push_back(std::move(attrs)); }

    std::optional<std::time_t> now;

private:
    enum class Flow { Normal, Break, Continue };
    Flow exec_body(const Body& body);
    Flow exec(const Stmt& s);
    void exec_for(const Stmt& s);
    void exec_set(const Stmt& s);
    void define_macro(const Stmt& s);
    std::string capture(const Body& body);
    Value eval_compare(const Expr& e);
    Value eval_call(const Expr& e);
    Value apply_filter_expr(const Expr& e, Value input);
    void write(std::string_view s);
    void write_value(const Value& v);  // str(v)

    std::shared_ptr<Scope> scope_;
    std::vector<std::weak_ptr<Scope>> macro_scopes_;  // cleared after render to break cycles
    size_t macro_scopes_compact_at_ = 64;             // drop expired entries when the list grows past
    std::vector<std::shared_ptr<Dict>> namespaces_;
    TextBuilder* out_ = nullptr;  // the output or the capture buffer being written
    int call_depth_ = 0;
    int frames_ = 0;
    friend struct FrameGuard;
};

// Attribute / item access with jinja2's sandboxed getattr/getitem rules.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Iteration as jinja2's for loop and filters see it (dict → keys, str → characters).
List iterate(const Value& v);
// Work units of looking at a value once: elements of a list / dict, kBytesPerStep-byte runs of a string.
size_t scan_steps(const Value& v);
Value call_value(const Value& fn, const CallArgs& args);

// Filters and tests (filters.cpp / tests.cpp); `interp` lets map/select call back into them.
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args, int line);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args, int line);
bool has_test(const std::string& name);
// Bound method on a built-in value, or nullopt when `obj` has no method `name`.
std::optional<Value> get_method(const Value& obj, const std::string& name);
// Globals available to every template (range, namespace, dict, raise_exception, strftime_now...).
void install_globals(Scope& scope, Interp& interp);

}  // namespace pelican::jinja
