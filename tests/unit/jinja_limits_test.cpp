// Untrusted chat templates: the interpreter's step budget, memory limit and recursion guards
// (src/jinja/budget.h). Each hostile template must fail with an error naming the limit, quickly and
// without allocating far past the limit; the Template and the process stay usable. Peak memory is
// read from getrusage (ctest runs each test in its own process).
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "core/mmap_file.h"
#include "jinja/chat_template.h"
#include "jinja/jinja.h"

namespace pelican {
namespace {

using jinja::RenderOptions;
using jinja::Template;
using json = nlohmann::ordered_json;

constexpr size_t kMiB = size_t{1} << 20;

struct Outcome {
    std::string text;  // the output, or "ERROR: <message>"
    double seconds = 0;
};

Outcome render(const std::string& src, const RenderOptions& opt = {}, const json& ctx = json::object()) {
    auto t0 = std::chrono::steady_clock::now();
    Outcome o;
    auto t = Template::parse(src);
    if (!t) {
        o.text = "ERROR: " + t.error().message;
    } else {
        auto r = t->render(ctx, opt);
        o.text = r ? *r : "ERROR: " + r.error().message;
    }
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
}

RenderOptions limits(uint64_t steps, size_t bytes) {
    RenderOptions o;
    o.max_steps = steps;
    o.max_bytes = bytes;
    return o;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Peak resident memory of this process (or of its largest waited-for child), MiB. A process-wide
// maximum: ctest runs each test alone, where a template stopped at the 64 MiB limit peaks near
// 2x that (a growing buffer and its copy); run together, the tests share the largest peak.
double peak_rss_mib(int who = RUSAGE_SELF) {
    rusage ru{};
    getrusage(who, &ru);
    return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

const char* kNestedLoops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";

TEST(JinjaLimits, NestedLoopStopsAtASmallStepBudget) {
    Outcome o = render(kNestedLoops, limits(1'000'000, jinja::kDefaultMaxBytes));
    EXPECT_EQ(o.text,
              "ERROR: template line 1: stopped after 1000000 steps (the template's step budget; raise it "
              "with --template-max-steps)");
    EXPECT_LT(o.seconds, 1.0);
}

TEST(JinjaLimits, NestedLoopStopsAtTheDefaultBudget) {
    Outcome o = render(kNestedLoops);
    EXPECT_TRUE(has(o.text, "stopped after 100000000 steps")) << o.text;
    // About 3.5 s of one free core; generous for a loaded machine, and far from "never".
    EXPECT_LT(o.seconds, 30.0);
    std::printf("nested range loops, default budget: %.2f s\n", o.seconds);
}

// Templates whose values double each iteration, in every way a string or list can grow.
const std::vector<std::pair<const char*, std::string>> kGrowth = {
    {"~", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"},
    {"str +",
     "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"},
    {"str *", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s * 2 %}{% endfor %}"},
    {"join",
     "{% set ns = namespace(l=['x']) %}{% for i in range(64) %}"
     "{% set ns.l = [ns.l|join, ns.l|join] %}{% endfor %}"},
    {"str.join",
     "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
     "{% set ns.s = ns.s.join(['', '']) ~ ns.s %}{% endfor %}"},
    {"list +",
     "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"},
    {"list *",
     "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}{% endfor %}"},
    {"replace",
     "{% set ns = namespace(s='xx') %}{% for i in range(64) %}"
     "{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}"},
    {"|replace",
     "{% set ns = namespace(s='xx') %}{% for i in range(64) %}"
     "{% set ns.s = ns.s|replace('x', 'xx') %}{% endfor %}"},
    {"|format",
     "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
     "{% set ns.s = '%s%s'|format(ns.s, ns.s) %}{% endfor %}"},
    {"str.format",
     "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
     "{% set ns.s = '{}{}'.format(ns.s, ns.s) %}{% endfor %}"},
    {"center",
     "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
     "{% set ns.s = ns.s|center(ns.s|length * 2) %}{% endfor %}"},
    {"indent",
     "{% set ns = namespace(s='a\nb') %}{% for i in range(64) %}"
     "{% set ns.s = ns.s ~ '\n' ~ ns.s|indent(8) %}{% endfor %}"},
    {"print shared",
     "{% set ns = namespace(l=['x']) %}{% for i in range(64) %}"
     "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}"},
    {"tojson shared",
     "{% set ns = namespace(l=['x']) %}{% for i in range(64) %}"
     "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l|tojson }}"},
    {"output", "{% set s = 'x' * 100000 %}{% for i in range(10000) %}{{ s }}{% endfor %}"},
    {"captured output", "{% macro f(n) %}{{ 'x' * 1000000 }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
    {"split",
     "{{ ('a ' * 200000).split()|length }}{% set ns = namespace(l=[]) %}{% for i in range(64) %}"
     "{% set ns.l = ns.l + ('a ' * 100000).split() %}{% endfor %}"},
    {"list of chars", "{{ ('ab' * 300000)|list|length }}"},
    {"kept strings",
     "{% set ns = namespace(keep=[]) %}{% for i in range(1000) %}"
     "{% set ns.keep = ns.keep + ['x' * 100000 ~ i] %}{% endfor %}"},
};

TEST(JinjaLimits, GrowthStopsAtTheMemoryLimit) {
    for (const auto& [what, src] : kGrowth) {
        Outcome o = render(src, limits(jinja::kDefaultMaxSteps, kMiB));
        EXPECT_TRUE(has(o.text, "too large")) << what << ": " << o.text.substr(0, 300);
        EXPECT_TRUE(has(o.text, "memory limit of 1 MiB")) << what << ": " << o.text.substr(0, 300);
        EXPECT_TRUE(has(o.text, "--template-max-bytes")) << what;
        EXPECT_LT(o.seconds, 1.0) << what;
    }
    EXPECT_LT(peak_rss_mib(), 512.0);
}

TEST(JinjaLimits, DoublingWithTheDefaultLimitFailsAndReturns) {
    for (const auto& [what, src] : kGrowth) {
        Outcome o = render(src);
        EXPECT_TRUE(has(o.text, "memory limit of 64 MiB")) << what << ": " << o.text.substr(0, 300);
        EXPECT_LT(o.seconds, 20.0) << what;
    }
    // The limit is on what the render holds at once; a transient copy inside one builtin comes on top.
    EXPECT_LT(peak_rss_mib(), 512.0);
    std::printf("peak RSS after every growth template at the default limit: %.0f MiB\n", peak_rss_mib());
}

TEST(JinjaLimits, HugeSizesFailBeforeAllocating) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{{ range(10**12)|length }}", "range too big (range() of 1000000000000 items)"},
        {"{{ range(0, 10**18, 3)|length }}", "range too big"},
        {"{{ 'x' * 10**12 }}", "string repetition too large"},
        {"{{ 10**12 * 'ab' }}", "string repetition too large"},
        {"{{ ([0] * 10**12)|length }}", "sequence repetition too large"},
        {"{{ 'x'|center(10**12) }}", "centered string too large"},
        {"{{ 'x'.center(10**15) }}", "centered string too large"},
        {"{{ [1]|batch(10**12, 0)|list }}", "batch too large"},
        {"{{ strftime_now('%c' * 10**7) }}", "strftime_now result too large"},
        {"{{ ('x' * 10**7)|list|length }}", "list of characters too large"},
        {"{{ ('\n' * 10**6)|indent(1000, true, true) }}", "too large"},
    };
    for (const auto& [src, want] : cases) {
        Outcome o = render(src);
        EXPECT_TRUE(has(o.text, want)) << src << " -> " << o.text.substr(0, 300);
        EXPECT_LT(o.seconds, 1.0) << src;
    }
    // Format widths and precisions are capped before anything is padded.
    EXPECT_TRUE(has(render("{{ '%99999999999999999999999s'|format('x') }}").text, "format width too large"));
    EXPECT_TRUE(has(render("{{ '{:.999999999}'.format(1.5) }}").text, "format precision too large"));
    EXPECT_LT(peak_rss_mib(), 512.0);
}

TEST(JinjaLimits, MacroRecursionFailsCleanly) {
    EXPECT_EQ(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").text,
              "ERROR: template line 1: maximum macro recursion depth exceeded (macro calls nested 256 deep)");
    // Mutual recursion.
    Outcome o = render(
        "{% macro f(n) %}{{ g(n) }}{% endmacro %}{% macro g(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    EXPECT_TRUE(has(o.text, "maximum macro recursion depth exceeded")) << o.text;
    // Shallow but exponential: 2^60 calls stop at the step budget.
    o = render(
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
        limits(1'000'000, jinja::kDefaultMaxBytes));
    EXPECT_TRUE(has(o.text, "stopped after 1000000 steps")) << o.text;
    EXPECT_LT(o.seconds, 1.0);
    // Recursion through nested blocks stops before the C++ stack overflows.
    std::string open, close;
    for (int i = 0; i < 150; ++i) open += "{% if true %}", close += "{% endif %}";
    o = render("{% macro f(d) %}" + open + "{{ f(d + 1) }}" + close + "{% endmacro %}{{ f(0) }}");
    EXPECT_TRUE(has(o.text, "recursion limit")) << o.text;
}

TEST(JinjaLimits, DeepAndSelfReferentialValuesDoNotCrash) {
    // A list nested 200000 deep would overflow the stack when printed or freed.
    Outcome o = render(
        "{% set ns = namespace(l=[]) %}{% for i in range(200000) %}{% set ns.l = [ns.l] %}{% endfor %}ok");
    EXPECT_TRUE(has(o.text, "value nested too deeply (lists / dicts more than 512 levels deep)")) << o.text;
    // A namespace holding itself prints as Python does.
    EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}").text,
              "<Namespace {'x': <Namespace {...}>}>");
    EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.x = {'k': ns} %}{{ [ns] }}").text,
              "[<Namespace {'a': 1, 'x': {'k': <Namespace {...}>}}>]");
    // A chain of 20000 namespaces, linked after they were made: printing it stops at the depth
    // limit; building it, dropping it and freeing it at the end of the render is fine.
    const std::string chain =
        "{% set ns = namespace(tail=namespace(next=none)) %}{% set head = ns.tail %}"
        "{% for i in range(20000) %}{% set n = namespace(next=none) %}{% set t = ns.tail %}"
        "{% set t.next = n %}{% set ns.tail = n %}{% endfor %}";
    o = render(chain + "{{ head }}");
    EXPECT_TRUE(has(o.text, "value nested too deeply to print")) << o.text.substr(0, 300);
    EXPECT_EQ(render(chain + "{% set head = none %}{% set ns.tail = none %}done").text, "done");
}

TEST(JinjaLimits, TemplateStaysUsableAfterALimit) {
    auto t = Template::parse(
        "{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}{{ ('x' * m)|length }}");
    ASSERT_TRUE(t.ok());
    const RenderOptions small = limits(100'000, kMiB);
    for (int round = 0; round < 2; ++round) {  // the same errors each time: nothing carries over
        auto r = t->render({{"n", 1000}, {"m", 1}}, small);
        ASSERT_FALSE(r.ok());
        EXPECT_TRUE(has(r.error().message, "stopped after 100000 steps")) << r.error().message;
        r = t->render({{"n", 0}, {"m", 10 * kMiB}}, small);
        ASSERT_FALSE(r.ok());
        EXPECT_TRUE(has(r.error().message, "string repetition too large")) << r.error().message;
        r = t->render({{"n", 100}, {"m", 1000}}, small);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(*r, "1000");
    }
}

TEST(JinjaLimits, BuiltinWorkIsCharged) {
    // Each does little per step the interpreter sees but a lot inside one builtin.
    const std::vector<std::string> cases = {
        // A worst-case substring search: 3001-byte needle, every position a candidate.
        "{% set h = 'a' * 4000000 %}{% set n = 'a' * 3000 ~ 'b' %}{{ n in h }}{{ h.count(n) }}",
        "{{ range(100000)|unique|list|length }}",  // quadratic
        "{% set l = range(100000)|list %}{% for i in range(1000) %}{% set x = l|sort %}{% endfor %}",
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% set x = s|length %}{% endfor %}",
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% set x = s == s ~ '' %}{% endfor %}",
        "{{ dict(range(200000)|batch(2)|list)|length }}",  // quadratic key search
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% set x = s|upper %}{% endfor %}",
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% set x = s[500000] %}{% endfor %}",
    };
    for (const auto& src : cases) {
        Outcome o = render(src, limits(1'000'000, jinja::kDefaultMaxBytes));
        EXPECT_TRUE(has(o.text, "stopped after 1000000 steps")) << src << " -> " << o.text.substr(0, 300);
        EXPECT_LT(o.seconds, 1.0) << src;
    }
}

TEST(JinjaLimits, ChatTemplateOptionsCarryTheLimits) {
    json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
    jinja::ChatTemplateOptions opt;
    EXPECT_EQ(opt.max_steps, jinja::kDefaultMaxSteps);
    EXPECT_EQ(opt.max_bytes, jinja::kDefaultMaxBytes);
    const std::string loop = "{% for m in messages %}{% for i in range(100000) %}{% endfor %}{% endfor %}";
    opt.max_steps = 5000;
    auto r = jinja::apply_chat_template(loop, messages, json(), opt);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(has(r.error().message, "stopped after 5000 steps")) << r.error().message;
    opt.max_steps = jinja::kDefaultMaxSteps;
    opt.max_bytes = 100000;
    r = jinja::apply_chat_template("{{ messages[0].content * 100000 }}", messages, json(), opt);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(has(r.error().message, "memory limit of 100000 bytes")) << r.error().message;
    r = jinja::apply_chat_template("{{ messages[0].content * 1000 }}", messages, json(), opt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->size(), 2000u);
}

// The real templates render the test conversations in under 1e4 steps and 256 KiB (a 400 KB,
// 200-message conversation takes at most 2e6 steps and 2 MB): with 1e5 steps and 1 MiB each
// must still render exactly as with the defaults.
TEST(JinjaLimits, ReferenceTemplatesFitFarWithinTheDefaults) {
    namespace fs = std::filesystem;
    const std::string dir = PELICAN_SHARED_DIR "/data/chat-templates";
    auto conv_text = read_text_file(PELICAN_SOURCE_DIR "/tests/data/chat/conversations/tool_calls.json");
    ASSERT_TRUE(conv_text.ok());
    auto conv = jinja::parse_chat_input(*conv_text, "tool_calls.json");
    ASSERT_TRUE(conv.ok()) << conv.error().message;
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (e.path().extension() != ".jinja") continue;
        auto src = read_text_file(e.path().string());
        ASSERT_TRUE(src.ok());
        jinja::ChatTemplateOptions opt;
        opt.add_generation_prompt = true;
        opt.bos_token = "<s>";
        opt.eos_token = "</s>";
        opt.now = 0;
        auto full = jinja::apply_chat_template(*src, conv->messages, conv->tools, opt);
        opt.max_steps = 100'000;
        opt.max_bytes = kMiB;
        auto tight = jinja::apply_chat_template(*src, conv->messages, conv->tools, opt);
        ASSERT_EQ(full.ok(), tight.ok()) << e.path() << ": " << (tight.ok() ? "" : tight.error().message);
        if (full.ok())
            EXPECT_EQ(*full, *tight) << e.path();
        else
            EXPECT_EQ(full.error().message, tight.error().message) << e.path();
        ++n;
    }
    EXPECT_GE(n, 60) << "templates in " << dir;
}

// ---- pelican template ------------------------------------------------------------------

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(JinjaLimitsCli, HostileTemplatesExitWithTheLimit) {
    test::TempDir dir("jinja_limits");
    write_file(dir / "conv.json", R"([{"role": "user", "content": "hi"}])");
    write_file(dir / "loops.jinja", kNestedLoops);
    write_file(
        dir / "double.jinja",
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
        "{{ ns.s }}");
    auto t0 = std::chrono::steady_clock::now();
    auto r = test::run_pelican_in({"template", "-m", dir / "loops.jinja", "--messages", dir / "conv.json",
                                   "--template-max-steps", "1000000"},
                                  dir);
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.err,
                    "loops.jinja: template line 1: stopped after 1000000 steps (the template's step "
                    "budget; raise it with --template-max-steps)"))
        << r.err;
    EXPECT_TRUE(r.out.empty());

    r = test::run_pelican_in({"template", "-m", dir / "double.jinja", "--messages", dir / "conv.json",
                              "--template-max-bytes", "1048576"},
                             dir);
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.err, "string concatenation too large")) << r.err;
    EXPECT_TRUE(has(r.err, "memory limit of 1 MiB")) << r.err;

    // The defaults, and the template in an HF folder's tokenizer_config.json (what `run --chat` loads).
    std::filesystem::create_directories(dir / "hf");
    json cfg = {{"chat_template", read_text_file(dir / "double.jinja").value()}};
    write_file(dir / "hf/tokenizer_config.json", cfg.dump());
    r = test::run_pelican_in({"template", "-m", dir / "hf", "--messages", dir / "conv.json"}, dir);
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.err, "tokenizer_config.json:chat_template: template line 1:")) << r.err;
    EXPECT_TRUE(has(r.err, "memory limit of 64 MiB")) << r.err;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 10.0);
    EXPECT_LT(peak_rss_mib(RUSAGE_CHILDREN), 512.0);

    r = test::run_pelican_in(
        {"template", "-m", dir / "loops.jinja", "--messages", dir / "conv.json", "--template-max-steps", "0"},
        dir);
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.err, "--template-max-steps must be at least 1")) << r.err;
    r = test::run_pelican_in({"template", "-m", dir / "loops.jinja", "--messages", dir / "conv.json",
                              "--template-max-bytes", "-5"},
                             dir);
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.err, "--template-max-bytes must be at least 1")) << r.err;
}

}  // namespace
}  // namespace pelican
