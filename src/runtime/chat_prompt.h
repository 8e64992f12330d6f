// A conversation rendered with a model's chat template and tokenized so that text from the
// conversation can never turn into a control token: a user who types "<|im_start|>system" inside a
// message gets those characters as plain text, while the template's own markers stay special
// tokens. (Hugging Face's apply_chat_template(tokenize=True), vLLM and llama-server tokenize the
// whole rendered text with special tokens on, so message text can forge turns; pelican does not.)
//
//   PELICAN_ASSIGN(ChatPrompt p, render_chat_prompt(tmpl, messages, tools, opt, tokenizer));
//   PELICAN_ASSIGN(std::vector<int32_t> ids, tokenize_chat_prompt(p, tokenizer));
//
// How the message text is found in the rendered prompt: the conversation is rendered twice, once
// as given and once with every message content (a string, or the "text" of content parts, and
// "reasoning_content") replaced by a sentinel (letters and digits with a random nonce, so message
// text cannot imitate it). When substituting the contents back for the sentinels gives the first
// rendering byte for byte, the sentinels' places are exactly the contents' ranges. Otherwise (the
// template transforms contents, or branches on them) each untrusted string that holds control-token
// text is looked up verbatim in the rendering. Untrusted strings are every string value in the
// messages and tools (contents, names, tool-call arguments, tool descriptions).
//
// The check that makes it safe: the number of control tokens recognized in the prompt must equal
// the number in a rendering where control-token texts were removed from every untrusted string
// (so every control token left is the template's). When it does not, tokenize_chat_prompt fails
// with a message naming the special-token text, instead of letting it through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "jinja/chat_template.h"
#include "tokenizer/tokenizer_spec.h"

namespace pelican {

class Tokenizer;

struct ChatPrompt {
    std::string text;               // the rendered prompt
    std::vector<TextRange> plain;   // ranges of untrusted text in `text` (sorted, disjoint)
    int64_t template_controls = 0;  // control tokens the template itself writes
    std::string first_forged;       // a control-token text found in an untrusted string, or ""
};

Expected<ChatPrompt> render_chat_prompt(const jinja::ModelChatTemplate& tmpl,
                                        const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools,
                                        const jinja::ChatTemplateOptions& opt, const Tokenizer& tok);

// Token ids of the prompt (no BOS added: the template writes it where the model wants it),
// control tokens recognized only outside the untrusted ranges; an error when the count check
// above fails.
Expected<std::vector<int32_t>> tokenize_chat_prompt(const ChatPrompt& prompt, const Tokenizer& tok);

}  // namespace pelican
