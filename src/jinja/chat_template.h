// Hugging Face-style chat templating: builds the context transformers' apply_chat_template
// gives a template and renders it with the Jinja interpreter. tools/templates/render_reference.py
// builds the same context in Python; tests/unit/chat_template_test.cpp compares the two byte for
// byte.
//
// The context, as transformers' render_jinja_template passes it (compiled_template.render(
// messages=..., tools=..., documents=..., add_generation_prompt=..., **special_tokens_map)):
//  * messages;
//  * tools: the tools list, or None when no tools are given (so `tools is defined` is true and
//    `tools is none` is true);
//  * documents: None (pelican takes no documents);
//  * add_generation_prompt;
//  * bos_token, eos_token: the tokenizer's texts. transformers' special_tokens_map holds only the
//    special tokens the tokenizer sets, so an empty text here leaves the variable undefined.
//    (The map can also hold unk/sep/pad/cls/mask_token and additional_special_tokens; pelican
//    passes only BOS and EOS: none of the reference templates reads the others.)
// JSON objects keep their key order (nlohmann::ordered_json), as Python's dicts do, so `tojson`
// and `items()` list keys in the order of the input.
//
// One difference from transformers, on purpose: a tool call whose function.arguments is a JSON
// string holding an object gets that object (OpenAI-style requests send arguments as a string;
// templates expect a dict; vLLM and llama.cpp convert the same way). Other strings stay. With
// object arguments the rendering is exactly transformers'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "jinja/jinja.h"

namespace pelican::jinja {

struct ChatTemplateOptions {
    bool add_generation_prompt = false;
    std::string bos_token;  // text of the BOS token ("<s>"); "" when the model has none: undefined
    std::string eos_token;  // likewise
    // Instant for strftime_now(); nullopt = now. Formatted as local time (tests run with TZ=UTC).
    std::optional<std::time_t> now;
    // Limits of the render (jinja::RenderOptions): a template from a downloaded model is untrusted
    // and stops with an error past either instead of hanging or exhausting memory.
    uint64_t max_steps = kDefaultMaxSteps;  // step budget
    size_t max_bytes = kDefaultMaxBytes;    // memory the render may hold at once
};

// A conversation as read from a file: messages (array of objects) and tools (array or null).
struct ChatInput {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null when absent
};

// Parses JSON text holding either an array of messages or an object {"messages": [...],
// "tools": [...]?}. `name` names the source in errors, which give line and column.
Expected<ChatInput> parse_chat_input(std::string_view json_text, std::string_view name);
// Parses JSON text holding a tools array, or an object with a "tools" array.
Expected<nlohmann::ordered_json> parse_tools(std::string_view json_text, std::string_view name);

// Parses JSON text with an error naming `name`, line and column.
Expected<nlohmann::ordered_json> parse_json_text(std::string_view json_text, std::string_view name);

// Checks shapes and converts JSON-string tool call arguments to objects (see above).
Expected<nlohmann::ordered_json> normalize_messages(nlohmann::ordered_json messages);

// The exact context object handed to the template.
Expected<nlohmann::ordered_json> build_chat_context(const nlohmann::ordered_json& messages,
                                                    const nlohmann::ordered_json& tools,
                                                    const ChatTemplateOptions& opt);

// A model's chat template and the BOS/EOS texts it is rendered with.
struct ModelChatTemplate {
    std::string source;  // Jinja text
    std::string bos_token, eos_token;
    std::string origin;  // where the template came from, for messages ("model.gguf:tokenizer.chat_template")
};

// Loads the chat template of `path`:
//  * a GGUF file: tokenizer.chat_template; BOS/EOS texts from tokenizer.ggml.{bos,eos}_token_id;
//  * an HF folder: chat_template.jinja, else chat_template.json, else tokenizer_config.json
//    "chat_template" (a string, or a list of {name, template}: "default" or the first);
//    BOS/EOS from tokenizer_config.json (a string or {"content": ...});
//  * any other file: the Jinja text itself, BOS/EOS empty.
Expected<ModelChatTemplate> load_model_chat_template(const std::string& path);

// Parses `template_source` and renders it for the conversation.
Expected<std::string> apply_chat_template(std::string_view template_source,
                                          const nlohmann::ordered_json& messages,
                                          const nlohmann::ordered_json& tools,
                                          const ChatTemplateOptions& opt);

}  // namespace pelican::jinja
