// The Jinja value model: Python's objects as the templates see them. Lists, dicts and objects
// are shared by reference (Python semantics for namespace attribute assignment); dicts keep
// insertion order. Undefined carries the message it raises when used (jinja2's Undefined).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pelican::jinja {

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
        v.str_ = std::move(why);
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
        v.str_ = std::move(s);
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

    bool as_bool() const { return i_ != 0; }
    int64_t as_int() const { return i_; }  // also valid for Bool
    double as_float() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
    const std::string& str() const { return str_; }  // String text, Undefined message, Object type name
    const List& items() const { return *list_; }     // List, Tuple, Iter
    List& items_mut() { return *list_; }
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
    Kind kind_ = Kind::Undefined;
    bool markup_ = false;
    int64_t i_ = 0;
    double f_ = 0;
    std::string str_;
    std::shared_ptr<List> list_;
    std::shared_ptr<Dict> dict_;
    std::shared_ptr<Callable> fn_;
};

// Insertion-ordered mapping; lookups are linear (template dicts are small).
struct Dict {
    std::vector<std::pair<Value, Value>> entries;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(const Value& key, Value v);
};

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
