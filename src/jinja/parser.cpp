// Recursive-descent parser following jinja2's grammar and operator precedence:
// condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary < postfix/filter/test.
#include <fmt/format.h>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace pelican::jinja {
namespace {

constexpr int kMaxNesting = 200;  // expression / block nesting depth

class Parser {
public:
    explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

    Body parse_all() {
        Body body = parse_body({});
        if (cur().type != Tok::Eof) fail_here("unexpected end tag");
        return body;
    }

private:
    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
    void next() {
        if (i_ + 1 < t_.size()) ++i_;
    }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    std::string describe(const Token& t) const {
        switch (t.type) {
            case Tok::Name:
            case Tok::Op:
                return "'" + t.text + "'";
            case Tok::String:
                return "string";
            case Tok::Int:
            case Tok::Float:
                return "number";
            default:
                return tok_name(t.type);
        }
    }
    [[noreturn]] void fail_at(int line, const std::string& what) {
        throw RenderError{fmt::format("template line {}: {}", line, what), false};
    }
    [[noreturn]] void fail_here(const std::string& expected) {
        fail_at(cur().line, fmt::format("unexpected {} (expected {})", describe(cur()), expected));
    }
    void expect_op(const char* op) {
        if (!is_op(op)) fail_here(fmt::format("'{}'", op));
        next();
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) fail_here("a name");
        std::string n = cur().text;
        next();
        return n;
    }
    void expect_block_end() {
        if (cur().type != Tok::BlockEnd) fail_here("end of statement block");
        next();
    }
    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& pp) : p(pp) {
            if (++p.depth_ > kMaxNesting) p.fail_at(p.cur().line, "template nested too deeply");
        }
        ~DepthGuard() { --p.depth_; }
    };
    ExprP make(Expr::K k, int line) {
        auto e = std::make_unique<Expr>();
        e->k = k;
        e->line = line;
        return e;
    }

    // ---- statements ----

    // Parses until a block whose first name is in `ends` (left unconsumed, positioned at the name).
    Body parse_body(std::initializer_list<const char*> ends) {
        DepthGuard g(*this);
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.type == Tok::Eof) {
                if (ends.size() == 0) return body;
                const char* closer = *ends.begin();
                for (const char* e : ends)
                    if (std::string_view(e).substr(0, 3) == "end") closer = e;
                fail_here(fmt::format("'{}'", closer));
            }
            if (t.type == Tok::Data) {
                auto s = std::make_unique<Stmt>();
                s->k = Stmt::K::Text;
                s->line = t.line;
                s->text = t.text;
                body.push_back(std::move(s));
                next();
            } else if (t.type == Tok::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->k = Stmt::K::Print;
                s->line = t.line;
                next();
                s->expr = parse_tuple(true);
                if (cur().type != Tok::VarEnd) fail_here("end of print statement");
                next();
                body.push_back(std::move(s));
            } else if (t.type == Tok::BlockBegin) {
                const Token& n = peek();
                if (n.type == Tok::Name)
                    for (const char* e : ends)
                        if (n.text == e) {
                            next();
                            return body;
                        }
                next();
                body.push_back(parse_statement());
            } else {
                fail_here("template data or a tag");
            }
        }
    }

    std::unique_ptr<Stmt> parse_statement() {
        int line = cur().line;
        if (cur().type != Tok::Name) fail_here("statement name");
        std::string kw = cur().text;
        auto s = std::make_unique<Stmt>();
        s->line = line;
        if (kw == "if") {
            next();
            s->k = Stmt::K::If;
            while (true) {
                ExprP c = parse_tuple(false);
                expect_block_end();
                Body b = parse_body({"elif", "else", "endif"});
                s->branches.emplace_back(std::move(c), std::move(b));
                std::string which = cur().text;
                next();
                if (which == "elif") continue;
                if (which == "else") {
                    expect_block_end();
                    s->else_body = parse_body({"endif"});
                    next();
                }
                break;
            }
            expect_block_end();
        } else if (kw == "for") {
            next();
            s->k = Stmt::K::For;
            s->targets = parse_targets();
            if (!is_name("in")) fail_here("'in'");
            next();
            s->expr = parse_tuple(false, true);
            const int mentions_before = loop_mentions_;
            if (is_name("if")) {
                next();
                s->cond = parse_condexpr();
            }
            if (is_name("recursive")) fail_at(line, "unsupported recursive for loop");
            expect_block_end();
            ++loop_depth_;
            s->body = parse_body({"endfor", "else"});
            --loop_depth_;
            s->uses_loop = loop_mentions_ != mentions_before;
            if (cur().text == "else") {
                next();
                expect_block_end();
                s->else_body = parse_body({"endfor"});
            }
            next();
            expect_block_end();
        } else if (kw == "set") {
            next();
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
                s->targets.push_back(expect_name());
                next();
                s->attr = expect_name();
            } else {
                s->targets = parse_targets();
            }
            if (is_op("=")) {
                next();
                s->k = Stmt::K::Set;
                s->expr = parse_tuple(true);
                expect_block_end();
            } else {
                if (s->targets.size() != 1 || !s->attr.empty()) fail_here("'='");
                s->k = Stmt::K::SetBlock;
                if (is_op("|")) s->expr = parse_filter_chain(nullptr);
                expect_block_end();
                s->body = parse_body({"endset"});
                next();
                expect_block_end();
            }
        } else if (kw == "macro") {
            next();
            s->k = Stmt::K::Macro;
            s->name = expect_name();
            expect_op("(");
            while (!is_op(")")) {
                if (!s->params.empty()) expect_op(",");
                if (is_op(")")) break;
                std::string p = expect_name();
                ExprP def;
                if (is_op("=")) {
                    next();
                    def = parse_condexpr();
                } else if (!s->params.empty() && s->params.back().second) {
                    fail_at(line, "non-default argument follows default argument");
                }
                s->params.emplace_back(std::move(p), std::move(def));
            }
            next();
            expect_block_end();
            int saved_loops = loop_depth_;
            loop_depth_ = 0;
            s->body = parse_body({"endmacro"});
            loop_depth_ = saved_loops;
            next();
            if (cur().type == Tok::Name && cur().text == s->name) next();
            expect_block_end();
        } else if (kw == "filter") {
            next();
            s->k = Stmt::K::FilterBlock;
            s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
            expect_block_end();
            s->body = parse_body({"endfilter"});
            next();
            expect_block_end();
        } else if (kw == "break" || kw == "continue") {
            if (loop_depth_ == 0) fail_at(line, fmt::format("'{}' outside of a loop", kw));
            next();
            s->k = kw == "break" ? Stmt::K::Break : Stmt::K::Continue;
            expect_block_end();
        } else if (kw == "generation") {
            next();
            s->k = Stmt::K::Scope;
            expect_block_end();
            s->body = parse_body({"endgeneration"});
            next();
            expect_block_end();
        } else if (kw == "call" || kw == "with" || kw == "include" || kw == "import" || kw == "from" ||
                   kw == "extends" || kw == "block" || kw == "do" || kw == "autoescape") {
            fail_at(line, fmt::format("unsupported '{}' statement", kw));
        } else {
            fail_at(line, fmt::format("unexpected '{}' (expected a statement name)", kw));
        }
        return s;
    }

    // `a` | `a, b` | `(a, b)`: names assigned by for/set.
    std::vector<std::string> parse_targets() {
        std::vector<std::string> names;
        bool paren = is_op("(");
        if (paren) next();
        while (true) {
            names.push_back(expect_name());
            if (!is_op(",")) break;
            next();
            if (cur().type != Tok::Name) break;
        }
        if (paren) expect_op(")");
        return names;
    }

    // ---- expressions ----

    // Comma-separated expressions; a comma makes a tuple. `for_iter` stops before `if`.
    ExprP parse_tuple(bool condexpr, bool for_iter = false) {
        (void)for_iter;
        int line = cur().line;
        auto one = [&] { return condexpr ? parse_condexpr() : parse_or(); };
        ExprP first = one();
        if (!is_op(",")) return first;
        auto tup = make(Expr::K::Tuple, line);
        tup->args.push_back(std::move(first));
        while (is_op(",")) {
            next();
            if (cur().type == Tok::BlockEnd || cur().type == Tok::VarEnd || is_op(")") || is_name("if"))
                break;
            tup->args.push_back(one());
        }
        return tup;
    }

    ExprP parse_condexpr() {
        DepthGuard g(*this);
        int line = cur().line;
        ExprP e = parse_or();
        while (is_name("if")) {
            next();
            auto c = make(Expr::K::Cond, line);
            c->a = std::move(e);
            c->b = parse_or();
            if (is_name("else")) {
                next();
                c->c = parse_condexpr();
            } else {  // the value when false, made once here rather than at every evaluation
                c->lit = Value::undefined(fmt::format(
                    "the inline if-expression on line {} evaluated to false and no else section was defined.",
                    line));
            }
            e = std::move(c);
        }
        return e;
    }

    ExprP binary(Expr::K k, ExprP a, ExprP b, int line, std::string op = {}) {
        auto e = make(k, line);
        e->a = std::move(a);
        e->b = std::move(b);
        e->name = std::move(op);
        return e;
    }

    ExprP parse_or() {
        ExprP e = parse_and();
        while (is_name("or")) {
            int line = cur().line;
            next();
            e = binary(Expr::K::Or, std::move(e), parse_and(), line);
        }
        return e;
    }
    ExprP parse_and() {
        ExprP e = parse_not();
        while (is_name("and")) {
            int line = cur().line;
            next();
            e = binary(Expr::K::And, std::move(e), parse_not(), line);
        }
        return e;
    }
    ExprP parse_not() {
        DepthGuard g(*this);
        if (is_name("not")) {
            auto e = make(Expr::K::Not, cur().line);
            next();
            e->a = parse_not();
            return e;
        }
        return parse_compare();
    }
    ExprP parse_compare() {
        int line = cur().line;
        ExprP e = parse_math1();
        ExprP cmp;
        while (true) {
            std::string op;
            if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = cur().text;
                next();
            } else if (is_name("in")) {
                op = "in";
                next();
            } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
                op = "notin";
                next();
                next();
            } else {
                break;
            }
            if (!cmp) {
                cmp = make(Expr::K::Compare, line);
                cmp->a = std::move(e);
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(e);
    }
    ExprP parse_math1() {
        ExprP e = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = cur().text;
            int line = cur().line;
            next();
            e = binary(Expr::K::Binary, std::move(e), parse_concat(), line, op);
        }
        return e;
    }
    ExprP parse_concat() {
        ExprP e = parse_math2();
        while (is_op("~")) {
            int line = cur().line;
            next();
            e = binary(Expr::K::Binary, std::move(e), parse_math2(), line, "~");
        }
        return e;
    }
    ExprP parse_math2() {
        ExprP e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = cur().text;
            int line = cur().line;
            next();
            e = binary(Expr::K::Binary, std::move(e), parse_pow(), line, op);
        }
        return e;
    }
    ExprP parse_pow() {
        ExprP e = parse_unary(true);
        while (is_op("**")) {
            int line = cur().line;
            next();
            e = binary(Expr::K::Binary, std::move(e), parse_unary(true), line, "**");
        }
        return e;
    }
    ExprP parse_unary(bool with_filter) {
        DepthGuard g(*this);
        int line = cur().line;
        ExprP e;
        if (is_op("-") || is_op("+")) {
            e = make(Expr::K::Unary, line);
            e->name = cur().text;
            next();
            e->a = parse_unary(false);
        } else {
            e = parse_postfix(parse_primary());
        }
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprP parse_primary() {
        const Token& t = cur();
        int line = t.line;
        if (t.type == Tok::Name) {
            auto e = make(Expr::K::Literal, line);
            if (t.text == "true" || t.text == "True") {
                e->lit = Value::boolean(true);
            } else if (t.text == "false" || t.text == "False") {
                e->lit = Value::boolean(false);
            } else if (t.text == "none" || t.text == "None") {
                e->lit = Value::none();
            } else {
                e->k = Expr::K::Name;
                e->name = t.text;
                if (e->name == "loop") ++loop_mentions_;
            }
            next();
            return e;
        }
        if (t.type == Tok::String) {
            std::string s;
            while (cur().type == Tok::String) {
                s += cur().text;
                next();
            }
            auto e = make(Expr::K::Literal, line);
            e->lit = Value::string(std::move(s));
            return e;
        }
        if (t.type == Tok::Int || t.type == Tok::Float) {
            auto e = make(Expr::K::Literal, line);
            e->lit = t.type == Tok::Int ? Value::integer(t.ival) : Value::number(t.fval);
            next();
            return e;
        }
        if (is_op("(")) {
            next();
            if (is_op(")")) {
                next();
                return make(Expr::K::Tuple, line);
            }
            ExprP first = parse_condexpr();
            if (is_op(")")) {
                next();
                return first;
            }
            auto tup = make(Expr::K::Tuple, line);
            tup->args.push_back(std::move(first));
            while (is_op(",")) {
                next();
                if (is_op(")")) break;
                tup->args.push_back(parse_condexpr());
            }
            expect_op(")");
            return tup;
        }
        if (is_op("[")) {
            next();
            auto e = make(Expr::K::List, line);
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_condexpr());
            }
            next();
            return e;
        }
        if (is_op("{")) {
            next();
            auto e = make(Expr::K::Dict, line);
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_condexpr());
                expect_op(":");
                e->args.push_back(parse_condexpr());
            }
            next();
            return e;
        }
        fail_here("an expression");
    }

    ExprP parse_postfix(ExprP e) {
        while (true) {
            int line = cur().line;
            if (is_op(".")) {
                next();
                if (cur().type == Tok::Int) {
                    auto it = make(Expr::K::Item, line);
                    it->a = std::move(e);
                    it->b = make(Expr::K::Literal, line);
                    it->b->lit = Value::integer(cur().ival);
                    next();
                    e = std::move(it);
                    continue;
                }
                auto at = make(Expr::K::Attr, line);
                at->a = std::move(e);
                at->name = expect_name();
                e = std::move(at);
            } else if (is_op("[")) {
                next();
                e = parse_subscript(std::move(e), line);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprP parse_subscript(ExprP obj, int line) {
        std::vector<ExprP> parts(3);
        bool slice = false;
        int idx = 0;
        if (!is_op(":")) parts[0] = parse_condexpr();
        while (is_op(":") && idx < 2) {
            slice = true;
            next();
            ++idx;
            if (!is_op(":") && !is_op("]")) parts[static_cast<size_t>(idx)] = parse_condexpr();
        }
        expect_op("]");
        if (!slice) {
            auto it = make(Expr::K::Item, line);
            it->a = std::move(obj);
            it->b = std::move(parts[0]);
            return it;
        }
        auto sl = make(Expr::K::Slice, line);
        sl->a = std::move(obj);
        sl->args = std::move(parts);
        return sl;
    }

    void parse_args(Expr& call) {
        expect_op("(");
        while (!is_op(")")) {
            if (!call.args.empty() || !call.kwargs.empty()) expect_op(",");
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail_at(cur().line, "unsupported *args/**kwargs in call");
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string k = cur().text;
                next();
                next();
                call.kwargs.emplace_back(std::move(k), parse_condexpr());
            } else {
                if (!call.kwargs.empty()) fail_at(cur().line, "positional argument follows keyword argument");
                call.args.push_back(parse_condexpr());
            }
        }
        next();
    }

    ExprP parse_call(ExprP fn) {
        auto c = make(Expr::K::Call, cur().line);
        c->a = std::move(fn);
        parse_args(*c);
        return c;
    }

    ExprP parse_one_filter(ExprP input) {
        auto f = make(Expr::K::Filter, cur().line);
        f->a = std::move(input);
        f->name = expect_name();
        while (is_op(".")) {
            next();
            f->name.push_back('.');
            f->name += expect_name();
        }
        if (is_op("(")) parse_args(*f);
        return f;
    }

    ExprP parse_filter_chain(ExprP input, bool leading_pipe = true) {
        if (leading_pipe) expect_op("|");
        ExprP e = parse_one_filter(std::move(input));
        while (is_op("|")) {
            next();
            e = parse_one_filter(std::move(e));
        }
        return e;
    }

    ExprP parse_filter_expr(ExprP e) {
        while (true) {
            if (is_op("|")) {
                next();
                e = parse_one_filter(std::move(e));
            } else if (is_name("is")) {
                auto t = make(Expr::K::Test, cur().line);
                next();
                if (is_name("not")) {
                    t->negated = true;
                    next();
                }
                t->name = expect_name();
                t->a = std::move(e);
                const Token& c = cur();
                if (is_op("(")) {
                    parse_args(*t);
                } else if ((c.type == Tok::Name && c.text != "else" && c.text != "or" && c.text != "and") ||
                           c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                           is_op("[") || is_op("{")) {
                    // `is divisibleby 3`: one argument without parentheses.
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    std::vector<Token> t_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;     // for-loops enclosing the current statement (break/continue check)
    int loop_mentions_ = 0;  // `loop` names parsed so far (which for-loops need a loop object)
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(lex_template(source)).parse_all(); }

}  // namespace pelican::jinja
