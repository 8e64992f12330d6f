#include "jinja/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/mmap_file.h"
#include "formats/gguf.h"
#include "jinja/jinja.h"

namespace pelican::jinja {

using json = nlohmann::ordered_json;

namespace {

// 1-based line and column of byte offset `pos` in `text`.
std::pair<size_t, size_t> line_col(std::string_view text, size_t pos) {
    pos = std::min(pos, text.size());
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos; ++i) {
        if (text[i] == '\n') {
            ++line;
            col = 1;
        } else {
            ++col;
        }
    }
    return {line, col};
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at ...: " prefix.
std::string short_reason(const char* what) {
    std::string s = what;
    auto colon = s.find(": ");
    return colon == std::string::npos ? s : s.substr(colon + 2);
}

}  // namespace

Expected<json> parse_json_text(std::string_view json_text, std::string_view name) {
    try {
        return json::parse(json_text.begin(), json_text.end());
    } catch (const json::parse_error& e) {
        // e.byte is 1-based: the byte where parsing failed.
        auto [line, col] = line_col(json_text, e.byte > 0 ? e.byte - 1 : 0);
        return make_error("{}: invalid JSON at line {}, column {}: {}", name, line, col,
                          short_reason(e.what()));
    } catch (const json::exception& e) {
        return make_error("{}: invalid JSON: {}", name, short_reason(e.what()));
    }
}

Expected<ChatInput> parse_chat_input(std::string_view json_text, std::string_view name) {
    PELICAN_ASSIGN(json doc, parse_json_text(json_text, name));
    ChatInput in;
    if (doc.is_array()) {
        in.messages = std::move(doc);
    } else if (doc.is_object()) {
        auto m = doc.find("messages");
        if (m == doc.end() || !m->is_array())
            return make_error("{}: expected an object with a \"messages\" array", name);
        in.messages = std::move(*m);
        auto t = doc.find("tools");
        if (t != doc.end() && !t->is_null()) {
            if (!t->is_array()) return make_error("{}: \"tools\" must be an array", name);
            in.tools = std::move(*t);
        }
    } else {
        return make_error("{}: expected a JSON array of messages or an object with \"messages\"", name);
    }
    return in;
}

Expected<json> parse_tools(std::string_view json_text, std::string_view name) {
    PELICAN_ASSIGN(json doc, parse_json_text(json_text, name));
    if (doc.is_object() && doc.contains("tools")) doc = std::move(doc["tools"]);
    if (!doc.is_array())
        return make_error("{}: expected a JSON array of tools or an object with \"tools\"", name);
    return doc;
}

Expected<json> normalize_messages(json messages) {
    if (!messages.is_array()) return make_error("chat: messages must be a JSON array");
    for (size_t i = 0; i < messages.size(); ++i) {
        json& m = messages[i];
        if (!m.is_object()) return make_error("chat: messages[{}] is not an object", i);
        auto calls = m.find("tool_calls");
        if (calls == m.end() || !calls->is_array()) continue;
        for (json& call : *calls) {
            if (!call.is_object()) continue;
            auto fn = call.find("function");
            if (fn == call.end() || !fn->is_object()) continue;
            auto args = fn->find("arguments");
            if (args == fn->end() || !args->is_string()) continue;
            const auto& s = args->get_ref<const std::string&>();
            json parsed = json::parse(s, nullptr, /*allow_exceptions=*/false);
            if (parsed.is_object()) *args = std::move(parsed);
        }
    }
    return messages;
}

Expected<json> build_chat_context(const json& messages, const json& tools, const ChatTemplateOptions& opt) {
    PELICAN_ASSIGN(json msgs, normalize_messages(messages));
    if (!tools.is_null() && !tools.is_array()) return make_error("chat: tools must be a JSON array");
    // The keyword arguments of transformers' compiled_template.render(), in its order.
    json ctx = json::object();
    ctx["messages"] = std::move(msgs);
    ctx["tools"] = tools;        // None when no tools are given
    ctx["documents"] = nullptr;  // pelican takes no documents
    ctx["add_generation_prompt"] = opt.add_generation_prompt;
    // special_tokens_map: only the tokens the tokenizer sets.
    if (!opt.bos_token.empty()) ctx["bos_token"] = opt.bos_token;
    if (!opt.eos_token.empty()) ctx["eos_token"] = opt.eos_token;
    return ctx;
}

Expected<std::string> apply_chat_template(std::string_view template_source, const json& messages,
                                          const json& tools, const ChatTemplateOptions& opt) {
    PELICAN_ASSIGN(json ctx, build_chat_context(messages, tools, opt));
    PELICAN_ASSIGN(Template tmpl, Template::parse(template_source));
    RenderOptions ro;
    ro.now = opt.now;
    ro.max_steps = opt.max_steps;
    ro.max_bytes = opt.max_bytes;
    return tmpl.render(ctx, ro);
}

}  // namespace pelican::jinja

// ---- loading a model's template ---------------------------------------------------------

namespace pelican::jinja {
namespace {

// tokenizer_config.json token fields: "text" or {"content": "text", ...} (an AddedToken).
std::string token_field(const json& cfg, const char* key) {
    auto it = cfg.find(key);
    if (it == cfg.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object()) {
        auto c = it->find("content");
        if (c != it->end() && c->is_string()) return c->get<std::string>();
    }
    return "";
}

// "chat_template": "..." or [{"name": "default", "template": "..."}, ...].
Expected<std::string> template_field(const json& v, const std::string& origin) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) {
        const json* pick = nullptr;
        for (const json& e : v) {
            if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
            if (!pick) pick = &e;
            if (e.value("name", std::string()) == "default") pick = &e;
        }
        if (pick) return (*pick)["template"].get<std::string>();
    }
    return make_error("{}: \"chat_template\" is neither a string nor a list of {{name, template}}", origin);
}

Expected<ModelChatTemplate> load_from_gguf(const std::string& path) {
    PELICAN_ASSIGN(GgufFile f, GgufFile::open(path));
    ModelChatTemplate out;
    out.origin = path + ":tokenizer.chat_template";
    auto src = f.get_string("tokenizer.chat_template");
    if (!src) return make_error("{}: no tokenizer.chat_template in this GGUF file", path);
    out.source = std::move(*src);
    const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
    auto token_text = [&](const char* key) -> std::string {
        auto id = f.get_int(key);
        if (!id || !tokens || tokens->type != GgufType::ARRAY || tokens->elem_type != GgufType::STRING)
            return "";
        if (*id < 0 || static_cast<uint64_t>(*id) >= tokens->arr.size()) return "";
        return tokens->arr[static_cast<size_t>(*id)].str;
    };
    out.bos_token = token_text("tokenizer.ggml.bos_token_id");
    out.eos_token = token_text("tokenizer.ggml.eos_token_id");
    return out;
}

Expected<ModelChatTemplate> load_from_hf_folder(const std::string& dir) {
    namespace fs = std::filesystem;
    ModelChatTemplate out;
    json cfg = json::object();
    const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
    if (fs::exists(cfg_path)) {
        PELICAN_ASSIGN(std::string text, read_text_file(cfg_path));
        PELICAN_ASSIGN(cfg, parse_json_text(text, cfg_path));
        if (!cfg.is_object()) return make_error("{}: expected a JSON object", cfg_path);
        out.bos_token = token_field(cfg, "bos_token");
        out.eos_token = token_field(cfg, "eos_token");
    }
    const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
    const std::string json_path = (fs::path(dir) / "chat_template.json").string();
    if (fs::exists(jinja_path)) {
        PELICAN_ASSIGN(out.source, read_text_file(jinja_path));
        out.origin = jinja_path;
        return out;
    }
    if (fs::exists(json_path)) {
        PELICAN_ASSIGN(std::string text, read_text_file(json_path));
        PELICAN_ASSIGN(json doc, parse_json_text(text, json_path));
        if (doc.is_object() && doc.contains("chat_template")) {
            out.origin = json_path + ":chat_template";
            PELICAN_ASSIGN(out.source, template_field(doc["chat_template"], out.origin));
            return out;
        }
    }
    if (cfg.contains("chat_template")) {
        out.origin = cfg_path + ":chat_template";
        PELICAN_ASSIGN(out.source, template_field(cfg["chat_template"], out.origin));
        return out;
    }
    return make_error(
        "{}: no chat template (looked for chat_template.jinja, chat_template.json and "
        "tokenizer_config.json \"chat_template\")",
        dir);
}

bool has_gguf_magic(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    return f.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

}  // namespace

Expected<ModelChatTemplate> load_model_chat_template(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return load_from_hf_folder(path);
    if (!std::filesystem::exists(path, ec)) return make_error("{}: no such file or folder", path);
    if (has_gguf_magic(path)) return load_from_gguf(path);
    ModelChatTemplate out;
    PELICAN_ASSIGN(out.source, read_text_file(path));
    out.origin = path;
    return out;
}

}  // namespace pelican::jinja
