// Focused tests of the Jinja interpreter's API, error reporting and runaway guards.
// Rendering semantics are compared with Python jinja2 in jinja_python_test.cpp.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "jinja/jinja.h"

namespace {

using pelican::jinja::RenderOptions;
using pelican::jinja::Template;

// Renders or returns "ERROR: <message>".
std::string render(const std::string& src,
                   const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                   const RenderOptions& opt = {}) {
    auto t = Template::parse(src);
    if (!t) return "ERROR: " + t.error().message;
    auto r = t->render(ctx, opt);
    if (!r) return "ERROR: " + r.error().message;
    return *r;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

TEST(Jinja, RendersTextAndVariables) {
    EXPECT_EQ(render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
    EXPECT_EQ(render(""), "");
    EXPECT_EQ(render("plain\n"), "plain");  // jinja2 drops one trailing newline
}

TEST(Jinja, ParseErrorsNameLineAndToken) {
    EXPECT_EQ(render("a\n{{ 1 + }}"),
              "ERROR: template line 2: unexpected end of print statement (expected an expression)");
    EXPECT_EQ(render("{% if x %}\nno end"),
              "ERROR: template line 2: unexpected end of template (expected 'endif')");
    EXPECT_EQ(render("{% for x in y %}{% endif %}"),
              "ERROR: template line 1: unexpected 'endif' (expected a statement name)");
    EXPECT_TRUE(starts_with(render("x\n\n{{ 'unterminated }}"),
                            "ERROR: template line 3: unexpected end of template"));
    EXPECT_TRUE(starts_with(render("{{ a b }}"), "ERROR: template line 1: unexpected 'b'"));
    EXPECT_TRUE(starts_with(render("{{ x"), "ERROR: template line 1: unexpected end of template"));
    EXPECT_TRUE(starts_with(render("{# open comment"), "ERROR: template line 1:"));
    EXPECT_TRUE(starts_with(render("{% break %}"), "ERROR: template line 1: 'break' outside of a loop"));
}

TEST(Jinja, UnsupportedConstructsSaySo) {
    EXPECT_EQ(render("\n{% include 'x.j2' %}"), "ERROR: template line 2: unsupported 'include' statement");
    EXPECT_EQ(render("{% call m() %}x{% endcall %}"), "ERROR: template line 1: unsupported 'call' statement");
    EXPECT_EQ(render("{% for x in y recursive %}{% endfor %}"),
              "ERROR: template line 1: unsupported recursive for loop");
}

TEST(Jinja, RaiseExceptionMessageIsVerbatim) {
    EXPECT_EQ(render("ok{{ raise_exception('Roles must alternate user/assistant') }}"),
              "ERROR: Roles must alternate user/assistant");
    EXPECT_EQ(render("{% macro m() %}{{ raise_exception('deep ' ~ 1) }}{% endmacro %}{% for i in [1] %}{{ "
                     "m() }}{% endfor %}"),
              "ERROR: deep 1");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
    EXPECT_EQ(render("a\nb {{ missing.attr }}"), "ERROR: template line 2: 'missing' is undefined");
    EXPECT_EQ(render("{{ [1].append(2) }}"),
              "ERROR: template line 1: access to attribute 'append' of 'list' object is unsafe.");
    EXPECT_EQ(render("{{ 1 / 0 }}"), "ERROR: template line 1: division by zero");
    EXPECT_EQ(render("{{ x|nosuch }}"), "ERROR: template line 1: No filter named 'nosuch'.");
    EXPECT_EQ(render("{{ x is nosuch }}"), "ERROR: template line 1: No test named 'nosuch'.");
    EXPECT_EQ(render("{{ 'a' + 1 }}"),
              "ERROR: template line 1: can only concatenate str (not \"int\") to str");
}

TEST(Jinja, GuardsAgainstRunawayTemplates) {
    std::string r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    EXPECT_NE(r.find("recursion depth"), std::string::npos) << r;
    r = render("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    EXPECT_NE(r.find("output too large"), std::string::npos) << r;
    r = render("{{ range(1000000000)|length }}");
    EXPECT_NE(r.find("range too big"), std::string::npos) << r;
    r = render("{{ 'ab' * 1000000000000 }}");
    EXPECT_NE(r.find("too large"), std::string::npos) << r;
    r = render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
    EXPECT_NE(r.find("nested too deeply"), std::string::npos) << r.substr(0, 200);
    r = render(std::string(3000, '[') + "");
    EXPECT_FALSE(r.empty());
    // Recursion through deeply nested blocks: must stop with an error, not overflow the C++ stack.
    std::string open, close;
    for (int i = 0; i < 190; ++i) open += "{% if true %}", close += "{% endif %}";
    r = render("{% macro f(d) %}" + open + "{{ f(d + 1) if d < 250 else d }}" + close +
               "{% endmacro %}{{ f(0) }}");
    EXPECT_NE(r.find("recursion limit"), std::string::npos) << r;
}

TEST(Jinja, StrftimeNowUsesPinnedClock) {
    setenv("TZ", "UTC", 1);
    tzset();
    RenderOptions opt;
    opt.now = 1768473000;  // 2026-01-15 10:30:00 UTC
    EXPECT_EQ(render("{{ strftime_now('%d %b %Y %H:%M') }}", nlohmann::ordered_json::object(), opt),
              "15 Jan 2026 10:30");
}

TEST(Jinja, ContextValuesKeepJsonTypes) {
    nlohmann::ordered_json ctx = {{"i", 3},       {"f", 2.0}, {"b", true},
                                  {"n", nullptr}, {"s", "é"}, {"l", {1, "x"}}};
    EXPECT_EQ(render("{{ i }} {{ f }} {{ b }} {{ n }} {{ s }} {{ l }} {{ l|tojson }}", ctx),
              "3 2.0 True None é [1, 'x'] [1, \"x\"]");
    EXPECT_EQ(render("{{ u }}", {{"u", 18446744073709551615ull}}), "1.8446744073709552e+19");
}

TEST(Jinja, TemplateIsReusableAndMovable) {
    auto t = Template::parse("{{ x * 2 }}");
    ASSERT_TRUE(t.ok());
    Template moved = std::move(*t);
    EXPECT_EQ(*moved.render({{"x", 2}}), "4");
    EXPECT_EQ(*moved.render({{"x", "ab"}}), "abab");
    Template empty;
    EXPECT_FALSE(empty.render(nlohmann::ordered_json::object()).ok());
    EXPECT_FALSE(moved.render(nlohmann::ordered_json::array()).ok());
}

TEST(Jinja, NamespaceStateSurvivesLoopScopes) {
    const char* src =
        "{%- set ns = namespace(last_user=-1) -%}"
        "{%- for m in messages -%}{%- if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif -%}"
        "{%- endfor -%}{{ ns.last_user }}";
    nlohmann::ordered_json ctx = {
        {"messages", {{{"role", "user"}}, {{"role", "assistant"}}, {{"role", "user"}}}}};
    EXPECT_EQ(render(src, ctx), "2");
}

TEST(Jinja, GenerationBlockRendersBody) {
    EXPECT_EQ(render("{% generation %}[{{ 1 + 1 }}]{% endgeneration %}"), "[2]");
}

TEST(Jinja, MalformedUtf8DoesNotCrash) {
    std::string bad = "a\xff\xfe{{ 'x\xc3' }}\xe2\x82";
    auto r = render(bad);
    EXPECT_FALSE(r.empty());
    EXPECT_EQ(render("{{ s|length }}", {{"s", "h\xc3\xa9llo"}}), "5");
}

}  // namespace
