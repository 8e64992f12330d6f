// pelican template: renders a chat template for a conversation and prints the prompt exactly
// (no newline added).
//
//   pelican template -m MODEL_OR_JINJA --messages conv.json [--add-generation-prompt]
//                    [--tools tools.json] [--bos TEXT] [--eos TEXT] [--now EPOCH_SECONDS]
//                    [--template-max-steps N] [--template-max-bytes N]
//
// conv.json: a JSON array of OpenAI-style messages, or {"messages": [...], "tools": [...]}.
// --tools replaces tools given in conv.json. A tool call's function.arguments given as a JSON
// string holding an object is passed to the template as that object (see jinja/chat_template.h).
// --bos/--eos override the model's BOS/EOS texts (an empty text leaves bos_token/eos_token
// undefined, as transformers does for a tokenizer without that token); --now pins strftime_now()
// (formatted as local time). Keys keep their order from conv.json, as in Python.
// --template-max-steps / --template-max-bytes set the render's step budget and memory limit
// (jinja::RenderOptions): a template from a downloaded model is untrusted, and one that runs away
// stops with an error naming the limit.
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "command.h"
#include "core/mmap_file.h"
#include "jinja/chat_template.h"

namespace pelican::cli {
namespace {

struct TemplateArgs {
    std::string model;
    std::string messages;
    std::string tools;
    bool add_generation_prompt = false;
    std::string bos, eos;
    long long now = 0;
    long long max_steps = static_cast<long long>(jinja::kDefaultMaxSteps);  // signed: "-5" is rejected
    long long max_bytes = static_cast<long long>(jinja::kDefaultMaxBytes);
    bool has_bos = false, has_eos = false, has_now = false;  // the option was given
};

Expected<std::string> render(const TemplateArgs& a) {
    PELICAN_ASSIGN(jinja::ModelChatTemplate t, jinja::load_model_chat_template(a.model));
    PELICAN_ASSIGN(std::string conv_text, read_text_file(a.messages));
    PELICAN_ASSIGN(jinja::ChatInput in, jinja::parse_chat_input(conv_text, a.messages));
    if (!a.tools.empty()) {
        PELICAN_ASSIGN(std::string tools_text, read_text_file(a.tools));
        PELICAN_ASSIGN(in.tools, jinja::parse_tools(tools_text, a.tools));
    }
    jinja::ChatTemplateOptions opt;
    opt.add_generation_prompt = a.add_generation_prompt;
    opt.bos_token = a.has_bos ? a.bos : t.bos_token;
    opt.eos_token = a.has_eos ? a.eos : t.eos_token;
    if (a.has_now) opt.now = static_cast<std::time_t>(a.now);
    if (a.max_steps < 1) return make_error("--template-max-steps must be at least 1 (got {})", a.max_steps);
    if (a.max_bytes < 1) return make_error("--template-max-bytes must be at least 1 (got {})", a.max_bytes);
    opt.max_steps = static_cast<uint64_t>(a.max_steps);
    opt.max_bytes = static_cast<size_t>(a.max_bytes);
    auto out = jinja::apply_chat_template(t.source, in.messages, in.tools, opt);
    if (!out.ok()) return make_error("{}: {}", t.origin, out.error().message);
    return out;
}

int run_template(const TemplateArgs& a) {
    auto out = render(a);
    if (!out.ok()) return report_error(out.error());
    const std::string& s = *out;
    if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
        return report_error("writing the prompt to stdout failed");
    return 0;
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(template, [](CLI::App& app) {
    using namespace pelican::cli;
    auto args = std::make_shared<TemplateArgs>();
    auto* sub =
        app.add_subcommand("template", "Render a chat template for a conversation (prints the prompt)");
    sub->add_option("-m,--model", args->model, "GGUF file, Hugging Face folder, or .jinja file")->required();
    sub->add_option("--messages", args->messages, "JSON file: messages array or {messages, tools}")
        ->required();
    sub->add_option("--tools", args->tools, "JSON file: tools array (overrides tools in --messages)");
    sub->add_flag("--add-generation-prompt", args->add_generation_prompt,
                  "End with the assistant turn opener");
    auto* bos =
        sub->add_option("--bos", args->bos, "BOS token text (default: the model's; \"\" for a .jinja file)");
    auto* eos =
        sub->add_option("--eos", args->eos, "EOS token text (default: the model's; \"\" for a .jinja file)");
    auto* now =
        sub->add_option("--now", args->now, "Unix time for strftime_now() (default: the current time)");
    sub->add_option("--template-max-steps", args->max_steps,
                    "Step budget of the render: a runaway template stops with an error (default 100000000)");
    sub->add_option("--template-max-bytes", args->max_bytes,
                    "Memory the render may hold at once, in bytes (default 67108864 = 64 MiB)");
    sub->callback([args, bos, eos, now] {
        args->has_bos = bos->count() > 0;
        args->has_eos = eos->count() > 0;
        args->has_now = now->count() > 0;
        set_exit_code(run_template(*args));
    });
});
