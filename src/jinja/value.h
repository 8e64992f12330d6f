// The Jinja value model: Python's objects as the templates see them. Strings, lists, dicts and
// objects are shared by reference, so copying a Value is O(1) (strings and lists are immutable, as
// the sandbox makes them; namespace attribute assignment mutates shared objects as in Python); dicts
// keep insertion order. Undefined carries the message it raises when used (jinja2's Undefined).
// Strings, lists and dicts made during a render hold their bytes against its budget (budget.h), and
// containers record their nesting depth, capped at kMaxValueDepth so that printing, comparing and
// destroying a value cannot overflow the C++ stack.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "jinja/budget.h"

namespace pelican::jinja {

inline constexpr uint32_t kMaxValueDepth = 512;  // nesting levels of lists / dicts (a list of ints: 1)

// Internal render failure; converted to pelican::Error at the Template boundary.
struct RenderError {
    std::string message;
    bool raised = false;  // from raise_exception(): message is the template's text, verbatim
};
[[noreturn]] void fail(std::string message);

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;
struct StrBox;
struct ListBox;

class Value {
public:
    // Iter: a one-shot Python iterator/generator (what map/select/items return): iterable, always
    // truthy, but no len(), no indexing and not JSON serialisable.
    enum class Kind : uint8_t {
        Undefined,
        None,
        Bool,
        Int,
        Float,
        String,
        List,
        Tuple,
        Dict,
        Object,
        Function,
        Iter
    };

    Value() = default;  // Undefined
    static Value undefined(std::string why = {}) {
        Value v;
        v.set_text(std::move(why));
        return v;
    }
    static Value none() { return make(Kind::None); }
    static Value boolean(bool b) {
        Value v = make(Kind::Bool);
        v.i_ = b;
        return v;
    }
    static Value integer(int64_t i) {
        Value v = make(Kind::Int);
        v.i_ = i;
        return v;
    }
    static Value number(double f) {
        Value v = make(Kind::Float);
        v.f_ = f;
        return v;
    }
    static Value string(std::string s) {
        Value v = make(Kind::String);
        v.set_text(std::move(s));
        return v;
    }
    // markupsafe.Markup (from |safe / |escape): `+` with a plain str HTML-escapes the str.
    static Value markup(std::string s) {
        Value v = string(std::move(s));
        v.markup_ = true;
        return v;
    }
    bool is_markup() const { return markup_; }
    static Value list(List items = {});
    static Value tuple(List items);
    static Value dict(std::shared_ptr<Dict> d);
    static Value dict();
    // Attribute-only object (namespace, loop): `type_name` is used in repr and errors.
    static Value object(std::string type_name, std::shared_ptr<Dict> attrs);
    static Value function(std::shared_ptr<Callable> fn);
    static Value iter(List items, std::string type_name = "generator");

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_float() const { return kind_ == Kind::Float; }
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_list() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
    bool is_dict() const { return kind_ == Kind::Dict; }
    bool is_object() const { return kind_ == Kind::Object; }
    bool is_function() const { return kind_ == Kind::Function; }

    // Overwrites this with an Int or Bool, in place when it holds no payload (loop counters).
    void set_scalar(Kind k, int64_t i) {
        if (str_ || list_ || dict_ || fn_) *this = Value();
        kind_ = k;
        markup_ = false;
        i_ = i;
    }

    bool as_bool() const { return i_ != 0; }
    int64_t as_int() const { return i_; }  // also valid for Bool
    double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
    const std::string& str() const;  // String text, Undefined message, Object type name
    const List& items() const;       // List, Tuple, Iter
    // Nesting levels: 0 for scalars, 1 + the deepest element for lists and dicts.
    uint32_t depth() const;
    Dict& dict_ref() const { return *dict_; }
    const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
    const Callable& fn() const { return *fn_; }

    bool truthy() const;
    // Raises the Undefined's error (jinja2's UndefinedError / SecurityError).
    [[noreturn]] void fail_undefined() const;
    // Raises if Undefined, else returns *this: for operations that use the value further.
    const Value& require() const {
        if (kind_ == Kind::Undefined) fail_undefined();
        return *this;
    }

    // Objects become dicts with the JSON object's key order.
    static Value from_json(const nlohmann::ordered_json& j);
    std::string type_name() const;  // Python type name: 'str', 'int', 'dict object' style below

private:
    static Value make(Kind k) {
        Value v;
        v.kind_ = k;
        return v;
    }
    void set_text(std::string s);
    static Value make_list(Kind k, List items);
    Kind kind_ = Kind::Undefined;
    bool markup_ = false;
    int64_t i_ = 0;
    double f_ = 0;
    std::shared_ptr<const StrBox> str_;  // null: ""
    std::shared_ptr<const ListBox> list_;
    std::shared_ptr<Dict> dict_;
    std::shared_ptr<Callable> fn_;
};

// Shared payloads. Constructing one holds its bytes against the current render's budget.
struct StrBox {
    explicit StrBox(std::string s);
    std::string text;
    Held held;
};
struct ListBox {
    explicit ListBox(List xs);  // fails past kMaxValueDepth
    List items;
    uint32_t depth = 1;
    Held held;
};

const std::string& empty_text();
inline const std::string& Value::str() const { return str_ ? str_->text : empty_text(); }
inline const List& Value::items() const { return list_->items; }

// Insertion-ordered mapping; lookups are linear (template dicts are small) and charged a step per
// entry compared. Fill through set(), or fill `entries` directly and call sync().
struct Dict {
    std::vector<std::pair<Value, Value>> entries;
    uint32_t depth = 1;  // as Value::depth(); a namespace's may lag behind later mutation of its members
    Held held;           // bytes of `entries`
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(const Value& key, Value v);
    void sync();  // accounts entries filled directly: depth (checked) and bytes
};

inline uint32_t Value::depth() const { return list_ ? list_->depth : (dict_ ? dict_->depth : 0); }

struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    // Binds Python-style parameters: returns one Value per name (Undefined when not given).
    // Errors on unknown keywords or too many positionals, naming `fn_name`.
    std::vector<Value> bind(const char* fn_name, std::initializer_list<const char*> names) const;
};

struct Callable {
    std::string name;
    std::function<Value(const CallArgs&)> call;
};

// Python semantics.
bool py_equal(const Value& a, const Value& b);
// <0, 0, >0; raises a TypeError-style error naming `op` when the types do not order.
int py_compare(const Value& a, const Value& b, const char* op = "<");
std::string py_str(const Value& v);   // str()
std::string py_repr(const Value& v);  // repr()
std::string py_float_repr(double d);
std::string py_string_repr(const std::string& s);
std::string html_escape(const std::string& s);  // markupsafe.escape

}  // namespace pelican::jinja
