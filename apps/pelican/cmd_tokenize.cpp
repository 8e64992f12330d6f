// pelican tokenize -m MODEL (-p TEXT | -f FILE)... [--no-special] [--no-bos] [--keep-newline] [--json]
// MODEL is a GGUF file, a tokenizer.json or a Hugging Face folder. Every input (all -p texts in
// order, then all -f files in order; "-f -" reads stdin) prints one line: its token ids separated
// by spaces, or with --json one JSON array per line ("[15496, 995]"). The ids are what `pelican
// run` feeds the model for the same raw prompt: special-token texts recognized and BOS/EOS added as
// the tokenizer says (Hugging Face's tokenizer(text)); files lose one trailing newline as in run.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "prompt_input.h"
#include "tokenizer/tokenizer.h"

namespace pelican::cli {
namespace {

struct TokenizeArgs {
    std::string model;
    std::vector<std::string> prompts;
    std::vector<std::string> files;
    bool no_special = false;
    bool no_bos = false;
    bool keep_newline = false;
    bool json = false;
    bool legacy_flag = false;  // --special / --bos: now the default
};

std::string format_ids(const std::vector<int32_t>& ids, bool json) {
    std::string s = json ? "[" : "";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += json ? ", " : " ";
        s += std::to_string(ids[i]);
    }
    if (json) s += "]";
    s += '\n';
    return s;
}

int run_tokenize(const TokenizeArgs& a) {
    if (a.prompts.empty() && a.files.empty())
        return report_usage_error("tokenize: give at least one -p TEXT or -f FILE");
    // Read every input first so a missing file fails before any output.
    std::vector<std::string> inputs = a.prompts;
    for (const auto& path : a.files) {
        auto text = read_prompt_input(path, a.keep_newline);
        if (!text) return report_error("tokenize: -f: " + text.error().message);
        inputs.push_back(std::move(*text));
    }
    auto tok = Tokenizer::load(a.model);
    if (!tok) return report_error(tok.error());
    const EncodeOptions opt{.add_special = !a.no_bos, .parse_special = !a.no_special};
    for (const auto& text : inputs) {
        const std::string line = format_ids(tok->encode(text, opt), a.json);
        std::fwrite(line.data(), 1, line.size(), stdout);
    }
    return 0;
}

void setup(CLI::App& app) {
    auto args = std::make_shared<TokenizeArgs>();
    auto* sub = app.add_subcommand("tokenize", "Print the token ids of texts (one line per input)");
    sub->add_option("-m,--model", args->model, "GGUF file, tokenizer.json or Hugging Face folder")
        ->required();
    sub->add_option("-p,--prompt", args->prompts, "Text to tokenize (repeatable)");
    sub->add_option("-f,--file", args->files, "File to tokenize, '-' for stdin (repeatable)");
    sub->add_flag("--no-special", args->no_special,
                  "Treat special-token texts (<|im_start|>) as plain text instead of single tokens");
    sub->add_flag("--no-bos", args->no_bos, "Do not add BOS/EOS (added by default as the tokenizer says)");
    sub->add_flag("--keep-newline", args->keep_newline, "Keep one trailing newline of -f inputs");
    // Before they became the default (kept so old command lines still work).
    sub->add_flag("--special", args->legacy_flag, "")->group("");
    sub->add_flag("--bos", args->legacy_flag, "")->group("");
    sub->add_flag("--json", args->json, "Print one JSON array per input");
    sub->callback([args] { set_exit_code(run_tokenize(*args)); });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(tokenize, pelican::cli::setup);
