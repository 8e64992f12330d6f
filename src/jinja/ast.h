// Template syntax tree. One generic node type per layer keeps the parser and evaluator short;
// the comments say which fields each kind uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace pelican::jinja {

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
    enum class K {
        Literal,  // lit
        Name,     // name
        List,     // args = items
        Tuple,    // args = items
        Dict,     // args = k0, v0, k1, v1, ...
        Unary,    // name = "-" | "+", a
        Binary,   // name = op (+ - * / // % ** ~), a, b
        And,      // a, b
        Or,       // a, b
        Not,      // a
        Compare,  // a, ops[i] applied to args[i] (chained)
        Cond,     // a if b else c (c null: lit = the Undefined it gives)
        Attr,     // a.name
        Item,     // a[b]
        Slice,    // a[args0:args1:args2], null parts omitted
        Call,     // a(args, kwargs)
        Filter,   // a | name(args, kwargs); a null inside filter blocks
        Test,     // a is [not] name(args)
    };
    K k;
    int line = 0;
    Value lit;
    std::string name;
    std::vector<std::string> ops;
    std::vector<ExprP> args;
    std::vector<std::pair<std::string, ExprP>> kwargs;
    ExprP a, b, c;
    bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
    enum class K {
        Text,         // text
        Print,        // expr
        If,           // branches (cond, body); else_body
        For,          // targets (several = unpack), expr = iterable, cond = filter, body, else_body
        Set,          // targets (several = unpack) or targets[0].attr when attr nonempty; expr
        SetBlock,     // targets[0]; body; expr = optional filter chain (Filter with a == null)
        Macro,        // name; params (name, default or null); body
        FilterBlock,  // expr = filter chain; body
        Break,
        Continue,
        Scope,  // body rendered in place ({% generation %})
    };
    K k;
    int line = 0;
    std::string text;
    ExprP expr, cond;
    std::vector<std::string> targets;
    std::string attr;
    std::vector<std::pair<ExprP, Body>> branches;
    Body body, else_body;
    std::string name;
    std::vector<std::pair<std::string, ExprP>> params;
    bool uses_loop = true;  // For: the body or filter mentions `loop` (else no loop object is made)
};

// Parses a token stream into a body. Throws RenderError("template line N: ...").
Body parse_template(std::string_view source);

}  // namespace pelican::jinja
