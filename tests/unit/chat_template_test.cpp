// Chat templates against Python jinja2: every real template in ../shared/data/chat-templates,
// rendered for every conversation in tests/data/chat/conversations with and without the
// generation prompt, must equal tools/templates/render_reference.py's output byte for byte
// (tests/data/chat/expected/<template>.json). Expected errors must be errors here too; when the
// template itself raised (raise_exception) the messages must match.
// Plus: the chat layer's own rules (normalisation, context, input parsing, loading a model's
// template) and the `pelican template` CLI.
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "gguf_test_util.h"
#include "jinja/chat_template.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const std::string kTemplateDir = PELICAN_SHARED_DIR "/data/chat-templates";
const std::string kChatDir = PELICAN_SOURCE_DIR "/tests/data/chat";

// strftime_now() formats local time; the reference pins 2026-01-15 10:30:00 UTC.
const bool kUtc = [] {
    setenv("TZ", "UTC", 1);
    tzset();
    return true;
}();

json load_json(const std::string& path) {
    auto text = read_text_file(path);
    if (!text.ok()) return json();
    return json::parse(*text, nullptr, /*allow_exceptions=*/false);
}

std::vector<std::string> template_stems() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(kTemplateDir, ec))
        if (e.path().extension() == ".jinja") out.push_back(e.path().stem().string());
    std::sort(out.begin(), out.end());
    return out;
}

struct Reference {
    json settings;
    std::map<std::string, json> conversations;  // name -> {"messages", "tools"?}
};

const Reference& reference() {
    static const Reference r = [] {
        Reference r;
        r.settings = load_json(kChatDir + "/settings.json");
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(kChatDir + "/conversations", ec))
            if (e.path().extension() == ".json")
                r.conversations[e.path().stem().string()] = load_json(e.path());
        return r;
    }();
    return r;
}

jinja::ChatTemplateOptions options(bool gen) {
    const json& s = reference().settings;
    jinja::ChatTemplateOptions o;
    o.add_generation_prompt = gen;
    o.bos_token = s.value("bos_token", "");
    o.eos_token = s.value("eos_token", "");
    o.now = static_cast<std::time_t>(s.value("now_epoch", 0LL));
    return o;
}

// Printable excerpt of s around byte `pos`.
std::string excerpt(const std::string& s, size_t pos) {
    size_t b = pos > 60 ? pos - 60 : 0;
    return json(s.substr(b, 120)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string describe_difference(const std::string& want, const std::string& got) {
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    size_t line = 1 + std::count(want.begin(), want.begin() + static_cast<long>(i), '\n');
    return "differs at byte " + std::to_string(i) + " (line " + std::to_string(line) + "), sizes " +
           std::to_string(want.size()) + " vs " + std::to_string(got.size()) +
           "\n      jinja2:  " + excerpt(want, i) + "\n      pelican: " + excerpt(got, i);
}

struct Outcome {
    int identical = 0, total = 0;
    std::vector<std::string> failures;
};

// One rendering: "" when pelican agrees with the expectation, else what went wrong.
std::string check_one(const std::string& source, const json& conv, bool gen, const json& want) {
    Expected<std::string> got = Error{"not run"};
    try {
        got = jinja::apply_chat_template(source, conv.value("messages", json::array()),
                                         conv.value("tools", json()), options(gen));
    } catch (const std::exception& e) {
        return std::string("threw: ") + e.what();
    }
    if (want.value("ok", false)) {
        if (!got.ok()) return "failed: " + got.error().message;
        const std::string text = want.value("text", "");
        return *got == text ? "" : describe_difference(text, *got);
    }
    const std::string err = want.value("error", "");
    if (got.ok()) return "rendered, but jinja2 failed with: " + err;
    if (want.value("raised", false) && got.error().message != err)
        return "raise_exception message differs: jinja2 \"" + err + "\", pelican \"" + got.error().message +
               "\"";
    return "";
}

Outcome check_template(const std::string& stem) {
    Outcome o;
    auto source = read_text_file(kTemplateDir + "/" + stem + ".jinja");
    const json expected = load_json(kChatDir + "/expected/" + stem + ".json");
    if (!source.ok() || !expected.is_object()) {
        o.total = 1;
        o.failures.push_back("missing template or expected file for " + stem);
        return o;
    }
    for (const auto& [key, want] : expected.items()) {
        ++o.total;
        const auto slash = key.rfind('/');
        const auto conv = reference().conversations.find(key.substr(0, slash));
        if (slash == std::string::npos || conv == reference().conversations.end()) {
            o.failures.push_back(key + ": no such conversation");
            continue;
        }
        std::string why = check_one(*source, conv->second, key.substr(slash + 1) == "gen", want);
        if (why.empty())
            ++o.identical;
        else
            o.failures.push_back(key + ": " + why);
    }
    return o;
}

class RealTemplate : public testing::TestWithParam<std::string> {};

TEST_P(RealTemplate, MatchesJinja2) {
    Outcome o = check_template(GetParam());
    std::string report;
    for (size_t i = 0; i < o.failures.size() && i < 4; ++i) report += "\n  " + o.failures[i];
    if (o.failures.size() > 4) report += "\n  ... and " + std::to_string(o.failures.size() - 4) + " more";
    EXPECT_EQ(o.identical, o.total) << GetParam() << ": " << o.identical << "/" << o.total << " identical"
                                    << report;
}

std::string param_name(const testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, RealTemplate, testing::ValuesIn(template_stems()), param_name);

// Checks the reference data is complete and prints the overall score.
TEST(ChatTemplates, Summary) {
    const auto stems = template_stems();
    ASSERT_GE(stems.size(), 60u) << "templates not found in " << kTemplateDir;
    ASSERT_GE(reference().conversations.size(), 6u);
    ASSERT_TRUE(reference().settings.contains("now_epoch"));
    int n_identical = 0, n_ok = 0, n_total = 0;
    for (const auto& stem : stems) {
        const json expected = load_json(kChatDir + "/expected/" + stem + ".json");
        ASSERT_TRUE(expected.is_object())
            << "no expected renderings for " << stem << "; run python3 tools/templates/render_reference.py";
        EXPECT_EQ(expected.size(), 2 * reference().conversations.size()) << stem << ": stale expected file";
        Outcome o = check_template(stem);
        n_identical += o.identical == o.total;
        n_ok += o.identical;
        n_total += o.total;
    }
    std::printf("chat templates: %d/%zu identical (%d/%d renderings)\n", n_identical, stems.size(), n_ok,
                n_total);
    RecordProperty("identical_templates", n_identical);
    RecordProperty("identical_renderings", n_ok);
}

// ---- the chat layer's own rules ----------------------------------------------------------

TEST(ChatLayer, StringArgumentsHoldingAnObjectBecomeObjects) {
    json msgs = json::parse(R"([{"role":"assistant","content":"","tool_calls":[
        {"type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": [\"x\"]}"}},
        {"type":"function","function":{"name":"g","arguments":"not json"}},
        {"type":"function","function":{"name":"h","arguments":"[1, 2]"}}]}])");
    auto out = jinja::normalize_messages(msgs);
    ASSERT_TRUE(out.ok()) << out.error().message;
    const json& calls = (*out)[0]["tool_calls"];
    // Parsed in the string's key order, as Python's json.loads does.
    EXPECT_EQ(calls[0]["function"]["arguments"].dump(), R"({"b":1,"a":["x"]})");
    EXPECT_EQ(calls[1]["function"]["arguments"], "not json");
    EXPECT_EQ(calls[2]["function"]["arguments"], "[1, 2]");
}

TEST(ChatLayer, RejectsMalformedMessages) {
    EXPECT_FALSE(jinja::normalize_messages(json::parse(R"({"role":"user"})")).ok());
    auto e = jinja::normalize_messages(json::parse(R"([{"role":"user","content":"x"}, 3])"));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("messages[1]"), std::string::npos) << e.error().message;
    EXPECT_FALSE(jinja::build_chat_context(json::array(), json::object(), {}).ok())
        << "tools must be an array";
}

// transformers: compiled_template.render(messages=..., tools=tool_schemas or None, documents=None,
// add_generation_prompt=..., **special_tokens_map), the map holding only the tokens that are set.
TEST(ChatLayer, ContextMatchesTransformers) {
    jinja::ChatTemplateOptions o;
    o.add_generation_prompt = true;
    o.bos_token = "<s>";
    auto a = jinja::build_chat_context(json::array(), json(), o);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->dump(), R"({"messages":[],"tools":null,"documents":null,"add_generation_prompt":true,)"
                         R"("bos_token":"<s>"})");
    auto b = jinja::build_chat_context(json::array(), json::array({json::object()}), o);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)["tools"].size(), 1u);

    // What templates see: tools and documents defined and none; no EOS text: eos_token undefined.
    const char* probe =
        "{{ tools is defined }} {{ tools is none }} {{ documents is defined }} {{ documents is none }} "
        "{{ bos_token is defined }} {{ eos_token is defined }}";
    auto r = jinja::apply_chat_template(probe, json::array(), json(), o);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(*r, "True True True True True False");
}

// Objects reach the template with their keys in input order, nested ones included, as Python's
// dicts do (json.load keeps file order).
TEST(ChatLayer, KeysKeepInputOrder) {
    auto in = jinja::parse_chat_input(R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}}"}}]}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "object"}}, "required": ["zeta"]}}}]})",
                                      "order.json");
    ASSERT_TRUE(in.ok()) << in.error().message;
    const char* tpl =
        "{{ messages[0]|tojson }}\n{{ tools[0]|tojson }}\n"
        "{% for k, v in messages[0].tool_calls[0].function.arguments.items() %}{{ k }};{% endfor %}|"
        "{{ messages[0].tool_calls[0].function.arguments }}";
    auto r = jinja::apply_chat_template(tpl, in->messages, in->tools, {});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(
        *r,
        "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", "
        "\"function\": "
        "{\"name\": \"f\", \"arguments\": {\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}}}}]}\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"zeta\": {\"type\": \"integer\"}, \"alpha\": {\"type\": \"object\"}}, "
        "\"required\": [\"zeta\"]}}}\n"
        "zeta;alpha;|"
        "{'zeta': 1, 'alpha': {'y': 2, 'b': 3}}");
}

TEST(ChatLayer, InputFileForms) {
    auto arr = jinja::parse_chat_input(R"([{"role":"user","content":"hi"}])", "a.json");
    ASSERT_TRUE(arr.ok());
    EXPECT_EQ(arr->messages.size(), 1u);
    EXPECT_TRUE(arr->tools.is_null());
    auto obj = jinja::parse_chat_input(R"({"messages":[],"tools":[{"type":"function"}]})", "b.json");
    ASSERT_TRUE(obj.ok());
    EXPECT_EQ(obj->tools.size(), 1u);
    EXPECT_FALSE(jinja::parse_chat_input(R"({"msgs":[]})", "c.json").ok());
    EXPECT_FALSE(jinja::parse_chat_input(R"("text")", "d.json").ok());
    EXPECT_FALSE(jinja::parse_chat_input(R"({"messages":[],"tools":{}})", "e.json").ok());
    auto bad = jinja::parse_chat_input("{\n  \"messages\": [\n    {\"role\": \"user\",, }\n  ]\n}", "f.json");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("f.json: invalid JSON at line 3, column 21"), std::string::npos)
        << bad.error().message;
    EXPECT_FALSE(jinja::parse_chat_input("", "g.json").ok());
    EXPECT_FALSE(jinja::parse_chat_input("[\"\xff\"]", "h.json").ok()) << "invalid UTF-8";
}

fs::path fresh_dir(const std::string& name) {
    fs::path d = fs::temp_directory_path() / ("pelican_chat_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

void write(const fs::path& p, const std::string& s) {
    std::FILE* f = std::fopen(p.c_str(), "wb");
    ASSERT_NE(f, nullptr) << p;
    std::fwrite(s.data(), 1, s.size(), f);
    std::fclose(f);
}

TEST(ChatLayer, LoadsTemplateFromHfFolder) {
    fs::path d = fresh_dir("hf");
    json cfg = {{"bos_token", {{"content", "<|begin|>"}, {"lstrip", false}}},
                {"eos_token", "<|end|>"},
                {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                               {{"name", "default"}, {"template", "D"}}})}};
    write(d / "tokenizer_config.json", cfg.dump());
    auto t = jinja::load_model_chat_template(d.string());
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->source, "D");
    EXPECT_EQ(t->bos_token, "<|begin|>");
    EXPECT_EQ(t->eos_token, "<|end|>");
    write(d / "chat_template.jinja", "J");
    t = jinja::load_model_chat_template(d.string());
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->source, "J") << "chat_template.jinja takes precedence";
    EXPECT_EQ(t->bos_token, "<|begin|>");

    fs::path e = fresh_dir("hf_empty");
    write(e / "tokenizer_config.json", "{}");
    auto none = jinja::load_model_chat_template(e.string());
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.error().message.find("no chat template"), std::string::npos) << none.error().message;
    write(e / "tokenizer_config.json", "{\"chat_template\": ");
    EXPECT_FALSE(jinja::load_model_chat_template(e.string()).ok());
    EXPECT_FALSE(jinja::load_model_chat_template((e / "nope.jinja").string()).ok());
    fs::remove_all(d);
    fs::remove_all(e);
}

TEST(ChatLayer, LoadsTemplateFromGguf) {
    test::GgufBuilder b;
    b.header(3, 0, 4);
    b.kv_str("tokenizer.chat_template", "{{ bos_token }}x");
    b.str("tokenizer.ggml.tokens");
    b.u32(9);  // array
    b.u32(8);  // of strings
    b.u64(3);
    b.str("<unk>");
    b.str("<bos>");
    b.str("<eos>");
    b.kv_u32("tokenizer.ggml.bos_token_id", 1);
    b.kv_u32("tokenizer.ggml.eos_token_id", 7);  // out of range: no text
    b.pad_to(32);
    fs::path d = fresh_dir("gguf");
    write(d / "m.gguf", std::string(b.bytes.begin(), b.bytes.end()));
    auto t = jinja::load_model_chat_template((d / "m.gguf").string());
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->source, "{{ bos_token }}x");
    EXPECT_EQ(t->bos_token, "<bos>");
    EXPECT_EQ(t->eos_token, "");
    fs::remove_all(d);
}

// ---- pelican template ------------------------------------------------------------------

struct RunResult {
    int status = -1;
    std::string out;
};

RunResult run_cli(const std::string& args) {
    RunResult r;
    std::FILE* p = ::popen((std::string("'") + PELICAN_BINARY + "' template " + args).c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string expected_text(const std::string& stem, const std::string& key) {
    json e = load_json(kChatDir + "/expected/" + stem + ".json");
    return e.is_object() && e.contains(key) ? e[key].value("text", "<no text>") : "<missing>";
}

TEST(TemplateCli, JinjaFileMatchesJinja2) {
    const std::string stem = "meta-llama-Llama-3.2-3B-Instruct";  // uses tools and strftime_now
    RunResult r =
        run_cli("-m '" + kTemplateDir + "/" + stem + ".jinja' --messages '" + kChatDir +
                "/conversations/tool_calls.json' --add-generation-prompt --bos '<s>' --eos '</s>' --now " +
                std::to_string(reference().settings.value("now_epoch", 0LL)));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, expected_text(stem, "tool_calls/gen"));
}

TEST(TemplateCli, HfFolderMatchesJinja2) {
    const std::string stem = "meta-llama-Llama-3.1-8B-Instruct";  // starts with bos_token
    auto source = read_text_file(kTemplateDir + "/" + stem + ".jinja");
    ASSERT_TRUE(source.ok());
    fs::path d = fresh_dir("cli_hf");
    json cfg = {{"bos_token", {{"content", "<s>"}}}, {"eos_token", "</s>"}, {"chat_template", *source}};
    write(d / "tokenizer_config.json", cfg.dump());
    // Messages as a bare array, tools from a separate file.
    json conv = reference().conversations.at("unicode_escapes");
    write(d / "messages.json", conv["messages"].dump());
    RunResult r = run_cli("-m '" + d.string() + "' --messages '" + (d / "messages.json").string() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, expected_text(stem, "unicode_escapes/nogen"));
    fs::remove_all(d);
}

TEST(TemplateCli, ClearErrors) {
    fs::path d = fresh_dir("cli_err");
    write(d / "bad.json", "[\n  {\"role\": \"user\" \"content\": 1}\n]");
    write(d / "t.jinja", "{{ messages[0].role }}");
    RunResult r =
        run_cli("-m '" + (d / "t.jinja").string() + "' --messages '" + (d / "bad.json").string() + "' 2>&1");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find("bad.json: invalid JSON at line 2, column"), std::string::npos) << r.out;

    write(d / "ok.json", "[{\"role\": \"user\", \"content\": \"hi\"}]");
    r = run_cli("-m '" + (d / "t.jinja").string() + "' --messages '" + (d / "ok.json").string() + "' 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, "user") << "no newline added";

    r = run_cli("-m '" + (d / "missing.gguf").string() + "' --messages '" + (d / "ok.json").string() +
                "' 2>&1");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find("missing.gguf"), std::string::npos) << r.out;

    write(d / "raise.jinja", "{{ raise_exception('Only user turns, please') }}");
    r = run_cli("-m '" + (d / "raise.jinja").string() + "' --messages '" + (d / "ok.json").string() +
                "' 2>&1");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find("Only user turns, please"), std::string::npos) << r.out;
    fs::remove_all(d);
}

}  // namespace
}  // namespace pelican
